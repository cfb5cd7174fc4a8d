"""Hostile arguments to the `tenure` command, and the database they must leave untouched.

The corpus: NaN, infinities, negative or huge numbers for every numeric option, payloads
nested past the parser, 5,000-digit integers, invalid UTF-8, unknown tools, MODULE:APP
pointing at nonsense, overlong keys and names, garbage times, ports out of range, hostile
environment defaults. Whatever the argument, the command must fail cleanly (one error
line on stderr, only a payload's problems indented under it; a non-zero exit; no
traceback) and leave every row of ``tenure_jobs`` and ``tenure_events`` as it was.

``test_hostile_cli.py`` (here) runs every case in the test's process, through
``tenure._cli.main``; ``tests/system/hostile/test_hostile_cli_processes.py`` runs a handful
as real ``python -m tenure`` subprocesses (argv decoding, the interpreter's exit,
asyncio's "never retrieved" at shutdown). The fixtures are this folder's conftest's.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

import psycopg

# A module of the work dir (see conftest.py's cli_workdir) that builds the observability
# tests' app from TENURE_DSN when imported, as a subprocess would; in-process it is imported
# afresh for every case, so no case sees the app another one configured.
APP = "hostile_cli_app:app"
APP_MODULE = "from tests.integration.observe.observe_app import build_app\n\napp = build_app()\n"
PAYLOAD = '{"text": "x"}'
HUGE = "9" * 5000
NOT_FINITE = ["nan", "-inf", "1e309", HUGE]
NOT_UTF8 = b"\xff\xfe"


class Case(NamedTuple):
    args: list[str | bytes]
    env: Mapping[str, str] = MappingProxyType({})


def numeric(prefix: list[str | bytes], option: str, *bad: str) -> dict[str, Case]:
    """``prefix option value`` for every non-finite value and the option's own bad ones."""
    head = " ".join(str(p) for p in prefix if p not in (APP, PAYLOAD))
    return {
        f"{head} {option} {value[:12]}": Case([*prefix, option, value])
        for value in [*NOT_FINITE, *bad]
    }


def positional(prefix: list[str], *bad: str) -> dict[str, Case]:
    return {f"{' '.join(prefix)} {value[:12]}": Case([*prefix, value]) for value in bad}


WORKER: list[str | bytes] = ["worker", APP]
ENQUEUE: list[str | bytes] = ["enqueue", APP, "echo", PAYLOAD]

NUMBERS: dict[str, Case] = {
    **numeric(WORKER, "--concurrency", "0", "-1", "100001", "1.5", "", " "),
    **numeric(WORKER, "--claim-batch", "0", "1001"),
    **numeric(WORKER, "--poll-interval", "0", "-1", "61", "0.001"),
    **numeric(WORKER, "--grace", "-1", "3601"),
    **numeric(WORKER, "--metrics-port", "-1", "65536", "70000"),
    **numeric(WORKER, "--journal-retention", "0s", "59s", "3651d", "-1d", "1e9d", "14 days"),
    **numeric(ENQUEUE, "--priority", "101", "-101", "1.5"),
    **numeric(ENQUEUE, "--wait", "-1", "1e12"),
    **numeric(["jobs", "list"], "--limit", "0", "-1", "10001"),
    **positional(["jobs", "show"], "0", "-1", "9223372036854775808", HUGE, "nan", "1.0"),
    **positional(["jobs", "cancel"], "0", "-1", "9223372036854775808", HUGE, "inf"),
    **positional(["jobs", "retry"], "0", "-1", "9223372036854775808", HUGE, "nan"),
    **numeric(["events"], "--job", "0", "-5"),
    **numeric(["events"], "--limit", "0", "10001"),
    **numeric(["prune"], "--older-than", "0s", "3651d", "-1d", "forever"),
    **numeric(["prune", "--dry-run"], "--older-than", "1s", "1e400d"),
    **numeric(["dashboard"], "--port", "-1", "65536", "70000", "99999999999999999999"),
    **numeric(["dashboard", "--port", "0"], "--poll-interval", "0", "-1", "0.01", "61"),
    **numeric(["demo"], "--jobs", "0", "1001"),
    **numeric(["demo"], "--workers", "1", "17"),
    **numeric(["demo", "--pipeline"], "--runs", "0", "201"),
    **numeric(["demo"], "--linger", "-1", "86401"),
}


