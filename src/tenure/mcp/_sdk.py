"""The seam to the MCP Python SDK: which release and protocol revisions this adapter targets.

Everything version-dependent that is not the job-to-result mapping (`_outcome`)
lives here, so moving to the next SDK release or spec revision starts in two
files.

Tasks. The current revision, 2026-07-28, moved tasks out of the core protocol
into the ``io.modelcontextprotocol/tasks`` extension (SEP-2663: ``tasks/get``,
``tasks/update``, ``tasks/cancel``, ``resultType: "task"``); 2025-11-25 had them
in the core (``tasks/get``, ``tasks/result``, ``tasks/list``, ``tasks/cancel``).
The SDK release we target implements neither: it keeps the 2025-11-25 task
types as types only (never dispatched: a task-augmented ``tools/call`` result
would be sieved back to a plain ``CallToolResult``) and ships no tasks
extension. So tenure serves the plain path only — ``tools/call`` answers with
the job's outcome — and advertises no task capability; a client's ``task``
request field is ignored, as the 2026-07-28 extension says servers must.
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
TASKS_SUPPORTED = False  # see the module docstring
