"""The ``tenure`` command.

Errors are one clear line on stderr and a non-zero exit; ``--debug`` shows the
traceback. Every argument is checked before anything starts: numbers are finite
and in range, names are printable and short, payloads are JSON objects. The
database is ``--dsn``, else ``TENURE_DSN``, else the embedded server in
tenure's data directory. Only ``migrate`` and ``worker`` (and ``enqueue
--migrate``) create tenure's tables; every other command says so when they are
missing, so a mistyped DSN gets one line instead of a new schema. Tables are
rendered with rich; what they show comes from statements that never select
payloads, results or error messages, so the output is safe to paste into a
ticket. Every value in them is plain text (never rich markup or an emoji code)
with its control characters made visible (`_text.printable`), so a key, a
worker name or a progress message can neither break the table nor drive the
terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import importlib
import json
import math
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

from ._app import MAX_KEY_LENGTH, MAX_PRIORITY, MAX_WAIT, App
from ._dsn import dsn_from_environment
from ._errors import ConfigError, PayloadError, TenureError
from ._job import Job
from ._log import configure_logging
from ._observe._events import JOURNAL_KINDS
from ._observe._pages import clock, describe_progress, seconds, summarize
from ._registry import TENANT_MAX, TOOL_NAME_MAX
from ._store import migrate
from ._text import json_text, printable
from ._worker._worker import (
    DEFAULT_CLAIM_BATCH,
    DEFAULT_CONCURRENCY,
    KEEPALIVE,
    KEEPALIVE_RANGE,
    MAX_CONCURRENCY,
)

EXIT_ERROR = 1
EXIT_USAGE = 2
STATES = ("queued", "running", "waiting", "succeeded", "failed", "cancelled")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
DAY = 86400.0
STATUS_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}
PRUNE_COUNT_CAP = 10_000_000
NO_SCHEMA = "no tenure schema in this database; run `tenure migrate`"
# Bounds of the options (the library checks its own again; these come first, so a bad
# option stops the command before it imports an app or starts a server).
MAX_ID = 2**63 - 1
MAX_LIMIT = 10_000
MAX_PORT = 65_535
NAME_MAX = 200  # worker names, events --worker
HOST_MAX = 255
TARGET_MAX = 300  # MODULE:APP
DSN_MAX = 8192
PATH_MAX = 4096  # a file path (tenure mcp --tokens)
RETENTION = (60.0, 3650 * DAY)  # JournalPrunerConfig's range
# Spaces between columns, a rule under the header: readable in a terminal and when pasted.
TABLE: dict[str, Any] = {"box": box.SIMPLE_HEAD, "title_justify": "left"}


def load_app(target: str) -> App:
    """Import ``module:attribute`` and check that it is an App; otherwise a ConfigError
    naming what is wrong and the module's App objects."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"expected MODULE:APP (e.g. myapp:app), got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the module is the user's: any error importing it is theirs
        raise ConfigError(f"cannot import {module_name!r}: {_one_line(exc)}") from None
    app = getattr(module, attribute, None)
    if isinstance(app, App):
        return app
    found = sorted(name for name, value in vars(module).items() if isinstance(value, App))
    there = (
        f"its tenure.App objects: {', '.join(found)}"
        if found
        else f"{module_name} defines no tenure.App at its top level"
    )
    close = difflib.get_close_matches(attribute, found, n=1)
    hint = f"; did you mean {module_name}:{close[0]}?" if close else ""
    if not hasattr(module, attribute):
        raise ConfigError(f"{module_name} has no attribute {attribute!r} ({there}){hint}")
    kind = type(app).__name__
    raise ConfigError(
        f"{module_name}.{attribute} is of type {kind}, not a tenure.App ({there}){hint}"
    )


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``2h``, ``14d`` → seconds."""
    match = _DURATION.match(text) if len(text) <= 32 else None
    if not match:
        raise argparse.ArgumentTypeError(
            f"expected a duration like 90s, 10m, 2h or 14d, got {_shown(text)}"
        )
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


# -- arguments: every one checked before anything starts ----------------------------------


def _shown(text: str, most: int = 40) -> str:
    """A value quoted for an error line, cut short: the line stays one line and short."""
    return repr(text if len(text) <= most else text[:most] + "...")


def _one_line(exc: BaseException) -> str:
    """An exception as one line: its first non-empty line, else its type's name (controls
    made visible: a message may quote what a caller or a tool wrote)."""
    for line in str(exc).splitlines():
        if line.strip():
            return printable(line.strip())
    return type(exc).__name__


def _error(exc: BaseException) -> str:
    """What a failed command prints on stderr: one ``tenure: error:`` line, and under it,
    indented, every problem of a payload that does not fit its tool (the first line only
    says how many there are)."""
    lines = [f"tenure: error: {_one_line(exc)}"]
    if isinstance(exc, PayloadError):
        lines += [f"  {printable(problem)}" for problem in exc.problems]
    return "\n".join(lines)


def _bounded(
    convert: Callable[[str], float], low: float, high: float, what: str
) -> Callable[[str], Any]:
    """An argparse type: ``convert(text)`` must be finite and within [low, high]."""

    def parse(text: str) -> Any:
        try:
            value = convert(text) if len(text) <= 64 else math.nan
        except (ValueError, argparse.ArgumentTypeError):
            value = math.nan
        if not math.isfinite(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected {what} in [{_bound(low)}, {_bound(high)}], got {_shown(text)}"
            )
        return value

    return parse


def _bound(value: float) -> str:
    return str(value) if isinstance(value, int) or not value.is_integer() else f"{value:.0f}"


def integer(low: int, high: int) -> Callable[[str], int]:
    return _bounded(int, low, high, "an integer")


def number(low: float, high: float) -> Callable[[str], float]:
    return _bounded(float, low, high, "a number")


def duration(low: float, high: float) -> Callable[[str], float]:
    return _bounded(parse_duration, low, high, "a duration (90s, 10m, 2h, 14d) in seconds")


def text(most: int, *, printable: bool = True) -> Callable[[str], str]:
    """An argparse type: 1 to ``most`` characters, printable unless told otherwise, and
    valid UTF-8 always (an undecodable byte in argv arrives as a lone surrogate)."""

    def parse(value: str) -> str:
        valid = 1 <= len(value) <= most and "\x00" not in value
        if valid and printable:
            valid = value.isprintable()
        elif valid:
            valid = not any("\ud800" <= c <= "\udfff" for c in value)
        if not valid:
            kind = "printable characters" if printable else "characters of valid UTF-8"
            raise argparse.ArgumentTypeError(f"expected 1-{most} {kind}, got {_shown(value)}")
        return value

    return parse


def target(value: str) -> str:
    """``MODULE:APP``."""
    text(TARGET_MAX)(value)
    module, _, attribute = value.partition(":")
    if not module or not attribute:
        raise argparse.ArgumentTypeError(
            f"expected MODULE:APP (e.g. myapp:app), got {_shown(value)}"
        )
    return value


def json_object(value: str) -> dict[str, Any]:
    """A payload: a JSON object, without NaN or Infinity, nested shallowly enough to parse."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    try:
        payload = json.loads(value, parse_constant=refuse)
    except RecursionError:
        raise argparse.ArgumentTypeError("the payload is nested too deeply") from None
    except ValueError as exc:  # a syntax error, NaN, or an integer of thousands of digits
        reason = str(exc) if isinstance(exc, json.JSONDecodeError) else str(exc).split(":")[0]
        raise argparse.ArgumentTypeError(f"the payload is not JSON: {reason}") from None
    if not isinstance(payload, dict):
        raise argparse.ArgumentTypeError(
            f"the payload must be a JSON object, got {type(payload).__name__}"
        )
    return payload


