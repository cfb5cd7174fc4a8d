"""The long-running commands (``worker``, ``dashboard``, ``mcp``) and the ones without a
database (``tools``, ``embedded``), and the App a command names."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import threading
from collections.abc import Callable

from rich.table import Table

from .._app import App, load_app
from .._dsn import dsn_from_environment
from .._errors import ConfigError
from .._text import json_text, printable
from ._output import TABLE, _console, _row


async def _checked(app: App) -> None:
    try:
        await app.admin.verify_schema()
    finally:
        await app.aclose()


def _serve_until_stopped() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def _dashboard(args: argparse.Namespace) -> int:
    from .._dashboard._dashboard import TOKEN_ENV, check_bind, serve_dashboard
    from .._observe._metrics import ToolLabels

    token = os.environ.get(TOKEN_ENV) or None
    check_bind(args.host, token, args.allowed_host)  # before anything starts
    app = _load(args) if args.app else App(args.dsn)
    app.auto_migrate = False  # a read-only command: it checks the schema, never creates it
    labels = ToolLabels()
    labels.register_specs(app.tools.values())
    try:
        asyncio.run(_checked(app))
        server = serve_dashboard(
            app.dsn,
            args.host,
            args.port,
            access_token=token,
            labels=labels,
            poll_interval=args.poll_interval,
            allowed_hosts=args.allowed_host,
        )
        print(f"tenure dashboard: {server.url}", flush=True)
        print(f"metrics: {server.url}/metrics", flush=True)
        if token is None:
            print(f"read-only: set {TOKEN_ENV} to enable cancel and retry", flush=True)
        try:
            _serve_until_stopped()
        finally:
            server.stop()
    finally:
        app.close()
    return 0


def _mcp(args: argparse.Namespace) -> int:
    try:
        from ..mcp._command import run_mcp
    except ModuleNotFoundError as exc:  # the extra is not installed
        if exc.name != "mcp":
            raise
        raise ConfigError(str(exc)) from None
    return run_mcp(_load(args), args)


def _worker(args: argparse.Namespace) -> int:
    from .._maintenance._job_pruner import JobPrunerConfig
    from .._maintenance._journal_pruner import JournalPrunerConfig
    from .._maintenance._worker_pruner import WorkerPrunerConfig

    app = _load(args)
    worker = app.worker(
        concurrency=args.concurrency,
        claim_batch=args.claim_batch,
        poll_interval=args.poll_interval,
        grace=args.grace,
        name=args.name,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        journal_heartbeats=args.journal_heartbeats,
        journal_pruner=JournalPrunerConfig(retention=args.journal_retention),
        job_pruner=JobPrunerConfig(
            enabled=args.prune_jobs != "off",
            scope="all" if args.prune_jobs == "all" else "tools",
            interval=args.prune_interval,
            batch=args.prune_batch,
        ),
        worker_pruner=WorkerPrunerConfig(horizon=args.worker_horizon),
        keepalive=args.keepalive,
    )
    _collector(args.gc)
    try:
        with asyncio.Runner(loop_factory=_loop_factory(args.loop)) as runner:
            runner.run(worker.run(scrub_environment=True))
    finally:
        app.close()
    return 0


def _collector(choice: str) -> None:
    """``tuned``, the worker's default. A worker makes a few dozen objects per call (its
    task, context, lease bookkeeping) and keeps almost none, while all the app loaded lives
    as long as the process. Python's collector runs its young pass every 700 allocations,
    and its full pass walks all that is loaded: a sixth of a busy worker's CPU
    (bench/README). What is loaded now is frozen (left out of every pass), and the young pass
    runs every 10,000 allocations: the full one then comes every million rather than every
    70,000, often enough for the cycles a long call leaves behind (an exception's traceback,
    a closed browser's objects). The process is tenure's own; an app that embeds Worker
    keeps its own settings. ``python``: Python's defaults, untouched."""
    if choice == "tuned":
        gc.freeze()
        gc.set_threshold(10_000, 10, 10)


def _embedded(args: argparse.Namespace) -> int:
    """Where the embedded server lives and whether it runs; ``--remove`` deletes it."""
    from .._embedded import EmbeddedPostgres, remove, status

    server = EmbeddedPostgres()
    if args.remove:
        for line in remove(server):
            print(printable(line))
        return 0
    for name, value in status(server):
        print(f"{name:<16}{printable(value)}")
    return 0


def _loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The worker's event loop: uvloop when asked for, or by default when installed
    (``tenure[uvloop]``; it costs a busy worker less CPU per job), else asyncio's."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ModuleNotFoundError:
        if choice == "uvloop":
            raise ConfigError("--loop uvloop needs uvloop: pip install 'tenure[uvloop]'") from None
        return None
    return uvloop.new_event_loop


def _tools(args: argparse.Namespace) -> int:
    """The tools an agent would be shown: no database is needed for this."""
    schemas = _load(args).registry.tool_schemas()
    if args.json:
        print(json_text(schemas, indent=2))
        return 0
    table = Table(title=f"{len(schemas)} tools of {args.app}", **TABLE)
    for column in ("TOOL", "ARGUMENTS", "DESCRIPTION"):
        table.add_column(column)
    for schema in schemas:
        properties = schema["parameters"].get("properties", {})
        required = set(schema["parameters"].get("required", ()))
        arguments = ", ".join(f"{n}{'' if n in required else '?'}" for n in properties)
        _row(table, schema["name"], arguments, schema["description"].split("\n\n")[0])
    _console().print(table)
    return 0


def _load(args: argparse.Namespace) -> App:
    """The MODULE:APP the command names, pointed at ``--dsn`` when one was given, else at
    the environment's DSN if the module built its app before one was set."""
    app = load_app(args.app)
    dsn = args.dsn or (None if app.configured_dsn else dsn_from_environment())
    if dsn:
        app.set_dsn(dsn)
    return app