def chaos(payload: str = "{}", *options: str) -> Case:
    receiver = ["--receiver", "http://127.0.0.1:9", "--receiver-env", "CASES_URL"]
    return Case(["chaos", APP, "send", payload, *receiver, *options])


PAYLOADS: dict[str, Case] = {
    "deep list": Case(["enqueue", APP, "echo", "[" * 100_000]),
    "deep object": Case(["enqueue", APP, "echo", '{"a":' * 5000 + "1" + "}" * 5000]),
    "deep but parseable": Case(["enqueue", APP, "echo", '{"a":' * 100 + "1" + "}" * 100]),
    "5000-digit integer": Case(["enqueue", APP, "echo", '{"text": ' + HUGE + "}"]),
    "5000-digit negative": Case(["enqueue", APP, "echo", '{"text": -' + HUGE + "}"]),
    "NaN": Case(["enqueue", APP, "echo", '{"text": NaN}']),
    "Infinity": Case(["enqueue", APP, "echo", '{"text": -Infinity}']),
    "not json": Case(["enqueue", APP, "echo", "{text: x}"]),
    "empty": Case(["enqueue", APP, "echo", ""]),
    "a list": Case(["enqueue", APP, "echo", "[1, 2]"]),
    "a string": Case(["enqueue", APP, "echo", '"text"']),
    "NUL escape": Case(["enqueue", APP, "echo", '{"text": "a\\u0000b"}']),
    "lone surrogate escape": Case(["enqueue", APP, "echo", '{"text": "\\ud800"}']),
    "invalid UTF-8": Case(["enqueue", APP, "echo", b'{"text": "' + NOT_UTF8 + b'"}']),
    "missing field": Case(["enqueue", APP, "echo", "{}"]),
    "chaos deep payload": chaos("[" * 100_000),
    "chaos 5000 digits": chaos('{"n": ' + HUGE + "}"),
    "chaos timeout nan": chaos("{}", "--timeout", "nan"),
    "chaos timeout -1": chaos("{}", "--timeout", "-1"),
    "chaos timeout inf": chaos("{}", "--timeout", "inf"),
}

NAMES: dict[str, Case] = {
    "unknown tool": Case(["enqueue", APP, "no_such_tool", PAYLOAD]),
    "empty tool": Case(["enqueue", APP, "", PAYLOAD]),
    "overlong tool": Case(["enqueue", APP, "t" * 201, PAYLOAD]),
    "tool not UTF-8": Case(["enqueue", APP, NOT_UTF8, PAYLOAD]),
    "tool with a newline": Case(["enqueue", APP, "echo\nrm -rf", PAYLOAD]),
    "overlong key": Case([*ENQUEUE, "--key", "k" * 501]),
    "key with a tab": Case([*ENQUEUE, "--key", "a\tb"]),
    "key not UTF-8": Case([*ENQUEUE, "--key", b"k" + NOT_UTF8]),
    "empty key": Case([*ENQUEUE, "--key", ""]),
    "overlong tenant": Case([*ENQUEUE, "--tenant", "t" * 201]),
    "tenant not UTF-8": Case([*ENQUEUE, "--tenant", NOT_UTF8]),
    "list tool not UTF-8": Case(["jobs", "list", "--tool", NOT_UTF8]),
    "list overlong tool": Case(["jobs", "list", "--tool", "t" * 201]),
    "list tenant not UTF-8": Case(["jobs", "list", "--tenant", NOT_UTF8]),
    "list state": Case(["jobs", "list", "--state", "running\nfailed"]),
    "events tool not UTF-8": Case(["events", "--tool", NOT_UTF8]),
    "events worker not UTF-8": Case(["events", "--worker", NOT_UTF8]),
    "events overlong worker": Case(["events", "--worker", "w" * 201]),
    "events unknown kind": Case(["events", "--kind", "everything"]),
    "worker name not UTF-8": Case([*WORKER, "--name", NOT_UTF8]),
    "worker overlong name": Case([*WORKER, "--name", "n" * 201]),
    "worker name with ESC": Case([*WORKER, "--name", "w\x1b[31m"]),
    "metrics host not UTF-8": Case([*WORKER, "--metrics-host", NOT_UTF8]),
    "dashboard host not UTF-8": Case(["dashboard", "--host", NOT_UTF8]),
    "dashboard public host": Case(["dashboard", "--host", "0.0.0.0", "--port", "0"]),
    "dsn not UTF-8": Case(["--dsn", b"host=" + NOT_UTF8, "jobs", "list"]),
    "dsn malformed": Case(["--dsn", "host=127.0.0.1 port", "jobs", "list"]),
    "unknown command": Case(["frobnicate"]),
    "unknown option": Case(["jobs", "list", "--everything"]),
    "no command": Case([]),
    "log level": Case(["--log-level", "TRACE", "jobs", "list"]),
}

