"""Fixtures for the maintenance tests: a store, a shifted scheduler clock, plain reads."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from tests.integration.store.conftest import store as store  # a Store on this test's schema


def shifted(dsn: str, seconds: float) -> str:
    """``dsn`` whose sessions see the scheduler's clock ``seconds`` ahead of the database's.

    Only the scheduler's slot arithmetic reads ``tenure.schedule_shift``; leases never do.
    """
    params = conninfo_to_dict(dsn)
    params["options"] = f"{params.get('options', '')} -c tenure.schedule_shift={seconds:.6f}s"
    return make_conninfo(**params)  # type: ignore[arg-type]


def rows(dsn: str, query: str, params: dict[str, object] | None = None) -> list[tuple[object, ...]]:
    """Run one statement on its own connection; its rows (none for a plain write)."""
    with psycopg.connect(dsn) as conn:
        cursor = conn.execute(query, params or {})
        return cursor.fetchall() if cursor.description else []
