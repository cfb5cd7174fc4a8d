"""A fresh schema per test: isolation without a database per test."""

from __future__ import annotations

import secrets
from datetime import datetime

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def fresh_schema_dsn(database_dsn: str, prefix: str) -> str:
    """Create an empty schema and return a DSN whose search_path is that schema."""
    schema = f"{prefix}_{secrets.token_hex(5)}"
    with psycopg.connect(database_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    params = conninfo_to_dict(database_dsn)
    params["options"] = f"-c search_path={schema}"
    return make_conninfo(**params)  # type: ignore[arg-type]


def db_now(dsn: str) -> datetime:
    """The database's clock (``clock_timestamp()``), on a connection of its own."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    now: datetime = row[0]
    return now