def _env_int(name: str, low: int, high: int) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit() or len(value) > 6 or not low <= int(value) <= high:
        raise ConfigError(f"{name} must be an integer in [{low}, {high}], got {_shown(value)}")
    return int(value)


def _env_number(name: str, low: float, high: float) -> float | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        number = float(value) if len(value) <= 32 else math.nan
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and low <= number <= high):
        raise ConfigError(f"{name} must be a number in [{low:g}, {high:g}], got {_shown(value)}")
    return number


def _env_choice(name: str, default: str, choices: Sequence[str]) -> str:
    value = os.environ.get(name, "").strip().upper() or default
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {_shown(value)}")
    return value


def _console() -> Console:
    """stdout; wide when it is not a terminal, so piped tables are not squeezed to 80 columns.
    It reads no markup and no emoji codes: what it prints is data (see `_row`)."""
    return Console(
        highlight=False, markup=False, emoji=False, width=None if sys.stdout.isatty() else 200
    )


def _row(table: Table, *values: str | Text) -> None:
    """One row of data: each value plain text with its controls made visible."""
    table.add_row(*(v if isinstance(v, Text) else Text(printable(v)) for v in values))


def _since(later: datetime, earlier: datetime | None) -> float | None:
    return None if earlier is None else (later - earlier).total_seconds()


