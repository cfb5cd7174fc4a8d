"""Plain-SQL versioned migrations, safe to run twice and concurrently.

Files are named ``NNNN_description.sql`` and applied in order, each in its
own transaction, under a transaction-scoped advisory lock so that two
processes migrating at once serialise instead of racing. Applied versions are
recorded in a table of the caller's choosing (tenure's own schema and the
receiver kit keep separate histories).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: str


def discover(package: str) -> list[Migration]:
    """The package's migrations, ordered by version; a duplicate number is a bug."""
    found: list[Migration] = []
    for entry in resources.files(package).iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(
                Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8"))
            )
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a version number in {package}")
    return found


def applied_versions(conn: psycopg.Connection[Any], table: str) -> set[int]:
    """Versions recorded in ``table`` (empty when the table does not exist yet)."""
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    if not exists or not exists[0]:
        return set()
    rows = conn.execute(sql.SQL("SELECT version FROM {}").format(sql.Identifier(table))).fetchall()
    return {int(row[0]) for row in rows}


def migrate(conn: psycopg.Connection[Any], package: str, table: str, lock_key: int) -> list[int]:
    """Apply every pending migration; return the versions this call applied.

    A schema already up to date is only read (which migrations it has): so a role that may
    use the tables but not create them (a worker's, a producer's) can "migrate" at start."""
    known = discover(package)
    if {m.version for m in known} <= applied_versions(conn, table):
        return []
    applied_now: list[int] = []
    version_table = sql.Identifier(table)
    for migration in known:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key,))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (version integer PRIMARY KEY,"
                    " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
                ).format(version_table)
            )
            done = conn.execute(
                sql.SQL("SELECT 1 FROM {} WHERE version = %s").format(version_table),
                (migration.version,),
            ).fetchone()
            if done:
                continue
            conn.execute(sql.SQL(migration.statements))  # type: ignore[arg-type,unused-ignore]
            conn.execute(
                sql.SQL("INSERT INTO {} (version, name) VALUES (%s, %s)").format(version_table),
                (migration.version, migration.name),
            )
            applied_now.append(migration.version)
    return applied_now
