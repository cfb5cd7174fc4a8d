"""What the `tenure` command does against the wrong database, or none: one line, nothing created.

Read-only commands never migrate (a mistyped DSN must not get tenure's tables),
a refused or silent server fails within the connect timeout, and no failure ends
in a traceback or asyncio's "Future exception was never retrieved".
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from tests.support.cli import assert_one_line_error, run_tenure
from tests.support.schemas import fresh_schema_dsn
from tests.support.workers import REPO_ROOT

APP = "tests.integration.observe.observe_app:app"
NO_SCHEMA = "no tenure schema in this database; run `tenure migrate`"
# A subprocess deadline, not a timing assertion: before the fix the doctor waited out the
# pool's 30 s; now a refused connection fails at once and a silent one after libpq's 5 s.
DOCTOR_DEADLINE = 25.0

READ_ONLY = {
    "jobs list": ["jobs", "list"],
    "jobs show": ["jobs", "show", "1"],
    "jobs cancel": ["jobs", "cancel", "1"],
    "jobs retry": ["jobs", "retry", "1"],
    "events": ["events", "--since", "1h"],
    "prune --dry-run": ["prune", "--dry-run"],
    "prune": ["prune", "--older-than", "7d"],
    "dashboard": ["dashboard", "--port", "0"],
    "enqueue": ["enqueue", APP, "echo", '{"text": "x"}'],
}


@pytest.fixture
def empty_dsn(database_dsn: str) -> str:
    """A fresh schema with nothing in it, as a mistyped DSN would name."""
    return fresh_schema_dsn(database_dsn, "empty")


def objects_in(dsn: str) -> list[str]:
    """Every table, sequence, type or function in the DSN's schema (its search_path)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            """
            SELECT c.relname FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace
            UNION ALL
            SELECT p.proname FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace
            UNION ALL
            SELECT t.typname FROM pg_type t WHERE t.typnamespace = current_schema()::regnamespace
            """
        ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.parametrize("command", READ_ONLY.values(), ids=READ_ONLY.keys())
def test_a_command_that_does_not_migrate_refuses_a_database_without_the_schema(
    empty_dsn: str, command: list[str]
) -> None:
    done = run_tenure(command, dsn=empty_dsn, timeout=60)
    assert_one_line_error(done, NO_SCHEMA)
    assert objects_in(empty_dsn) == []


def test_the_doctor_reports_the_missing_schema_and_creates_nothing(empty_dsn: str) -> None:
    done = run_tenure(["doctor", APP], dsn=empty_dsn)
    assert done.returncode == 1, done
    assert b"not migrated: run `tenure migrate`" in done.stdout
    assert objects_in(empty_dsn) == []


def test_enqueue_migrates_when_asked_and_migrate_makes_the_rest_work(empty_dsn: str) -> None:
    done = run_tenure(["enqueue", "--migrate", APP, "echo", '{"text": "x"}'], dsn=empty_dsn)
    assert done.returncode == 0, done.stderr
    assert b'"created": true' in done.stdout
    assert "tenure_jobs" in objects_in(empty_dsn)
    listed = run_tenure(["jobs", "list"], dsn=empty_dsn)
    assert listed.returncode == 0 and b"1 jobs" in listed.stdout, listed


def test_a_schema_behind_this_tenure_is_refused_too(tenure_dsn: str) -> None:
    with psycopg.connect(tenure_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM tenure_migrations WHERE version = 5")
    done = run_tenure(["jobs", "list"], dsn=tenure_dsn)
    assert_one_line_error(done, "pending migrations: 0005_tenants; run `tenure migrate`")


def test_prune_dry_run_counts_and_deletes_nothing(tenure_dsn: str) -> None:
    with psycopg.connect(tenure_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure_events (at, kind) SELECT now() - interval '30 days', 'job_claimed'"
            " FROM generate_series(1, 3)"
        )
        conn.execute("INSERT INTO tenure_events (kind) VALUES ('job_claimed')")

        def count() -> int:
            row = conn.execute("SELECT count(*) FROM tenure_events").fetchone()
            assert row is not None
            return int(row[0])

        done = run_tenure(["prune", "--dry-run", "--older-than", "7d"], dsn=tenure_dsn)
        assert done.returncode == 0, done.stderr
        assert b"would delete 3 journal rows (dry run: nothing deleted)" in done.stdout
        assert count() == 4
        done = run_tenure(["prune", "--older-than", "7d"], dsn=tenure_dsn)
        assert done.returncode == 0 and b"deleted 3 journal rows" in done.stdout, done
        assert count() == 1


@pytest.fixture
def refused_dsn() -> str:
    """A DSN whose port nobody listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"host=127.0.0.1 port={port} user=tenure dbname=tenure"


@pytest.fixture
def silent_dsn() -> Iterator[str]:
    """A DSN whose server accepts TCP connections and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        yield f"host=127.0.0.1 port={port} user=tenure dbname=tenure"


def test_doctor_fails_at_once_on_a_refused_connection(refused_dsn: str) -> None:
    done = run_tenure(["doctor"], dsn=refused_dsn, timeout=DOCTOR_DEADLINE)
    out = done.stdout.decode()
    assert done.returncode == 1, out
    assert "connectivity" in out and "Connection refused" in out, out
    assert "PoolTimeout" not in out
    assert "Traceback" not in done.stderr.decode() and "never retrieved" not in done.stderr.decode()


def test_doctor_gives_up_on_a_silent_server_after_the_connect_timeout(silent_dsn: str) -> None:
    done = run_tenure(["doctor"], dsn=silent_dsn, timeout=DOCTOR_DEADLINE)
    out = done.stdout.decode()
    assert done.returncode == 1, out
    assert "timeout expired" in out and "PoolTimeout" not in out, out


@pytest.mark.parametrize(
    "command", [["jobs", "list"], ["events"], ["enqueue", APP, "echo", '{"text": "x"}']]
)
def test_a_refused_connection_is_one_line(refused_dsn: str, command: list[str]) -> None:
    done = run_tenure(command, dsn=refused_dsn)
    assert_one_line_error(done, "tenure: error: connection failed", "Connection refused")


def test_a_failed_first_connection_leaves_no_unretrieved_future(refused_dsn: str) -> None:
    """The root cause of "Future exception was never retrieved": App's shared store future."""
    program = (
        "import asyncio, sys, tenure\n"
        "app = tenure.App(sys.argv[1])\n"
        "async def main():\n"
        "    try:\n"
        "        await app.get(1)\n"
        "    except Exception as exc:\n"
        "        print(type(exc).__name__)\n"
        "asyncio.run(main())\n"
        "import gc; gc.collect()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, refused_dsn],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == "ConnectionLost", done  # a tenure error, never psycopg's
    assert done.stderr == "", done.stderr