# -- tables ----------------------------------------------------------------------------


def jobs_table(jobs: Sequence[Job], now: datetime) -> Table:
    table = Table(title=f"{len(jobs)} jobs (database time {clock(now)})", **TABLE)
    for column in ("ID", "TOOL", "TENANT", "STATE", "ATTEMPT", "TOKEN", "OWNER", "LEASE LEFT"):
        table.add_column(column, no_wrap=True)
    table.add_column("HEARTBEAT AGE", no_wrap=True)
    table.add_column("CODE")
    for j in jobs:
        running = j.state == "running"
        _row(
            table,
            str(j.id),
            j.tool,
            j.tenant or "-",
            j.state,
            f"{j.attempt}/{j.max_attempts}",
            str(j.token),
            j.owner or "-",
            seconds(_since(j.lease_until, now)) if running and j.lease_until else "-",
            seconds(_since(now, j.heartbeat_at)) if running else "-",
            str((j.error or {}).get("code", "-")),
        )
    return table


def events_table(events: Iterable[Mapping[str, Any]], *, title: str, with_job: bool) -> Table:
    table = Table(title=title, **TABLE)
    columns = ["AT (DB)", "EVENT", "JOB", "TOKEN", "ATTEMPT", "WORKER", "TOOL", "DETAIL"]
    for column in columns if with_job else [c for c in columns if c != "JOB"]:
        table.add_column(column, no_wrap=column != "DETAIL")
    for e in events:
        cells = [
            e["at"].isoformat(timespec="milliseconds"),
            e["kind"],
            str(e.get("job_id", "-")),
            str(e["token"] if e["token"] is not None else "-"),
            str(e["attempt"] if e["attempt"] is not None else "-"),
            e["worker"] or "-",
            e["tool"] or "-",
            summarize(e),
        ]
        if not with_job:
            del cells[2]
        _row(table, *cells)
    return table


def workers_table(workers: Sequence[Mapping[str, Any]]) -> Table:
    """Who is alive, who went silent and what each holds (leases counted from the jobs)."""
    alive = sum(1 for w in workers if w["status"] == "alive")
    table = Table(title=f"{len(workers)} workers, {alive} alive", **TABLE)
    for column in ("NAME", "STATUS", "HOST", "PID", "VERSION", "LEASES", "CONCURRENCY"):
        table.add_column(column, no_wrap=True)
    table.add_column("STARTED", no_wrap=True)
    table.add_column("LAST SEEN", no_wrap=True)
    table.add_column("TOOLS")
    for w in workers:
        expired = f" ({w['leases_expired']} expired)" if w["leases_expired"] else ""
        _row(
            table,
            w["name"],
            w["status"],
            w["host"],
            str(w["pid"]),
            w["version"],
            f"{w['leases_held']}{expired}",
            str(w["concurrency"]),
            w["started_at"].isoformat(timespec="seconds"),
            f"{seconds(w['seen_ago'])} ago",
            ", ".join(w["tools"]),
        )
    return table