SINCE: dict[str, Case] = {
    f"since {value[:16]!r}": Case(["events", "--since", value])
    for value in [
        "yesterday",
        "1 fortnight",
        "2026-13-45",
        "0001-01-01",
        "9999-12-31T23:59:59+14:00x",
        "-5m",
        "nan",
        "inf",
        "1e400s",
        "999999999999d",
        "9" * 30 + "d",
        HUGE,
        "1h\n2h",
        "",
    ]
}

NONSENSE_TARGETS = [
    "nonsense",
    ":app",
    "module:",
    "no_such_module_anywhere:app",
    "os:path",
    "os.path:join",
    "../../etc:passwd",
    "tests.integration.observe.observe_app:build_app",
    "tests.integration.observe.observe_app:missing",
    "tests:apps:x",
    "m" * 301 + ":app",
    "\udcff:app",
    "raises_on_import:app",
    "broken_syntax:app",
]
TARGETS: dict[str, Case] = {
    **{f"worker {t[:24]!r}": Case(["worker", t]) for t in NONSENSE_TARGETS},
    **{
        f"{command} {t!r}": Case([command, t])
        for command in ("doctor", "dashboard")
        for t in ("os:path", "raises_on_import:app", "broken_syntax:app", "nonsense")
    },
    "enqueue into nonsense": Case(["enqueue", "nonsense:app", "echo", PAYLOAD]),
    "enqueue into a module that raises": Case(["enqueue", "raises_on_import:app", "echo"]),
}

ENVIRONMENT: dict[str, Case] = {
    f"{name}={value[:12]}": Case(["jobs", "list"], {name: value})
    for name, values in {
        "TENURE_METRICS_PORT": ["nan", "-1", "70000", HUGE, "0x10"],
        "TENURE_LOG_LEVEL": ["TRACE", "10", "nan"],
        "TENURE_LOG_LEVEL_OTHERS": ["everything", "-1"],
    }.items()
    for value in values
}

CASES: dict[str, Case] = {**NUMBERS, **PAYLOADS, **NAMES, **SINCE, **TARGETS, **ENVIRONMENT}


def snapshot(dsn: str) -> tuple[int, str | None, int, str | None]:
    """Every row of tenure_jobs and tenure_events, digested: any insert, update or delete
    shows."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            """
            SELECT (SELECT count(*) FROM tenure_jobs),
                   (SELECT md5(string_agg(j::text, '|' ORDER BY id)) FROM tenure_jobs j),
                   (SELECT count(*) FROM tenure_events),
                   (SELECT md5(string_agg(e::text, '|' ORDER BY id)) FROM tenure_events e)
            """
        ).fetchone()
    assert row is not None
    jobs, jobs_digest, events, events_digest = row
    return jobs, jobs_digest, events, events_digest
