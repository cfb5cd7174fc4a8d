"""Serving the MCP server: over stdio, or streamable HTTP under the dashboard's access rules.

Stdio has one caller, the host that started the process: ``principal`` names it
(``tenure mcp --principal``), so its keys, tasks and quota outlive the process.

HTTP binds to loopback unless requests must carry a bearer token, exactly the
dashboard's rule (`check_bind`), and every request must name this server in its Host
header (`HostCheck`), so DNS rebinding cannot turn a web page into a caller of a
loopback server, and a browser's request from another origin is refused on any bind
(`OriginCheck`). The SDK's own checks are turned off: it applies them only when bound
to 127.0.0.1, localhost or ::1 (not 127.0.0.2, not a named bind), and its Host list
would refuse the names given as ``allowed_hosts``. Without any token every account on
this machine can call every tool (`tenure mcp --http` says so when it starts). Two
kinds of token:

- ``verifier``: the SDK's `TokenVerifier` surface (its bearer middleware), each token
  naming a principal: `_auth.Principals` (``--tokens FILE``, ``TENURE_MCP_TOKENS``),
  or an OAuth resource server's own verifier. A request without a valid one gets 401;
  with one, the call belongs to its principal (keys, tasks, quota and share of the
  queue, from any session, replica or restart);
- ``token`` (``TENURE_MCP_TOKEN``): one shared token that admits but names nobody, so
  callers stay apart by session, and on the stateless 2026-07-28 wire cannot use keys
  or tasks (see `_caller`).

The HTTP app also notes when a client closes a request's stream (`_wire.Left`): on the
2026-07-28 wire that is how a plain call is cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import uvicorn
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import TokenVerifier
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._app import App
from .._dashboard._dashboard import WILDCARD_BINDS, check_bind, same_secret
from .._errors import ConfigError
from .._observe._http import HostCheck, OriginCheck, allowed_names, is_loopback, parse_host
from ._server import server
from ._wire import LEFT, Left

TOKEN_ENV = "TENURE_MCP_TOKEN"  # noqa: S105 - the variable's name, not a secret
PATH = "/mcp"
DEFAULT_PORT = 8322


async def serve_stdio(
    app: App,
    *,
    principal: str | None = None,
    lax_arguments: bool = False,
    trust_trace_context: bool = False,
) -> None:
    """Serve ``app``'s tools on this process's stdin and stdout until the client closes them.

    One process, one client: ``principal`` names it (else the connection is its scope).
    The other options are `server`'s.
    """
    srv = server(
        app,
        principal=principal,
        lax_arguments=lax_arguments,
        trust_trace_context=trust_trace_context,
    )
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
            if scheme.lower() != "bearer" or not same_secret(given.strip(), self.token):
                response = JSONResponse(
                    {"error": "an access token is required: Authorization: Bearer <token>"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _Principals:
    """ASGI: the SDK's bearer auth over HTTP requests (`AuthenticationMiddleware` with its
    `BearerAuthBackend`, `AuthContextMiddleware`, `RequireAuthMiddleware`: 401 without a
    token the verifier accepts); other scopes (the lifespan) pass through."""

    def __init__(self, app: ASGIApp, verifier: TokenVerifier) -> None:
        self.app = app
        self.http = AuthenticationMiddleware(
            AuthContextMiddleware(RequireAuthMiddleware(app, [])),
            backend=BearerAuthBackend(verifier),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await (self.http if scope["type"] == "http" else self.app)(scope, receive, send)


class _Disconnects:
    """ASGI: note in each HTTP request's scope (`_wire.Left`) when its client closed it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        left = scope[LEFT] = Left()

        async def watched() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                left.seen = True
            return message

        await self.app(scope, watched, send)


def http_app(
    app: App,
    *,
    token: str | None = None,
    verifier: TokenVerifier | None = None,
    host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
    lax_arguments: bool = False,
    trust_trace_context: bool = False,
) -> ASGIApp:
    """``app``'s tools as a streamable-HTTP MCP endpoint at ``/mcp`` (an ASGI app with its own
    lifespan). ``verifier`` (e.g. `Principals`) checks each request's bearer token and names
    its principal; ``token`` only admits (give one or the other). ``host`` is the address it
    will be bound to: without either it must be a loopback one. ``allowed_hosts`` are
    further names clients may reach it by. The other options are `server`'s."""
    if token is not None and verifier is not None:
        raise ConfigError(
            f"give {TOKEN_ENV} (one token that admits) or principals' tokens, not both"
        )
    if verifier is None:
        check_bind(
            host,
            token,
            allowed_hosts,
            what="the MCP server",
            env=TOKEN_ENV,
            exposes="call every tool",
        )
    else:  # every request needs a token the verifier accepts, wherever it is bound
        allowed_names(allowed_hosts)
    named = not (host in WILDCARD_BINDS or is_loopback(host) or parse_host(host, None) is None)
    srv = server(app, lax_arguments=lax_arguments, trust_trace_context=trust_trace_context)
    ours = TransportSecuritySettings(enable_dns_rebinding_protection=False)  # OriginCheck's
    inner: ASGIApp = _Disconnects(
        srv.streamable_http_app(streamable_http_path=PATH, host=host, transport_security=ours)
    )
    if verifier is not None:
        inner = _Principals(inner, verifier)
    elif token is not None:
        inner = _Bearer(inner, token)
    return HostCheck(OriginCheck(inner), allowed_hosts=[*allowed_hosts, *([host] if named else [])])


async def serve_http(
    app: App,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    token: str | None = None,
    verifier: TokenVerifier | None = None,
    allowed_hosts: Sequence[str] = (),
    lax_arguments: bool = False,
    trust_trace_context: bool = False,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve `http_app` with uvicorn until SIGINT or SIGTERM; ``ready`` gets its URL."""
    config = uvicorn.Config(
        http_app(
            app,
            token=token,
            verifier=verifier,
            host=host,
            allowed_hosts=allowed_hosts,
            lax_arguments=lax_arguments,
            trust_trace_context=trust_trace_context,
        ),
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
