"""Serving the MCP server: over stdio, or streamable HTTP under the dashboard's access rules.

HTTP binds to loopback unless an access token is set (``TENURE_MCP_TOKEN``, at
least 16 characters; then every request must carry ``Authorization: Bearer
<token>``), exactly the dashboard's rule (`check_bind`). Without a token every
account on this machine can call every tool (`tenure mcp --http` says so when it
starts). Every request must also name this server in its Host header
(`HostCheck`), so DNS rebinding cannot turn a web page into a caller of a
loopback server, and a browser's request from another origin is refused on any
bind (`OriginCheck`). The SDK's own checks are turned off: it applies them only
when bound to 127.0.0.1, localhost or ::1 (not 127.0.0.2, not a named bind), and
its Host list would refuse the names given as ``allowed_hosts``.

The token opens the door; it does not say who is calling, so it does not merge
callers: each session keeps its own scope (see `_caller`). To give callers an
identity that outlives a session, serve ``server(app).streamable_http_app(...)``
with the SDK's own ``token_verifier``: each principal then has its own scope.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import uvicorn
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .._app import App
from .._errors import ConfigError
from .._observe._dashboard import WILDCARD_BINDS, _same, check_bind
from .._observe._http import HostCheck, OriginCheck, is_loopback, parse_host
from ._server import server

TOKEN_ENV = "TENURE_MCP_TOKEN"  # noqa: S105 - the variable's name, not a secret
PATH = "/mcp"
DEFAULT_PORT = 8322


async def serve_stdio(app: App) -> None:
    """Serve ``app``'s tools on this process's stdin and stdout until the client closes them.

    One process, one client: the stdio connection is the session.
    """
    srv = server(app)
    async with stdio_server() as (read, write):
        await srv.run(read, write, srv.create_initialization_options())


class _Bearer:
    """ASGI: refuse HTTP requests without ``Authorization: Bearer <token>`` (401)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scheme, _, given = Headers(scope=scope).get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not _same(given.strip(), self.token):
                response = JSONResponse(
                    {"error": "an access token is required: Authorization: Bearer <token>"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def http_app(
    app: App,
    *,
    token: str | None = None,
    host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
) -> ASGIApp:
    """``app``'s tools as a streamable-HTTP MCP endpoint at ``/mcp`` (an ASGI app with its own
    lifespan). ``host`` is the address it will be bound to: without a ``token`` it must be
    a loopback one. ``allowed_hosts`` are further names clients may reach it by."""
    check_bind(
        host, token, allowed_hosts, what="the MCP server", env=TOKEN_ENV, exposes="call every tool"
    )
    named = not (host in WILDCARD_BINDS or is_loopback(host) or parse_host(host, None) is None)
    ours = TransportSecuritySettings(enable_dns_rebinding_protection=False)  # OriginCheck's
    inner = server(app).streamable_http_app(
        streamable_http_path=PATH, host=host, transport_security=ours
    )
    guarded: ASGIApp = OriginCheck(inner if token is None else _Bearer(inner, token))
    return HostCheck(guarded, allowed_hosts=[*allowed_hosts, *([host] if named else [])])


async def serve_http(
    app: App,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    token: str | None = None,
    allowed_hosts: Sequence[str] = (),
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve `http_app` with uvicorn until SIGINT or SIGTERM; ``ready`` gets its URL."""
    config = uvicorn.Config(
        http_app(app, token=token, host=host, allowed_hosts=allowed_hosts),
        host=host,
        port=port,
        log_level="warning",
        log_config=None,  # its lines go through the process's logging
        access_log=False,
        lifespan="on",
    )
    web = uvicorn.Server(config)
    serving = asyncio.ensure_future(web.serve())
    while not web.started:  # uvicorn says nothing else when it is up
        if serving.done():
            await serving
            raise ConfigError(f"the MCP server on {host}:{port} did not start (is the port taken?)")
        await asyncio.sleep(0.01)
    if ready is not None:
        bound, actual = web.servers[0].sockets[0].getsockname()[:2]
        where = f"[{bound}]" if ":" in bound else bound
        ready(f"http://{where}:{actual}{PATH}")
    await serving
