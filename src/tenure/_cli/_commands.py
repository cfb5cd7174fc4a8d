"""The commands that read or act on the database through the App's client and admin:
``jobs``, ``events``, ``workers``, ``prune``, ``doctor``, ``enqueue``."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

from .._app import App
from .._dashboard._pages import seconds
from .._errors import ConfigError
from ._output import (
    EXIT_ERROR,
    STATUS_STYLE,
    TABLE,
    _console,
    _row,
    events_table,
    job_table,
    jobs_table,
    waitpoints_table,
    workers_table,
)
from ._parser import _since_option

PRUNE_COUNT_CAP = 10_000_000
NO_SCHEMA = "no tenure schema in this database; run `tenure migrate`"


async def _with_app(app: App, args: argparse.Namespace, target: App | None) -> int:
    try:
        if args.command != "doctor":  # the doctor reports these as checks of its own
            await app.admin.verify_schema()
        return await _dispatch(app, args, target)
    finally:
        await app.aclose()


async def _jobs(app: App, args: argparse.Namespace, console: Console) -> int:
    if args.action == "list":
        jobs = await app.admin.jobs(
            state=args.state, tool=args.tool, tenant=args.tenant, limit=args.limit
        )
        console.print(jobs_table(jobs, await app.admin.database_time()))
    elif args.action == "show":
        console.print(job_table(await app.admin.job(args.id)))
        waits = await app.admin.waitpoints(args.id)
        if waits:
            console.print(waitpoints_table(waits))
        timeline = await app.admin.events(args.id)
        console.print(events_table(timeline, title="timeline", with_job=False))
    else:
        if args.action == "answer":
            changed = await app.answer_waitpoint(args.token, args.answer)
        elif args.action == "cancel":
            changed = await app.cancel(args.id)
        else:
            changed = await app.admin.retry(args.id)
        console.print(jobs_table([changed], await app.admin.database_time()))
    return 0


async def _events(app: App, args: argparse.Namespace, console: Console) -> int:
    found = await app.admin.find_events(
        kinds=args.kind or (),
        job_id=args.job,
        tool=args.tool,
        worker=args.worker,
        since=_since_option(args.since),
        limit=args.limit,
    )
    rows = list(reversed(found))
    if args.json:
        for row in rows:
            print(json.dumps(row, default=str, separators=(",", ":")))
        return 0
    console.print(events_table(rows, title=f"{len(rows)} events, oldest first", with_job=True))
    return 0


async def _workers(app: App, args: argparse.Namespace, console: Console) -> int:
    workers = await app.admin.workers(limit=args.limit)
    if args.json:
        for row in workers:
            print(json.dumps(row, default=str, separators=(",", ":")))
        return 0
    console.print(workers_table(workers))
    return 0


async def _prune(app: App, args: argparse.Namespace, console: Console) -> int:
    total = await app.admin.prune_journal(args.older_than, dry_run=True)
    if args.dry_run:
        many = "at least " if total >= PRUNE_COUNT_CAP else ""
        console.print(f"would delete {many}{total} journal rows (dry run: nothing deleted)")
        return 0
    with Progress(
        TextColumn("pruning journal rows older than " + seconds(args.older_than)),
        BarColumn(),
        TaskProgressColumn(),
        console=Console(stderr=True),
    ) as progress:
        task = progress.add_task("prune", total=total or 1)
        deleted = await app.admin.prune_journal(
            args.older_than, on_batch=lambda n: progress.advance(task, n)
        )
        progress.update(task, completed=total or 1)
    console.print(f"deleted {deleted} journal rows")
    return 0


async def _doctor(app: App, check_tools: bool, console: Console) -> int:
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("doctor", total=None)

        def step(label: str) -> None:
            progress.update(task, description=f"checking {label}")

        checks = await app.admin.doctor(check_tools=check_tools, on_step=step)
    table = Table(title="tenure doctor", **TABLE)
    for column in ("CHECK", "STATUS", "DETAIL"):
        table.add_column(column, no_wrap=column != "DETAIL")
    for check in checks:
        style = STATUS_STYLE[check.status]
        _row(table, check.name, Text(check.status, style=style), check.detail)
    console.print(table)
    return EXIT_ERROR if any(c.status == "fail" for c in checks) else 0


async def _dispatch(app: App, args: argparse.Namespace, target: App | None) -> int:
    console = _console()
    if args.command == "jobs":
        return await _jobs(app, args, console)
    if args.command == "events":
        return await _events(app, args, console)
    if args.command == "prune":
        return await _prune(app, args, console)
    if args.command == "workers":
        return await _workers(app, args, console)
    if args.command == "doctor":
        return await _doctor(app, target is not None, console)
    if args.command == "enqueue":
        job = await app.enqueue(
            args.tool,
            args.payload,
            idempotency_key=args.key,
            priority=args.priority,
            tenant=args.tenant,
        )
        print(json.dumps({"id": job.id, "state": job.state, "created": job.created}))
        if args.wait is not None:
            print(json.dumps(await app.wait(job.id, timeout=args.wait)))
        return 0
    raise ConfigError(f"unknown command {args.command!r}")