def job_table(job: Mapping[str, Any]) -> Table:
    now = job["db_now"]
    running = job["state"] == "running"
    beat = clock(job["heartbeat_at"])
    if running:
        beat += f" ({seconds(_since(now, job['heartbeat_at']))} ago)"
    table = Table(title=f"job {job['id']}", show_header=False, **TABLE)
    table.add_column(style="bold")
    table.add_column()
    rows = {
        "state": job["state"],
        "tool": job["tool"],
        "owner": job["owner"] or "-",
        "token": str(job["token"]),
        "attempt": f"{job['attempt']}/{job['max_attempts']}",
        "lease left": seconds(_since(job["lease_until"], now)) if running else "-",
        "last heartbeat": beat,
        "progress": describe_progress(job["progress"]),
        "error code": job["code"] or "-",
        "idempotency key": job["idempotency_key"],
        "tenant": job["tenant"] or "-",
        "payload hmac": job["payload_hmac"] or "- (no journal key)",
        "created": job["created_at"].isoformat(timespec="milliseconds"),
        "finished": clock(job["finished_at"]),
    }
    for name, value in rows.items():
        _row(table, name, value)
    return table


# Who may answer a waitpoint, as `tenure jobs show` says it (tenure.states.Answerer).
ANSWERERS = {
    "holder": "its token's holder",
    "caller": "the caller too",
    "nobody": "nobody (a sleep or child jobs)",
}


def waitpoints_table(waits: Iterable[Mapping[str, Any]]) -> Table:
    """A job's waitpoints: what it waits for, who may answer, how long it still may."""
    table = Table(title="waitpoints", **TABLE)
    for column in ("NAME", "STATE", "ANSWERED BY", "ON TIMEOUT", "TIME LEFT", "OPENED", "ASKS"):
        table.add_column(column, no_wrap=column != "ASKS")
    for w in waits:
        left = seconds(w["seconds_left"]) if w["state"] == "open" else "-"
        asks = "-" if w["request"] is None else json.dumps(w["request"], ensure_ascii=False)
        _row(
            table,
            w["name"],
            w["state"],
            ANSWERERS.get(w["answered_by"], w["answered_by"]),
            w["on_timeout"],
            left,
            w["created_at"].isoformat(timespec="seconds"),
            asks if len(asks) <= 200 else asks[:197] + "...",
        )
    return table


# -- commands that need the database -----------------------------------------------------


async def _with_app(app: App, args: argparse.Namespace, target: App | None) -> int:
    try:
        if args.command != "doctor":  # the doctor reports these as checks of its own
            await app.verify_schema()
        return await _dispatch(app, args, target)
    finally:
        await app.aclose()


async def _jobs(app: App, args: argparse.Namespace, console: Console) -> int:
    if args.action == "list":
        jobs = await app.list_jobs(
            state=args.state, tool=args.tool, tenant=args.tenant, limit=args.limit
        )
        console.print(jobs_table(jobs, await app.database_time()))
    elif args.action == "show":
        console.print(job_table(await app.job_detail(args.id)))
        waits = await app.job_waitpoints(args.id)
        if waits:
            console.print(waitpoints_table(waits))
        timeline = await app.events(args.id)
        console.print(events_table(timeline, title="timeline", with_job=False))
    else:
        changed = await (app.cancel(args.id) if args.action == "cancel" else app.retry(args.id))
        console.print(jobs_table([changed], await app.database_time()))
    return 0


def _since_option(text: str | None) -> float | datetime | None:
    """``--since``: a duration back from now (10m, 2h) or an ISO time."""
    if not text:
        return None
    try:
        return duration(0, RETENTION[1])(text)
    except argparse.ArgumentTypeError:
        try:
            return datetime.fromisoformat(text).astimezone()
        except (ValueError, OverflowError):
            raise ConfigError(
                f"--since takes a duration (10m, 2h) or an ISO time, got {text!r}"
            ) from None


