"""Fixtures of the storms: the receiver's own schema, a server a storm may restart, figures.

Every storm's figures are printed in the terminal summary (no ``-s`` needed)
and written to ``artifacts/storms/<storm>.json`` (gitignored).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from tests.support.storm.storm import StormResult

_TABLES: list[str] = []


@pytest.fixture
def record_storm() -> Callable[[StormResult], None]:
    """Print a storm's table now (seen with -s) and again in the terminal summary."""

    def record(result: StormResult) -> None:
        table = f"storm {result.plan.name}:\n{result.table()}"
        print(table)
        _TABLES.append(table)

    return record


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _TABLES:
        terminalreporter.section("storm figures")
        for table in _TABLES:
            terminalreporter.write_line(table)


def schema_dsn(dsn: str, prefix: str) -> str:
    """A DSN whose search_path is a new, empty schema on ``dsn``'s database."""
    schema = f"{prefix}_{secrets.token_hex(5)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(schema)))
    params = conninfo_to_dict(dsn)
    params["options"] = f"-c search_path={schema}"
    return make_conninfo(**params)  # type: ignore[arg-type]


@pytest.fixture
def receiver_dsn(database_dsn: str) -> str:
    """An empty schema for the example receiver (it migrates it when it starts)."""
    return schema_dsn(database_dsn, "r")


@pytest.fixture
def storm_dir() -> Iterator[Path]:
    """A work dir for histories and logs that the server's user (``nobody``) can enter."""
    root = Path(tempfile.mkdtemp(prefix="tenure-storm-"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)
