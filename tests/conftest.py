"""Shared fixtures: one real PostgreSQL database per test run.

With ``TENURE_TEST_DSN`` set, a fresh database is created on that server for
this run (and dropped at the end); otherwise an embedded PostgreSQL is started
in a temporary directory. Nothing here is mocked.

A test that reaches the server through a fixture (``server_dsn``, or any fixture
built on it, however indirectly) is marked ``storage`` here at collection, so
the marker cannot be forgotten or put where it does nothing. Each test is also
marked with its axis, the top folder it lives in: ``unit`` (no database, no
process), ``integration`` (real PostgreSQL, in this process) or ``system``
(worker processes, faults, storms, a browser).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from tests.support.schemas import fresh_schema_dsn

DATABASE_FIXTURE = "server_dsn"
AXES = ("unit", "integration", "system")
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``storage`` every test whose fixture closure reaches the database fixture, and
    every test with its axis (the folder under tests/ it lives in)."""
    for item in items:
        if DATABASE_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.storage)
        axis = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else ""
        if axis in AXES:
            item.add_marker(axis)


def _server_dsn(tmp_root: Path) -> Iterator[str]:
    given = os.environ.get("TENURE_TEST_DSN")
    if given:
        yield given
        return
    from tenure._embedded import EmbeddedPostgres

    server = EmbeddedPostgres(tmp_root / "embedded")
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """A DSN for the server the run uses (maintenance database)."""
    # Not under pytest's tmp_path: as root the embedded server runs as `nobody`,
    # which cannot enter /tmp/pytest-of-root (0700).
    root = Path(tempfile.mkdtemp(prefix="tenure-test-"))
    os.chmod(root, 0o755)
    try:
        yield from _server_dsn(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def database_dsn(server_dsn: str) -> Iterator[str]:
    """A DSN for a database created for this test run only."""
    name = f"tenure_test_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    params = conninfo_to_dict(server_dsn)
    params["dbname"] = name
    yield make_conninfo(**params)  # type: ignore[arg-type]
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                psycopg.sql.Identifier(name)
            )
        )


@pytest.fixture
def tenure_dsn(database_dsn: str) -> str:
    """A DSN whose search_path is a fresh schema with tenure's tables migrated into it.

    Every test gets its own jobs table, fencing sequence and journal, so tests
    never see each other's rows (NOTIFY channels are shared, which only wakes
    workers early).
    """
    from tenure._store import migrate

    dsn = fresh_schema_dsn(database_dsn, "t")
    migrate(dsn)
    return dsn
