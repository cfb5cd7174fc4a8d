"""tenure's tools over MCP: each ``tools/call`` runs as a tenure job.

``pip install 'tenure[mcp]'`` brings the official MCP Python SDK (the tested
release: `TESTED_SDK`). `server` builds the SDK's server over an `App`;
`serve_stdio` and `http_app` / `serve_http` serve it; the ``tenure mcp
MODULE:APP`` command does the same from a shell. Protocol revisions: the newest
the SDK speaks (`PROTOCOL_REVISION`, 2026-07-28) and the handshake revisions
before it. MCP tasks: those of 2025-11-25 (`TASKS_REVISION`), on connections that
negotiated that revision (see ``_tasks``).

Module map:

    _server   server(app): lists the tools, runs each tools/call as a job, relays progress
    _caller   who is calling: the tenant a caller's jobs and keys live in
    _outcome  job states as MCP results, in one place
    _tasks    MCP tasks: a task-augmented call's task, tasks/get, result, cancel, list
    _serve    stdio, and streamable HTTP under the dashboard's access rules
    _command  ``tenure mcp MODULE:APP``
    _sdk      the SDK release and protocol revisions this adapter targets
"""

from __future__ import annotations

try:
    import mcp  # noqa: F401
except ModuleNotFoundError as exc:  # the extra is not installed
    raise ModuleNotFoundError(
        "tenure.mcp needs the MCP Python SDK: pip install 'tenure[mcp]'", name="mcp"
    ) from exc

from ._caller import KEY_META
from ._outcome import META_KEY
from ._sdk import PROTOCOL_REVISION, SDK_VERSION, TASKS_SUPPORTED, TESTED_SDK
from ._serve import TOKEN_ENV, http_app, serve_http, serve_stdio
from ._server import server
from ._tasks import TASKS_REVISION

__all__ = [
    "KEY_META",
    "META_KEY",
    "PROTOCOL_REVISION",
    "SDK_VERSION",
    "TASKS_REVISION",
    "TASKS_SUPPORTED",
    "TESTED_SDK",
    "TOKEN_ENV",
    "http_app",
    "serve_http",
    "serve_stdio",
    "server",
]
