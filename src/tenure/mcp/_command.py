"""``tenure mcp MODULE:APP``: serve an App's tools over stdio (default) or streamable HTTP."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from .._app import App
from ._serve import TOKEN_ENV, serve_http, serve_stdio

NO_TOKEN = (
    f"tenure mcp: warning: no access token ({TOKEN_ENV} unset): every account on this "
    "machine can call every tool. Set it (16+ characters) to require "
    "Authorization: Bearer <token>."
)


def run_mcp(app: App, args: argparse.Namespace) -> int:
    """Serve until the client leaves (stdio) or SIGINT/SIGTERM (HTTP).

    Like every command but ``migrate`` and ``worker``, it refuses a database without
    tenure's tables, unless ``--worker`` (a worker migrates) runs in this process too.
    """
    token = os.environ.get(TOKEN_ENV) or None
    app.auto_migrate = app.auto_migrate and args.worker
    try:
        asyncio.run(_serve(app, args, token))
    finally:
        app.close()
    return 0


async def _serve(app: App, args: argparse.Namespace, token: str | None) -> None:
    if not args.worker:
        await app.verify_schema()
    worker = app.worker() if args.worker else None
    running = asyncio.create_task(worker.run(handle_signals=False)) if worker else None
    try:
        if args.http:
            if token is None:
                print(NO_TOKEN, file=sys.stderr, flush=True)
            await serve_http(
                app,
                args.host,
                args.port,
                token=token,
                allowed_hosts=args.allowed_host,
                ready=lambda url: print(f"tenure mcp: {url}", file=sys.stderr, flush=True),
            )
        else:
            await serve_stdio(app)
    finally:
        if worker is not None and running is not None:
            worker.stop()
            await running
        await app.aclose()
