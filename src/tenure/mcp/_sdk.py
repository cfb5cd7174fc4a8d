"""The seam to the MCP Python SDK: which release and protocol revisions this adapter targets.

Everything version-dependent that is not the job-to-result mapping (`_outcome`)
lives here, so moving to the next SDK release or spec revision starts in two
files.

Tasks. 2025-11-25 has them in the core protocol (``tasks/get``,
``tasks/result``, ``tasks/list``, ``tasks/cancel``, a ``task`` field on
``tools/call``); the current revision, 2026-07-28, moved them into the
``io.modelcontextprotocol/tasks`` extension (SEP-2663: ``tasks/get``,
``tasks/update``, ``tasks/cancel``, ``resultType: "task"``). The SDK release we
target ships the 2025-11-25 task types and dispatches ``tasks/*`` as custom
methods, but implements neither revision's tasks itself; tenure serves the
2025-11-25 ones (`_tasks`, which names the revision in one constant) on
connections that negotiated it. On the 2026-07-28 wire a client's ``task``
field is ignored and the call takes the plain path.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_PROTOCOL_VERSION

Ctx = ServerRequestContext[Any, Any]
"""The request context handlers receive (its lifespan is ours: see `_caller.Channel`)."""

SDK_VERSION = version("mcp")
TESTED_SDK = "2.3.0"  # the release the tests ran against; pyproject pins mcp>=2.3,<3
PROTOCOL_REVISION = LATEST_PROTOCOL_VERSION  # the newest wire revision served (2026-07-28)
HANDSHAKE_REVISIONS = HANDSHAKE_PROTOCOL_VERSIONS  # older clients negotiate one of these
TASKS_SUPPORTED = True  # on the 2025-11-25 handshake wire: see the module docstring and `_tasks`
