"""Named SQL, parsed once from a `.sql` file.

Every statement tenure sends lives in a `.sql` file under a
``-- name: some_query`` header; runtime code refers to it by name and never
builds SQL. Parameters are always bound (``%(name)s`` placeholders), never
formatted in.
"""

from __future__ import annotations

import re
from importlib import resources
from types import MappingProxyType
from typing import LiteralString

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse_queries(text: str) -> MappingProxyType[str, LiteralString]:
    """Split a file into ``{name: statement}``; duplicate or empty entries are bugs."""
    parts = _HEADER.split(text)
    queries: dict[str, LiteralString] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        statement: LiteralString = "\n".join(
            line for line in body.strip().splitlines() if not line.lstrip().startswith("--")
        ).strip()
        if not statement:
            raise ValueError(f"query {name!r} is empty")
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = statement
    return MappingProxyType(queries)


def load_queries(
    package: str, filename: str = "queries.sql"
) -> MappingProxyType[str, LiteralString]:
    """Load a package's named queries (read once, at import of the caller)."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    return parse_queries(text)


def load_query_folder(package: str) -> MappingProxyType[str, LiteralString]:
    """Load every ``*.sql`` file of a package into one namespace of named queries.

    One folder is the single home of tenure's SQL; files only group statements
    by feature (jobs, journal, pipelines). A name defined in two files is a bug.
    """
    merged: dict[str, LiteralString] = {}
    for entry in sorted(resources.files(package).iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, statement in parse_queries(entry.read_text(encoding="utf-8")).items():
            if name in merged:
                raise ValueError(f"query {name!r} is defined twice (again in {entry.name})")
            merged[name] = statement
    return MappingProxyType(merged)
