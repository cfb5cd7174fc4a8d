"""Psycopg errors stop at the store: above `tenure._store` no module names one.

The rule, checked over the source of every module of ``src/tenure`` (its AST, not a grep):
outside the store, no code refers to an exception class of psycopg or psycopg_pool, however
it is spelled (``except psycopg.Error``, ``psycopg.errors.QueryCanceled`` in a
``contextlib.suppress``, ``isinstance(exc, OperationalError)`` after ``from psycopg import
OperationalError``, an alias ``import psycopg as pg``), and none imports ``psycopg.errors``
at all. Each reference is resolved by importing its module and looking the name up, so
only exception classes count: ``psycopg.conninfo`` (rewriting a DSN) or
``psycopg.AsyncConnection`` (a type in a signature) do not.

The store is where every database error becomes a tenure error with its verdict
(`tenure._store._errors.RULES`); code above it catches `StoreError` and its kinds.

Allowed, each for a reason that is not tenure's database:

- ``tenure.fence``: the receiver's kit, on the receiver's own database and pool; its plans
  are thrown the receiver's psycopg errors (a lock timeout is `RequestInProgress`) and it
  ends a transaction with ``psycopg.Rollback``;
- ``tenure._dsn``: a malformed DSN, found by libpq's conninfo parser before any connection;
- ``tenure._embedded``: the embedded server's readiness check, a login on the server it
  started (a base module: it may not import the store), answered with ConfigError.

A second test keeps ``psycopg.sql`` (building statements) inside the store: SQL lives there.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import tenure

SOURCE = Path(tenure.__file__).parent
ALLOWED = ("tenure._store", "tenure.fence", "tenure._dsn", "tenure._embedded")
DRIVERS = ("psycopg", "psycopg_pool")


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(SOURCE.rglob("*.py")):
        parts = path.relative_to(SOURCE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, ast.parse(path.read_text(encoding="utf-8"), str(path))


def allowed(module: str, prefixes: tuple[str, ...] = ALLOWED) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def is_driver(dotted: str) -> bool:
    return dotted.split(".")[0] in DRIVERS


def driver_names(tree: ast.Module) -> dict[str, str]:
    """Each local name bound to something of psycopg's: local name → its dotted path."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if is_driver(alias.name):
                    if alias.asname:
                        names[alias.asname] = alias.name
                    else:
                        root = alias.name.split(".")[0]
                        names[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and is_driver(node.module):
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for anything that is not a plain dotted name."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return None if head is None else [*head, node.attr]
    return None


def resolve(path: str) -> object:
    """The object a dotted path names: the longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            found = getattr(found, attr, None)
        return found
    return None


def is_exception(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseException)


def driver_exceptions(tree: ast.Module) -> list[str]:
    """Every reference to a psycopg exception class (and every import of psycopg.errors),
    as ``line: path``."""
    names = driver_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            imported = [module] if module else []
            imported += [
                f"{module}.{a.name}" if module else a.name for a in node.names if a.name != "*"
            ]
            for name in imported:
                if name and is_driver(name) and ".errors" in f"{name}.":
                    found.append(f"{node.lineno}: import {name}")
                elif name and is_driver(name) and module and is_exception(resolve(name)):
                    found.append(f"{node.lineno}: import {name}")
            continue
        if not isinstance(node, ast.Name | ast.Attribute):
            continue
        parts = dotted(node)
        if not parts or parts[0] not in names:
            continue
        path = ".".join([names[parts[0]], *parts[1:]])
        if is_exception(resolve(path)):
            found.append(f"{node.lineno}: {path}")
    return sorted(set(found))


def test_no_module_above_the_store_names_a_psycopg_error() -> None:
    offenders = {
        name: refs
        for name, tree in modules()
        if not allowed(name) and (refs := driver_exceptions(tree))
    }
    assert not offenders, (
        "psycopg errors are the store's to turn into tenure errors (tenure._store._errors."
        f"RULES); catch StoreError or one of its kinds instead: {offenders}"
    )


def test_the_check_finds_every_spelling() -> None:
    """The rule above would pass vacuously if it missed a spelling: each of these is caught."""
    caught = [
        "import psycopg\ntry:\n    pass\nexcept psycopg.Error:\n    pass\n",
        "import psycopg as pg\ntry:\n    pass\nexcept (pg.OperationalError, OSError):\n    pass\n",
        "from psycopg import OperationalError\nisinstance(x, OperationalError)\n",
        "import contextlib, psycopg.errors\ncontextlib.suppress(psycopg.errors.QueryCanceled)\n",
        "from psycopg.errors import LockNotAvailable\n",
        "from psycopg_pool import PoolTimeout\n",
        "import psycopg_pool\ntry:\n    pass\nexcept psycopg_pool.PoolClosed:\n    pass\n",
    ]
    for source in caught:
        assert driver_exceptions(ast.parse(source)), source
    passed = [
        "import psycopg\nconn: psycopg.AsyncConnection = None\n",
        "from psycopg.conninfo import conninfo_to_dict\n",
        "from tenure._errors import StoreError\ntry:\n    pass\nexcept StoreError:\n    pass\n",
    ]
    for source in passed:
        assert not driver_exceptions(ast.parse(source)), source


def test_the_store_itself_is_where_they_are_named() -> None:
    """The store does name them (else the allowance above would hide a misnamed package)."""
    named = [name for name, tree in modules() if driver_exceptions(tree)]
    assert any(allowed(n, ("tenure._store",)) for n in named), named


def test_statements_are_built_only_in_the_store() -> None:
    """``psycopg.sql`` composes statements: outside the store (and the receiver's kit, which
    runs on its own database) nobody builds one."""
    offenders: dict[str, list[int]] = {}
    for name, tree in modules():
        if allowed(name, ("tenure._store", "tenure.fence")):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in ("psycopg", "psycopg.sql"):
                if node.module == "psycopg.sql" or any(a.name == "sql" for a in node.names):
                    offenders.setdefault(name, []).append(node.lineno)
            elif isinstance(node, ast.Import) and any(a.name == "psycopg.sql" for a in node.names):
                offenders.setdefault(name, []).append(node.lineno)
            elif isinstance(node, ast.Attribute) and dotted(node) == ["psycopg", "sql"]:
                offenders.setdefault(name, []).append(node.lineno)
    assert not offenders, offenders
