"""Front ends go through the App's doors: no private name of the App, no `tenure._store`.

The rule, by layer (ARCHITECTURE.md):

- ``tenure._store`` is imported only by the layers the store serves: the App's own
  package (``_app``: its client, admin and connection are the front ends' only way to
  the database), the worker, the maintenance services, the pipeline engine, the
  observability runtime (``_observe``: journal writer, metrics, doctor), the
  waiting and run-watching helpers the client uses (``_waiting``, ``_run_watch``),
  ``telemetry`` (it re-exports the admin's record types), ``fence._schema`` (the
  fence's own migrations on the same runner), ``fence._observer`` (a receiver's
  decisions journaled into tenure's journal) and ``_intercept`` (the interceptor chain
  around the store's enqueue, claim and commit). The front ends (``_cli``, ``mcp``,
  ``integrations``, ``_demo``, ``_chaos``, ``examples``, ``__init__``) never do, nor
  does the dashboard (``_dashboard``): its pages read through the App's admin, its
  actions and its waitpoint webhook go through the App's client and admin.
- A private name of the App's parts (``App``, ``Client``, ``Admin``, ``Registry``,
  ``Connection``, the sync faces), and the names the hub App used to have
  (``_store``, ``_waiting``, ``_sync``, ``_schedule_job``, ``_new_job``, ...), is
  read on nothing but ``self`` outside ``tenure._app``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tenure

SOURCE = Path(tenure.__file__).parent
STORE_USERS = (
    "_store/",
    "_app/",
    "_worker/",
    "_maintenance/",
    "_pipeline/",
    "_observe/",
    "_waiting.py",
    "_run_watch.py",
    "telemetry.py",
    "fence/_schema.py",
    "fence/_observer.py",
    "_intercept.py",
)
FRONT_ENDS = (
    "_cli",
    "_dashboard/",
    "mcp/",
    "integrations/",
    "_demo.py",
    "_chaos/",
    "examples/",
    "__init__.py",
)
FORMER = {"_store", "_waiting", "_sync", "_schedule_job", "_new_job", "_probed_store", "_spec_of"}


def _files() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(SOURCE).as_posix(), ast.parse(path.read_text(), str(path)))
        for path in sorted(SOURCE.rglob("*.py"))
    ]


def _app_privates() -> set[str]:
    """Every private attribute and method the App's package defines on its classes."""
    names = set(FORMER)
    for rel, tree in _files():
        if not rel.startswith("_app/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
                "_"
            ):
                names.add(node.name)
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and node.attr.startswith("_")
            ):
                names.add(node.attr)
    return {n for n in names if not (n.startswith("__") and n.endswith("__"))}


def _store_imports(rel: str, tree: ast.Module) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    package = rel.split("/")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(["tenure", *base, *(node.module or "").split(".")]).rstrip(".")
            if node.level == 0:
                module = node.module or ""
            names = [a.name for a in node.names]
            if module == "tenure._store" or module.startswith("tenure._store."):
                found += [(node.lineno, name) for name in names]
            elif module == "tenure" and "_store" in names:
                found.append((node.lineno, "_store"))
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name) for a in node.names if a.name.startswith("tenure._store")
            ]
    return found


def test_only_the_layers_the_store_serves_import_it() -> None:
    offending = [
        f"{rel}:{line} imports {name} from tenure._store"
        for rel, tree in _files()
        if not rel.startswith(STORE_USERS)
        for line, name in _store_imports(rel, tree)
    ]
    assert offending == []


def test_no_front_end_imports_the_store() -> None:
    offending = [
        f"{rel}:{line}"
        for rel, tree in _files()
        if rel.startswith(FRONT_ENDS)
        for line, _ in _store_imports(rel, tree)
    ]
    assert offending == []


def test_no_private_name_of_the_app_is_read_outside_its_package() -> None:
    privates = _app_privates()
    assert {"_connection", "_registry", "_store"} <= privates
    offending = [
        f"{rel}:{node.lineno} .{node.attr}"
        for rel, tree in _files()
        if not rel.startswith("_app/")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in privates
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]
    assert offending == []


def test_the_rule_catches_a_reach_into_the_app() -> None:
    """The checks see what they are for: a front end reading ``app._store``."""
    tree = ast.parse("async def f(app):\n    return await app._connection.store()\n")
    reached = [
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in _app_privates()
    ]
    assert reached == ["_connection"]
    imported = _store_imports("mcp/_tasks.py", ast.parse("from .._store import Store\n"))
    assert imported == [(1, "Store")]
