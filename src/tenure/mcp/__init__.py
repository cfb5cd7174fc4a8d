"""tenure's tools over MCP: each ``tools/call`` runs as a tenure job.

``pip install 'tenure[mcp]'`` brings the official MCP Python SDK (the tested
release: `TESTED_SDK`). `server` builds the SDK's server over an `App`;
`serve_stdio` and `http_app` / `serve_http` serve it; the ``tenure mcp
MODULE:APP`` command does the same from a shell. Protocol revisions: the newest
the SDK speaks (`PROTOCOL_REVISION`, 2026-07-28) and the handshake revisions
before it; what each can carry (cancel, tasks, questions to the caller) is `_wire`'s
table. Callers are principals (`Principals`, ``--principal``), else their connection.

Module map:

    _server   server(app): lists the tools, runs each tools/call as a job
    _follow   following a job for its caller: progress relayed, its questions asked
    _caller   who is calling: the tenant and scope a caller's keys, tasks and jobs live in
    _auth     principals: stdio's --principal, bearer tokens naming principals
    _ids      task ids and requestState: made and read in one place
    _tasks    MCP tasks: the 2025-11-25 core ones and the 2026-07-28 extension's
    _ask      waitpoints over MCP: the caller's questions, forms and answers
    _outcome  job states as MCP results, in one place
    _trace    a client's trace context: linked, not continued, unless trusted
    _serve    stdio, and streamable HTTP under the dashboard's access rules
    _command  ``tenure mcp MODULE:APP``
    _wire     the protocol revisions and what each wire carries; the SDK release
"""

from __future__ import annotations

try:
    import mcp  # noqa: F401
except ModuleNotFoundError as exc:  # the extra is not installed
    raise ModuleNotFoundError(
        "tenure.mcp needs the MCP Python SDK: pip install 'tenure[mcp]'", name="mcp"
    ) from exc

from ._auth import PRINCIPAL_ENV, TOKENS_ENV, Principals, parse_tokens
from ._caller import ANONYMOUS, KEY_META
from ._outcome import META_KEY
from ._serve import TOKEN_ENV, http_app, serve_http, serve_stdio
from ._server import server
from ._wire import (
    PROTOCOL_REVISION,
    SDK_VERSION,
    TASKS_EXTENSION,
    TASKS_REVISION,
    TESTED_SDK,
)

__all__ = [
    "ANONYMOUS",
    "KEY_META",
    "META_KEY",
    "PRINCIPAL_ENV",
    "PROTOCOL_REVISION",
    "SDK_VERSION",
    "TASKS_EXTENSION",
    "TASKS_REVISION",
    "TESTED_SDK",
    "TOKENS_ENV",
    "TOKEN_ENV",
    "Principals",
    "http_app",
    "parse_tokens",
    "serve_http",
    "serve_stdio",
    "server",
]
