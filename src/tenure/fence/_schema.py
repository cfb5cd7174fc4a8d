"""The receiver kit's SQL: its named queries and its migrations.

The kit keeps its own migration history (``tenure_fence_migrations``) because
it lives in the receiver's database, next to tables tenure knows nothing about.
"""

from __future__ import annotations

from typing import Any

import psycopg

from tenure._store._migrate import migrate
from tenure._store._queries import load_queries

QUERIES = load_queries("tenure.fence")

MIGRATIONS_PACKAGE = "tenure.fence.migrations"
MIGRATIONS_TABLE = "tenure_fence_migrations"
# pg_advisory_xact_lock key serialising concurrent migrate_fence() calls ("tnrfence").
MIGRATION_LOCK_KEY = 0x746E_7266_656E_6365


def migrate_fence(target: str | psycopg.Connection[Any]) -> list[int]:
    """Create or upgrade the kit's tables; return the versions this call applied.

    Safe to call at every start of every replica. Takes a DSN or an open sync
    connection (async services: ``await asyncio.to_thread(migrate_fence, dsn)``).
    """
    if isinstance(target, str):
        with psycopg.connect(target, autocommit=True) as conn:
            return migrate(conn, MIGRATIONS_PACKAGE, MIGRATIONS_TABLE, MIGRATION_LOCK_KEY)
    return migrate(target, MIGRATIONS_PACKAGE, MIGRATIONS_TABLE, MIGRATION_LOCK_KEY)
