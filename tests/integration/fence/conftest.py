"""Fixtures for the receiver kit: its tables in the run's database, and real receivers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from tests.integration.fence.helpers import EFFECTS_DDL, Receivers

from tenure.fence import migrate_fence


@pytest.fixture(scope="session")
def fence_dsn(database_dsn: str) -> str:
    """The run's database with the kit's tables and a table of test side effects."""
    migrate_fence(database_dsn)
    with psycopg.connect(database_dsn) as conn:
        conn.execute(EFFECTS_DDL)
    return database_dsn


@pytest.fixture
def receivers(fence_dsn: str, tmp_path: Path) -> Iterator[Receivers]:
    """Starts example receivers on demand; stops every one still running at the end."""
    pool = Receivers(fence_dsn, tmp_path)
    yield pool
    pool.stop_all()
