"""``tenure mcp MODULE:APP``: serve an App's tools over stdio (default) or streamable HTTP."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from mcp.server.auth.provider import TokenVerifier

from .._app import App
from .._errors import ConfigError
from ._auth import PRINCIPAL_ENV, check_principal, tokens_from
from ._serve import TOKEN_ENV, serve_http, serve_stdio

NO_TOKEN = (
    f"tenure mcp: warning: no access token ({TOKEN_ENV} and TENURE_MCP_TOKENS unset, no "
    "--tokens): every account on this machine can call every tool. Give principals' tokens "
    "(--tokens FILE) or one token (16+ characters) to require Authorization: Bearer <token>."
)


def run_mcp(app: App, args: argparse.Namespace) -> int:
    """Serve until the client leaves (stdio) or SIGINT/SIGTERM (HTTP).

    Like every command but ``migrate`` and ``worker``, it refuses a database without
    tenure's tables, unless ``--worker`` (a worker migrates) runs in this process too.
    Who is calling: stdio's ``--principal`` (``TENURE_MCP_PRINCIPAL``); HTTP's
    principals' tokens (``--tokens``, ``TENURE_MCP_TOKENS``), or one token that only
    admits (``TENURE_MCP_TOKEN``).
    """
    principal = args.principal or os.environ.get(PRINCIPAL_ENV) or None
    verifier: TokenVerifier | None = None
    token: str | None = None
    if args.http:
        if args.principal:
            raise ConfigError(
                "--principal names stdio's one caller; over HTTP each caller's bearer token "
                "names it (--tokens FILE or TENURE_MCP_TOKENS)"
            )
        principal = None
        verifier = tokens_from(args.tokens)
        token = os.environ.get(TOKEN_ENV) or None
    elif args.tokens:
        raise ConfigError("--tokens is for --http; on stdio, --principal names the caller")
    if principal is not None:
        check_principal(principal)
    app.auto_migrate = app.auto_migrate and args.worker
    try:
        asyncio.run(_serve(app, args, principal, token, verifier))
    finally:
        app.close()
    return 0


async def _serve(
    app: App,
    args: argparse.Namespace,
    principal: str | None,
    token: str | None,
    verifier: TokenVerifier | None,
) -> None:
    if not args.worker:
        await app.admin.verify_schema()
    worker = app.worker() if args.worker else None
    running = asyncio.create_task(worker.run(handle_signals=False)) if worker else None
    try:
        if args.http:
            if token is None and verifier is None:
                print(NO_TOKEN, file=sys.stderr, flush=True)
            await serve_http(
                app,
                args.host,
                args.port,
                token=token,
                verifier=verifier,
                allowed_hosts=args.allowed_host,
                lax_arguments=args.lax_arguments,
                trust_trace_context=args.trust_trace_context,
                ready=lambda url: print(f"tenure mcp: {url}", file=sys.stderr, flush=True),
            )
        else:
            await serve_stdio(
                app,
                principal=principal,
                lax_arguments=args.lax_arguments,
                trust_trace_context=args.trust_trace_context,
            )
    finally:
        if worker is not None and running is not None:
            worker.stop()
            await running
        await app.aclose()
