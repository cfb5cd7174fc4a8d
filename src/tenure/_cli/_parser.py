"""The ``tenure`` command's arguments: every option checked (finite, in range, printable,
short) before anything starts, defaults from ``TENURE_*``."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NoReturn

from .._app import MAX_KEY_LENGTH, MAX_PRIORITY, MAX_TOKEN, MAX_WAIT
from .._errors import ConfigError
from .._observe._events import JOURNAL_KINDS
from .._registry import TENANT_MAX, TOOL_NAME_MAX
from .._text import printable
from .._worker._worker import (
    DEFAULT_CLAIM_BATCH,
    DEFAULT_CONCURRENCY,
    KEEPALIVE,
    KEEPALIVE_RANGE,
    MAX_CLAIM_BATCH,
    MAX_CONCURRENCY,
)

EXIT_USAGE = 2
STATES = ("queued", "running", "waiting", "succeeded", "failed", "cancelled")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
DAY = 86400.0
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


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``2h``, ``14d`` → seconds."""
    match = _DURATION.match(text) if len(text) <= 32 else None
    if not match:
        raise argparse.ArgumentTypeError(
            f"expected a duration like 90s, 10m, 2h or 14d, got {_shown(text)}"
        )
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def _shown(text: str, most: int = 40) -> str:
    """A value quoted for an error line, cut short: the line stays one line and short."""
    return repr(text if len(text) <= most else text[:most] + "...")


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


def json_value(value: str, what: str = "the answer") -> Any:
    """Any JSON value, without NaN or Infinity, nested shallowly enough to parse."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    try:
        return json.loads(value, parse_constant=refuse)
    except RecursionError:
        raise argparse.ArgumentTypeError(f"{what} is nested too deeply") from None
    except ValueError as exc:  # a syntax error, NaN, or an integer of thousands of digits
        reason = str(exc) if isinstance(exc, json.JSONDecodeError) else str(exc).split(":")[0]
        raise argparse.ArgumentTypeError(f"{what} is not JSON: {reason}") from None


def json_object(value: str) -> dict[str, Any]:
    """A payload: a JSON object (see `json_value`)."""
    payload = json_value(value, "the payload")
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
    worker.add_argument(
        "--claim-batch", type=integer(1, MAX_CLAIM_BATCH), default=DEFAULT_CLAIM_BATCH
    )
    worker.add_argument("--poll-interval", type=number(0.01, 60), default=1.0)
    worker.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="event loop: auto (default) is uvloop when installed (tenure[uvloop]), else asyncio",
    )
    worker.add_argument(
        "--gc",
        choices=["tuned", "python"],
        default="tuned",
        help="the garbage collector: tuned (default) freezes what the app loaded and runs "
        "the young pass every 10,000 allocations, not 700; python keeps Python's defaults",
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
    answer = actions.add_parser(
        "answer", help="answer a waitpoint by the token its tool handed out (once)"
    )
    answer.add_argument("token", type=text(MAX_TOKEN))
    answer.add_argument("answer", nargs="?", type=json_value, default=None, help="any JSON")

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

    from .._chaos import add_chaos_arguments

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
