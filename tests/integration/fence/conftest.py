"""Fixtures for the receiver kit: its tables in the run's database (receiver processes:
tests/system/fence/conftest.py)."""

from __future__ import annotations

import psycopg
import pytest
from tests.integration.fence.helpers import EFFECTS_DDL

from tenure.fence import migrate_fence


@pytest.fixture(scope="session")
def fence_dsn(database_dsn: str) -> str:
    """The run's database with the kit's tables and a table of test side effects."""
    migrate_fence(database_dsn)
    with psycopg.connect(database_dsn) as conn:
        conn.execute(EFFECTS_DDL)
    return database_dsn
