"""Every named query is parsed once, used by the code, and nothing else builds SQL."""

import re
from pathlib import Path

import pytest

from tenure._store import QUERIES
from tenure._store._queries import parse_queries

SOURCE = Path(__file__).resolve().parents[2] / "src" / "tenure"


def test_every_named_query_is_used() -> None:
    code = "\n".join(p.read_text() for p in SOURCE.rglob("*.py"))
    unused = [name for name in QUERIES if f'"{name}"' not in code]
    assert unused == []


def test_runtime_code_holds_no_sql_statements() -> None:
    statement = re.compile(r"[\"'](SELECT|INSERT|UPDATE|DELETE|WITH)\s")
    offenders = [
        str(path.relative_to(SOURCE))
        for path in SOURCE.rglob("*.py")
        if statement.search(path.read_text()) and "_migrate" not in path.name
    ]
    assert offenders == []


def test_parser_refuses_duplicates_and_empty_entries() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_queries("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")
    with pytest.raises(ValueError, match="empty"):
        parse_queries("-- name: a\n-- only a comment\n")
    assert dict(parse_queries("-- name: a\n-- c\nSELECT 1\n")) == {"a": "SELECT 1"}
