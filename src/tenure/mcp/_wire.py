"""Which MCP wire a request came on, and what that wire can carry: the one module that
knows the protocol revisions (and the SDK release this adapter targets).

=================== ======================================= =======================================
                    2025-11-25 (the handshake)              2026-07-28 (per-request envelope)
=================== ======================================= =======================================
connection          stdio or in-memory: one per process or  stdio or in-memory: one per process or
                    connection; HTTP: a stateful session    connection; HTTP: none (each POST alone)
                    (``Mcp-Session-Id``), or none when the
                    server is stateless
cancel a plain call ``notifications/cancelled``             stdio: ``notifications/cancelled``;
                                                            HTTP: closing the call's response
                                                            stream (its only signal, so a dropped
                                                            connection cancels too)
tasks               core: a ``task`` field on               the extension
                    ``tools/call``; ``tasks/get``,          ``io.modelcontextprotocol/tasks``
                    ``tasks/result``, ``tasks/cancel``,     (SEP-2663), when the request declares
                    ``tasks/list``                          it: ``resultType: "task"``,
                                                            ``tasks/get``, ``tasks/update``,
                                                            ``tasks/cancel``; no list
asking the caller   an ``elicitation/create`` request on    an ``input_required`` result (the
                    the call's back channel                 client answers by calling again);
                                                            tasks: ``inputRequests`` in
                                                            ``tasks/get``, ``tasks/update``
progress            ``notifications/progress``; a task's    ``notifications/progress`` on the
                    on ``tasks/result``                     plain path; a task's in its
                                                            ``statusMessage`` (the extension has
                                                            no progress)
=================== ======================================= =======================================

`wire_of` reads one request's wire from what the SDK gives a handler: the negotiated
revision, the HTTP request (or none, on a stream), the server's session mode and the
capabilities the client declared.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, Literal

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp_types.version import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    LATEST_PROTOCOL_VERSION,
    MODERN_PROTOCOL_VERSIONS,
)
from starlette.requests import Request

Ctx = ServerRequestContext[Any, Any]
"""The request context handlers receive (its lifespan is ours: see `_caller.Channel`)."""

SDK_VERSION = version("mcp")
TESTED_SDK = "2.3.0"  # the release the tests ran against; pyproject pins mcp>=2.3,<3
PROTOCOL_REVISION = LATEST_PROTOCOL_VERSION  # the newest wire revision served (2026-07-28)
HANDSHAKE_REVISIONS = HANDSHAKE_PROTOCOL_VERSIONS  # older clients negotiate one of these
TASKS_REVISION = "2025-11-25"  # the handshake revision with tasks in its core
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"  # where tasks live from 2026-07-28 on
RELATED_TASK = "io.modelcontextprotocol/related-task"  # the revisions' _meta key
SESSION_HEADER = "mcp-session-id"
DIGEST_CHARS = 32  # 128 bits of SHA-256

Tasks = Literal["core", "extension"]
Asking = Literal["request", "result"]


def digest(text: str) -> str:
    """A short SHA-256 of ``text`` (any text: lone surrogates included)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


@dataclass(frozen=True, slots=True)
class Wire:
    """One request's wire (see the module's table)."""

    revision: str
    http: bool  # an HTTP request (else a stdio or in-memory connection)
    channel: str | None  # the connection or session it came on (a digest); None: stateless
    tasks: Tasks | None  # which tasks this request may use
    asking: Asking | None  # how the server may ask this caller a question (elicitation)

    @property
    def modern(self) -> bool:
        """The 2026-07-28 era: no handshake, no server-to-client requests."""
        return self.revision in MODERN_PROTOCOL_VERSIONS

    @property
    def cancel_by_stream(self) -> bool:
        """A plain call is cancelled by closing its response stream (2026-07-28 HTTP)."""
        return self.http and self.modern


def wire_of(ctx: Ctx, server: Server[Any], lifespan_channel: str | None) -> Wire:
    """The wire of the request ``ctx`` (``lifespan_channel``: the stream connection's id,
    from the server's lifespan, when the request came on one)."""
    request = ctx.request
    http = isinstance(request, Request)
    revision = ctx.protocol_version
    modern = revision in MODERN_PROTOCOL_VERSIONS
    if not http:
        channel = lifespan_channel if request is None else None
    elif modern or not _stateful(server):
        channel = None  # no session to address: every request stands alone
    else:
        session = request.headers.get(SESSION_HEADER) if isinstance(request, Request) else None
        channel = digest(f"session:{session}") if session else None
    capabilities = ctx.session.client_capabilities
    tasks: Tasks | None = None
    if revision == TASKS_REVISION:
        tasks = "core"
    elif modern and capabilities is not None and TASKS_EXTENSION in (capabilities.extensions or {}):
        tasks = "extension"
    asking: Asking | None = None
    if capabilities is not None and capabilities.elicitation is not None:
        if modern:
            asking = "result"
        elif ctx.session.can_send_request and (not http or channel is not None):
            asking = "request"
    return Wire(revision, http, channel, tasks, asking)


def _stateful(server: Server[Any]) -> bool:
    """Whether the server's HTTP sessions are the SDK's own (issued and checked by it)."""
    try:
        return not server.session_manager.stateless
    except RuntimeError:  # a session manager we did not see built: its ids are unchecked
        return False


LEFT = "tenure.mcp.client_left"  # the ASGI scope's key for `Left` (set by `_serve`)


class Left:
    """Whether the client closed an HTTP request's stream (its ``http.disconnect`` came):
    on the 2026-07-28 HTTP wire, the revision's cancel. A request whose handler is
    cancelled without it (the server stopping) is not the client's cancel."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen = False


def client_left(ctx: Ctx) -> bool:
    """Whether the client closed the stream of the HTTP request ``ctx`` came on."""
    request = ctx.request
    left = request.scope.get(LEFT) if isinstance(request, Request) else None
    return isinstance(left, Left) and left.seen
