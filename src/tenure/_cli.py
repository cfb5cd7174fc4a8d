"""The ``tenure`` command.

Errors are one clear line on stderr and a non-zero exit; ``--debug`` shows the
traceback. The database is ``--dsn``, else ``TENURE_DSN``, else the embedded
server in tenure's data directory.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import datetime

from ._app import App
from ._errors import ConfigError, TenureError
from ._job import Job
from ._store._store import migrate

EXIT_ERROR = 1
EXIT_USAGE = 2


def load_app(target: str) -> App:
    """Import ``module:attribute`` and check that it is an App."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"expected MODULE:APP (e.g. myapp:app), got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}") from None
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise ConfigError(f"{target!r} is not a tenure.App (found {type(app).__name__})")
    return app


def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "-"
    return f"{(now - moment).total_seconds():.1f}s"


def _left(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "-"
    return f"{(moment - now).total_seconds():.1f}s"


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=False)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True))]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def _job_rows(jobs: Sequence[Job], now: datetime) -> str:
    header = [
        "ID",
        "TOOL",
        "STATE",
        "ATTEMPT",
        "TOKEN",
        "OWNER",
        "LEASE LEFT",
        "HEARTBEAT AGE",
        "CODE",
    ]
    rows = [
        [
            str(j.id),
            j.tool,
            j.state,
            f"{j.attempt}/{j.max_attempts}",
            str(j.token),
            j.owner or "-",
            _left(j.lease_until, now) if j.state == "running" else "-",
            _ago(j.heartbeat_at, now) if j.state == "running" else "-",
            str((j.error or {}).get("code", "-")),
        ]
        for j in jobs
    ]
    return _table(rows, header)


async def _with_app(app: App, args: argparse.Namespace) -> int:
    try:
        return await _dispatch(app, args)
    finally:
        await app.aclose()


async def _dispatch(app: App, args: argparse.Namespace) -> int:
    if args.command == "jobs":
        now = await (await app._store()).db_now()
        if args.action == "list":
            print(
                _job_rows(
                    await app.list_jobs(state=args.state, tool=args.tool, limit=args.limit), now
                )
            )
        elif args.action == "show":
            job = await app.get(args.id)
            print(_job_rows([job], now))
            events = await app.events(args.id)
            print()
            print(
                _table(
                    [
                        [
                            e["at"].isoformat(timespec="milliseconds"),
                            e["kind"],
                            str(e["token"]),
                            str(e["attempt"]),
                            e["worker"] or "-",
                            json.dumps(e["detail"]) if e["detail"] else "",
                        ]
                        for e in events
                    ],
                    ["AT", "EVENT", "TOKEN", "ATTEMPT", "WORKER", "DETAIL"],
                )
            )
        elif args.action == "cancel":
            print(_job_rows([await app.cancel(args.id)], now))
        elif args.action == "retry":
            print(_job_rows([await app.retry(args.id)], now))
        return 0
    if args.command == "enqueue":
        payload = json.loads(args.payload)
        job = await app.enqueue(
            args.tool, payload, idempotency_key=args.key, priority=args.priority
        )
        print(json.dumps({"id": job.id, "state": job.state, "created": job.created}))
        if args.wait is not None:
            print(json.dumps(await app.wait(job.id, timeout=args.wait)))
        return 0
    raise ConfigError(f"unknown command {args.command!r}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tenure", description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="PostgreSQL DSN (default: $TENURE_DSN, else embedded)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("migrate", help="apply pending schema migrations")

    worker = commands.add_parser("worker", help="run a worker for MODULE:APP")
    worker.add_argument("app", help="MODULE:APP, e.g. myapp:app")
    worker.add_argument("--concurrency", type=int, default=10)
    worker.add_argument("--claim-batch", type=int, default=100)
    worker.add_argument("--poll-interval", type=float, default=1.0)
    worker.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds running calls get on SIGTERM before they are released",
    )
    worker.add_argument("--name", help="worker name in the journal (default host:pid:random)")

    enqueue = commands.add_parser("enqueue", help="enqueue one call of a tool of MODULE:APP")
    enqueue.add_argument("app", help="MODULE:APP")
    enqueue.add_argument("tool")
    enqueue.add_argument("payload", nargs="?", default="{}", help="JSON object")
    enqueue.add_argument("--key", help="idempotency key")
    enqueue.add_argument("--priority", type=int, default=0)
    enqueue.add_argument("--wait", type=float, metavar="SECONDS", help="wait for the result")

    jobs = commands.add_parser("jobs", help="inspect and operate on jobs")
    actions = jobs.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list")
    listing.add_argument(
        "--state", choices=["queued", "running", "succeeded", "failed", "cancelled"]
    )
    listing.add_argument("--tool")
    listing.add_argument("--limit", type=int, default=50)
    for action in ("show", "cancel", "retry"):
        actions.add_parser(action).add_argument("id", type=int)

    demo = commands.add_parser("demo", help="run the fault-injection demo on the embedded server")
    demo.add_argument("--jobs", type=int, default=24)
    demo.add_argument("--workers", type=int, default=3)
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.dsn:
        os.environ["TENURE_DSN"] = args.dsn
    if args.command == "demo":
        from ._demo import run_demo

        return run_demo(jobs=args.jobs, workers=args.workers)
    if args.command == "migrate":
        app = App(migrate=False)
        try:
            applied = migrate(app.dsn)
            print(f"schema up to date; applied now: {', '.join(map(str, applied)) or 'none'}")
        finally:
            app.close()
        return 0
    if args.command == "worker":
        app = load_app(args.app)
        worker = app.worker(
            concurrency=args.concurrency,
            claim_batch=args.claim_batch,
            poll_interval=args.poll_interval,
            grace=args.grace,
            name=args.name,
        )
        try:
            asyncio.run(worker.run(scrub_environment=True))
        finally:
            app.close()
        return 0
    app = load_app(args.app) if args.command == "enqueue" else App()
    try:
        return asyncio.run(_with_app(app, args))
    finally:
        app.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(message)s", stream=sys.stderr)
    try:
        return _run(args)
    except KeyboardInterrupt:
        return 130
    except (TenureError, json.JSONDecodeError, OSError) as exc:
        if args.debug:
            raise
        print(f"tenure: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