async def _events(app: App, args: argparse.Namespace, console: Console) -> int:
    found = await app.find_events(
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
    workers = await app.list_workers(limit=args.limit)
    if args.json:
        for row in workers:
            print(json.dumps(row, default=str, separators=(",", ":")))
        return 0
    console.print(workers_table(workers))
    return 0


async def _prune(app: App, args: argparse.Namespace, console: Console) -> int:
    total = await app.prune_journal(args.older_than, dry_run=True)
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
        deleted = await app.prune_journal(
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

        checks = await app.doctor(check_tools=check_tools, on_step=step)
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


# -- long-running commands ---------------------------------------------------------------


async def _checked(app: App) -> None:
    try:
        await app.verify_schema()
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
    from ._observe._dashboard import TOKEN_ENV, check_bind, serve_dashboard
    from ._observe._metrics import ToolLabels

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
        from .mcp._command import run_mcp
    except ModuleNotFoundError as exc:  # the extra is not installed
        if exc.name != "mcp":
            raise
        raise ConfigError(str(exc)) from None
    return run_mcp(_load(args), args)


def _worker(args: argparse.Namespace) -> int:
    from ._maintenance._job_pruner import JobPrunerConfig
    from ._maintenance._journal_pruner import JournalPrunerConfig
    from ._maintenance._worker_pruner import WorkerPrunerConfig

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
    try:
        with asyncio.Runner(loop_factory=_loop_factory(args.loop)) as runner:
            runner.run(worker.run(scrub_environment=True))
    finally:
        app.close()
    return 0


def _embedded(args: argparse.Namespace) -> int:
    """Where the embedded server lives and whether it runs; ``--remove`` deletes it."""
    from ._embedded import EmbeddedPostgres, remove, status

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
    schemas = _load(args).tool_schemas()
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


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr like every other error."""

    def error(self, message: str) -> NoReturn:
        line = printable(message)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {line} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tenure", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn",
        type=text(DSN_MAX, printable=False),
        help="PostgreSQL DSN (default: $TENURE_DSN, else embedded)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    for option, env, default, meaning in (
        (
            "--log-level",
            "TENURE_LOG_LEVEL",
            "INFO",
            "tenure's and the app's loggers (DEBUG adds heartbeat_ok lines)",
        ),
        (
            "--log-level-others",
            "TENURE_LOG_LEVEL_OTHERS",
            "WARNING",
            "other libraries' loggers: httpx, psycopg... (INFO logs httpx's request URLs)",
        ),
    ):
        parser.add_argument(
            option,
            default=_env_choice(env, default, LOG_LEVELS),
            choices=LOG_LEVELS,
            help=f"{meaning}; default ${env}, else {default}",
        )
    parser.add_argument(
        "--log-format", choices=["kv", "json"], help="key=value lines (default) or JSON lines"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("migrate", help="apply pending schema migrations")

    worker = commands.add_parser("worker", help="run a worker for MODULE:APP (migrates first)")
    worker.add_argument("app", type=target, help="MODULE:APP, e.g. myapp:app")
    worker.add_argument(
        "--concurrency", type=integer(1, MAX_CONCURRENCY), default=DEFAULT_CONCURRENCY
    )
    worker.add_argument("--claim-batch", type=integer(1, 1000), default=DEFAULT_CLAIM_BATCH)
    worker.add_argument("--poll-interval", type=number(0.01, 60), default=1.0)
    worker.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="event loop: auto (default) is uvloop when installed (tenure[uvloop]), else asyncio",
    )
    worker.add_argument(
        "--grace",
        type=number(0, 3600),
        default=10.0,
        help="seconds running calls get on SIGTERM before they are released",
    )
    worker.add_argument(
        "--name", type=text(NAME_MAX), help="worker name in the journal (default host:pid:random)"
    )
    worker.add_argument(
        "--metrics-port",
        type=integer(0, MAX_PORT),
        default=_env_int("TENURE_METRICS_PORT", 0, MAX_PORT),
        help="serve Prometheus /metrics on this port, 0 for any free one "
        "(default $TENURE_METRICS_PORT, else off)",
    )
    worker.add_argument(
        "--metrics-host", type=text(HOST_MAX), default="127.0.0.1", help="default 127.0.0.1"
    )
    worker.add_argument(
        "--journal-heartbeats",
        action="store_true",
        default=os.environ.get("TENURE_JOURNAL_HEARTBEATS") == "1",
        help="journal every heartbeat_ok, one row per lease per beat: for debugging "
        "(default: $TENURE_JOURNAL_HEARTBEATS=1)",
    )
    worker.add_argument(
        "--journal-retention",
        type=duration(*RETENTION),
        default="14d",
        help="delete journal rows older than this (default 14d)",
    )
    worker.add_argument(
        "--keepalive",
        type=number(*KEEPALIVE_RANGE),
        default=_env_number("TENURE_WORKER_KEEPALIVE", *KEEPALIVE_RANGE) or KEEPALIVE,
        help="seconds between the registry's keep-alives; readers call a worker silent after "
        f"three (default $TENURE_WORKER_KEEPALIVE, else {KEEPALIVE:g})",
    )
    worker.add_argument(
        "--worker-horizon",
        type=duration(0.1, 365 * DAY),
        default="1d",
        help="delete registry rows of workers not seen for this long (default 1d)",
    )
    worker.add_argument(
        "--prune-jobs",
        choices=("tools", "all", "off"),
        default="tools",
        help="delete ended jobs past their own retention: of this worker's tools (default), "
        "of every application in the database, or none",
    )
    worker.add_argument(
        "--prune-interval", type=number(0.05, DAY), default=60.0, help="seconds between sweeps"
    )
    worker.add_argument(
        "--prune-batch", type=integer(1, 100_000), default=1000, help="jobs per DELETE"
    )

    tools = commands.add_parser(
        "tools", help="each tool of MODULE:APP: name, description, JSON Schema of its arguments"
    )
    tools.add_argument("app", type=target, help="MODULE:APP")
    tools.add_argument(
        "--json",
        action="store_true",
        help="the schemas as JSON, in the shape LLM function calling uses",
    )

    enqueue = commands.add_parser("enqueue", help="enqueue one call of a tool of MODULE:APP")
    enqueue.add_argument("app", type=target, help="MODULE:APP")
    enqueue.add_argument("tool", type=text(TOOL_NAME_MAX))
    enqueue.add_argument("payload", nargs="?", type=json_object, default="{}", help="JSON object")
    enqueue.add_argument("--key", type=text(MAX_KEY_LENGTH), help="idempotency key")
    enqueue.add_argument("--priority", type=integer(-MAX_PRIORITY, MAX_PRIORITY), default=0)
    enqueue.add_argument(
        "--tenant", type=text(TENANT_MAX), help="the tenant whose share of the line the call takes"
    )
    enqueue.add_argument(
        "--wait", type=number(0, MAX_WAIT), metavar="SECONDS", help="wait for the result"
    )
    enqueue.add_argument(
        "--migrate",
        action="store_true",
        help="create or update tenure's tables first (default: refuse a database without them)",
    )

    jobs = commands.add_parser("jobs", help="inspect and operate on jobs")
    actions = jobs.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="owner, token, lease left, heartbeat age")
    listing.add_argument("--state", choices=STATES)
    listing.add_argument("--tool", type=text(TOOL_NAME_MAX))
    listing.add_argument("--tenant", type=text(TENANT_MAX))
    listing.add_argument("--limit", type=integer(1, MAX_LIMIT), default=50)
    job_id = integer(1, MAX_ID)
    show = actions.add_parser("show", help="the job and its event timeline")
    for action in (show, actions.add_parser("cancel"), actions.add_parser("retry")):
        action.add_argument("id", type=job_id)

    events = commands.add_parser("events", help="filter the event journal")
    events.add_argument(
        "--kind",
        action="append",
        choices=sorted({*JOURNAL_KINDS, "job_reclaimed"}),
        help="repeatable; job_reclaimed selects claims that took over an expired lease",
    )
    events.add_argument("--job", type=job_id)
    events.add_argument("--tool", type=text(TOOL_NAME_MAX))
    events.add_argument("--worker", type=text(NAME_MAX))
    events.add_argument(
        "--since", type=text(64), help="a duration back from now (10m, 2h) or an ISO time"
    )
    events.add_argument("--limit", type=integer(1, MAX_LIMIT), default=100)
    events.add_argument("--json", action="store_true", help="one JSON object per line")

    workers = commands.add_parser(
        "workers", help="registered worker processes: alive, silent or stopped, leases held"
    )
    workers.add_argument("--limit", type=integer(1, MAX_LIMIT), default=1000)
    workers.add_argument("--json", action="store_true", help="one JSON object per line")

    prune = commands.add_parser("prune", help="delete journal rows past their retention")
    prune.add_argument("--older-than", type=duration(*RETENTION), default="14d")
    prune.add_argument(
        "--dry-run", action="store_true", help="count the rows it would delete, delete nothing"
    )

    doctor = commands.add_parser(
        "doctor", help="check connectivity, schema, clocks, policies and index plans"
    )
    doctor.add_argument("app", nargs="?", type=target, help="MODULE:APP whose policies to check")

    dashboard = commands.add_parser("dashboard", help="serve the live web dashboard")
    dashboard.add_argument(
        "app", nargs="?", type=target, help="MODULE:APP (for model/provider labels)"
    )
    dashboard.add_argument("--host", type=text(HOST_MAX), default="127.0.0.1")
    dashboard.add_argument(
        "--port", type=integer(0, MAX_PORT), default=8321, help="0 picks a free port"
    )
    dashboard.add_argument(
        "--poll-interval",
        type=number(0.25, 60),
        default=1.0,
        help="seconds between the page's refreshes",
    )
    dashboard.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        type=text(HOST_MAX),
        metavar="NAME[:PORT]",
        help="also answer to this Host (a proxy's or DNS name); repeatable",
    )

    mcp = commands.add_parser(
        "mcp", help="serve MODULE:APP's tools over MCP: stdio, or --http (needs tenure[mcp])"
    )
    mcp.add_argument("app", type=target, help="MODULE:APP")
    mcp.add_argument(
        "--http",
        action="store_true",
        help="streamable HTTP at /mcp, not stdio ($TENURE_MCP_TOKEN: a bearer token, "
        "required beyond loopback)",
    )
    mcp.add_argument("--host", type=text(HOST_MAX), default="127.0.0.1", help="with --http")
    mcp.add_argument("--port", type=integer(0, MAX_PORT), default=8322, help="with --http")
    mcp.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        type=text(HOST_MAX),
        metavar="NAME[:PORT]",
        help="with --http: also answer to this Host; repeatable",
    )
    mcp.add_argument(
        "--principal",
        type=text(64),
        default=None,
        metavar="NAME",
        help="stdio: who is calling (the host starting this server); its keys, tasks and "
        "quota outlive the process ($TENURE_MCP_PRINCIPAL)",
    )
    mcp.add_argument(
        "--tokens",
        type=text(PATH_MAX, printable=False),
        default=None,
        metavar="FILE",
        help="with --http: NAME=TOKEN lines, each bearer token naming its principal "
        "($TENURE_MCP_TOKENS holds the same entries)",
    )
    mcp.add_argument(
        "--lax-arguments",
        action="store_true",
        help="convert a model's trivial slips ('2' for an int) instead of refusing them",
    )
    mcp.add_argument(
        "--trust-trace-context",
        action="store_true",
        help="continue a client's trace (_meta traceparent) instead of linking it",
    )
    mcp.add_argument(
        "--worker", action="store_true", help="also run a worker in this process (one machine)"
    )

    from ._chaos import add_chaos_arguments

    add_chaos_arguments(
        commands.add_parser("chaos", help="run the unpleasant test against your tool and receiver")
    )

    embedded = commands.add_parser(
        "embedded",
        help="the embedded PostgreSQL used without a DSN: where it is, whether it runs, its DSN",
    )
    embedded.add_argument(
        "--remove",
        action="store_true",
        help="delete it and its data (refused while it runs); as root also the _tenure "
        "account and the binaries copied for it",
    )

    demo = commands.add_parser("demo", help="run the fault-injection demo on the embedded server")
    demo.add_argument(
        "--jobs",
        type=integer(1, 1000),
        help="tool calls (default 24; not with --pipeline or --agent)",
    )
    demo.add_argument(
        "--workers", type=integer(2, 16), default=3, help="worker processes (every variant)"
    )
    variant = demo.add_mutually_exclusive_group()
    variant.add_argument(
        "--pipeline", action="store_true", help="the review pipeline under SIGKILL instead"
    )
    variant.add_argument(
        "--agent", action="store_true", help="a pydantic-ai agent's tool call under SIGKILL instead"
    )
    demo.add_argument(
        "--runs", type=integer(1, 200), help="pipeline runs (default 6; only with --pipeline)"
    )
    demo.add_argument(
        "--linger",
        type=number(0, DAY),
        default=0.0,
        help="keep the dashboard up this long after the report (every variant)",
    )
    return parser


def _check_chaos(args: argparse.Namespace) -> None:
    """What `tenure chaos` takes as plain strings and floats, checked like every option."""
    try:
        json_object(args.payload)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"argument payload: {exc}") from None
    if args.timeout is not None and not (math.isfinite(args.timeout) and 0 < args.timeout <= DAY):
        raise ConfigError(f"--timeout must be a number of seconds in (0, {DAY:.0f}]")


def _load(args: argparse.Namespace) -> App:
    """The MODULE:APP the command names, pointed at ``--dsn`` when one was given, else at
    the environment's DSN if the module built its app before one was set."""
    app = load_app(args.app)
    dsn = args.dsn or (None if app.configured_dsn else dsn_from_environment())
    if dsn:
        app.set_dsn(dsn)
    return app


def _run(args: argparse.Namespace) -> int:
    if args.command == "chaos":
        from ._chaos import chaos_command

        _check_chaos(args)
        return chaos_command(args)
    if args.command == "demo":
        from ._demo import demo_command

        return demo_command(args)
    if args.command == "migrate":
        app = App(args.dsn, migrate=False)
        try:
            applied = migrate(app.dsn)
            print(f"schema up to date; applied now: {', '.join(map(str, applied)) or 'none'}")
        finally:
            app.close()
        return 0
    if args.command == "worker":
        return _worker(args)
    if args.command == "tools":
        return _tools(args)
    if args.command == "dashboard":
        return _dashboard(args)
    if args.command == "mcp":
        return _mcp(args)
    if args.command == "embedded":
        return _embedded(args)
    target = _load(args) if getattr(args, "app", None) else None
    app = target or App(args.dsn, migrate=False)
    # Only `enqueue --migrate` creates tables; a mistyped DSN gets NO_SCHEMA instead, and
    # the doctor must see an unmigrated schema as it is.
    app.auto_migrate = args.command == "enqueue" and bool(args.migrate)
    try:
        return asyncio.run(_with_app(app, args, target))
    finally:
        app.close()


def _app_package(args: argparse.Namespace) -> tuple[str, ...]:
    """The top-level package of MODULE:APP: the app's own loggers log like tenure's."""
    app = getattr(args, "app", None)
    return (app.partition(":")[0].split(".")[0],) if isinstance(app, str) and app else ()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = _parser()
    except ConfigError as exc:  # a malformed TENURE_* default
        print(_error(exc), file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    log_format = args.log_format or os.environ.get("TENURE_LOG_FORMAT", "text")
    configure_logging(
        args.log_level,
        others=args.log_level_others,
        as_json=log_format == "json",
        own=_app_package(args),
    )
    try:
        return _run(args)
    except KeyboardInterrupt:
        return 130
    except (TenureError, OSError) as exc:  # a database error is a StoreError
        if args.debug:
            raise
        print(_error(exc), file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # a bug, or input nothing above foresaw: still one line
        if args.debug:
            raise
        print(
            f"tenure: error: {type(exc).__name__}: {_one_line(exc)} (--debug shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_ERROR
