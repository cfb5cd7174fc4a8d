"""Imports point down the layers that ARCHITECTURE.md states, and never run in a circle.

The layer order is read from ARCHITECTURE.md itself (the block after its ``layer order``
marker), so the document and this test cannot drift: a module moved to another layer,
or a new import running back up, fails here until one of them says so. The import graph
is read from the source (every ``import`` of a tenure module, in a function or under
``TYPE_CHECKING`` too: a dependency all the same), nothing is run.

A package's ``__init__`` only hands names on: an import through it counts as an import
of the module that defines the name (``from tenure._store import Store`` is an import of
``tenure._store._store``), as farm-studio reads it, and its own imports are not checked.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import tenure

SOURCE = Path(tenure.__file__).parent
ARCHITECTURE = SOURCE.parents[1] / "ARCHITECTURE.md"
ROOT = "tenure"
MARKER = "<!-- layer order:"

# Imports that run back up or close a circle today, each removed by the branch named
# beside it; the test below fails once one is gone, so the list shrinks to empty as the
# branches of issue 23 merge. (importer, imported), both as dotted module names.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True, slots=True)
class Import:
    importer: str
    imported: str  # the module that defines what is imported (through a package's face)
    written: str  # the module the import statement names
    line: int


def module_name(path: Path) -> str:
    parts = [ROOT, *path.relative_to(SOURCE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(SOURCE.rglob("*.py"))}


def is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


@cache
def tree(name: str) -> ast.Module:
    return ast.parse(modules()[name].read_text(encoding="utf-8"))


def absolute(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = importer if is_package(importer) else importer.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


@cache
def handed_on(package: str) -> dict[str, tuple[str, str]]:
    """What a package's ``__init__`` imports and so hands on: name -> (module, name there)."""
    names: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree(package)):
        if isinstance(node, ast.ImportFrom):
            source = absolute(package, node)
            for alias in node.names:
                names.setdefault(alias.asname or alias.name, (source, alias.name))
    return names


def definer(module: str, name: str, seen: frozenset[str] = frozenset()) -> str:
    """The module that defines `name` imported from `module`, through package faces."""
    if f"{module}.{name}" in modules():
        return f"{module}.{name}"
    if module not in modules() or not is_package(module) or module in seen:
        return module
    source, original = handed_on(module).get(name, (module, name))
    if source == module or (source not in modules() and f"{source}.{original}" not in modules()):
        return module
    return definer(source, original, seen | {module})


def imports_of(importer: str) -> Iterator[Import]:
    for node in ast.walk(tree(importer)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules():
                    yield Import(importer, alias.name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            written = absolute(importer, node)
            if written.partition(".")[0] != ROOT:
                continue
            for alias in node.names:
                target = definer(written, alias.name)
                if target in modules() and target != importer:
                    yield Import(importer, target, written, node.lineno)


@cache
def graph() -> tuple[Import, ...]:
    found = {(i.importer, i.imported): i for m in modules() for i in imports_of(m)}
    return tuple(found.values())


def checked_edges() -> list[Import]:
    """Every import but a package face's own (a face has no code of its own to place)."""
    return [i for i in graph() if not is_package(i.importer)]


def layer_block(text: str) -> list[str]:
    """The lines of the fenced block that follows the layer-order marker."""
    after = text.split(MARKER, 1)[1].split("```", 2)
    assert len(after) == 3, "no fenced block after the layer-order marker"
    return [line for line in after[1].splitlines()[1:] if line.strip()]


@cache
def layers() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(layer, its names) from the top down, as ARCHITECTURE.md's block states them: a
    line that starts with a word opens a layer, an indented line continues it."""
    found: list[tuple[str, list[str]]] = []
    for line in layer_block(ARCHITECTURE.read_text(encoding="utf-8")):
        words = line.split()
        if not line[0].isspace():
            found.append((words.pop(0), []))
        found[-1][1].extend(words)
    return tuple((name, tuple(names)) for name, names in found)


def qualified(name: str) -> str:
    return ROOT if name == ROOT else f"{ROOT}.{name}"


@cache
def rank() -> dict[str, int]:
    """Each module's layer, counted from the top (0): the layer of the longest name that is
    the module or a package holding it."""
    names = {qualified(n): depth for depth, (_, ns) in enumerate(layers()) for n in ns}
    placed = {}
    for module in modules():
        holders = [n for n in names if module == n or (n != ROOT and module.startswith(n + "."))]
        if holders:
            placed[module] = names[max(holders, key=len)]
    return placed


def cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    succ: dict[str, list[str]] = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in succ.get(node, []):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(succ):
        if node not in index:
            visit(node)
    return found


def back_up(edges: Iterable[Import]) -> list[Import]:
    """The imports from a lower layer to a higher one (a module in no layer is reported
    by test_every_module_has_a_layer, not here)."""
    placed = rank()
    return [
        i
        for i in edges
        if i.imported in placed and i.importer in placed and placed[i.imported] < placed[i.importer]
    ]


# -- the reader reads what is there --


def test_the_graph_is_read() -> None:
    edges = {(i.importer, i.imported) for i in graph()}
    assert len(modules()) > 100 and len(edges) > 400
    # through the store's face to the module that defines the name; lazy ones too
    assert ("tenure._worker._heartbeat", "tenure._store._lease") in edges
    # imported inside a method (the App's worker factory)
    assert any(a.startswith("tenure._app") and b == "tenure._worker._worker" for a, b in edges)
    assert ("tenure._embedded._server", "tenure._embedded._spawn") in edges


def test_the_cycle_finder_finds_a_circle() -> None:
    edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "d2")]
    assert cycles(edges) == [["a", "b", "c"]]


def test_the_layer_block_is_read() -> None:
    names = [name for name, _ in layers()]
    assert names[0] == "front" and names[-1] == "base" and len(names) >= 6
    assert rank()["tenure._store._jobs"] > rank()["tenure._worker._worker"]


# -- the rules --


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(set(modules()) - set(rank()) - {ROOT})
    assert not unplaced, f"in no layer of ARCHITECTURE.md's layer order: {unplaced}"


def test_the_layer_order_names_only_modules_that_exist() -> None:
    named = {n for _, ns in layers() for n in ns}
    gone = sorted(n for n in named if qualified(n) not in modules())
    assert not gone, f"ARCHITECTURE.md's layer order names what is not there: {gone}"


def test_the_picture_draws_the_layers_in_that_order() -> None:
    """The picture above the block names the same layers, top to bottom."""
    text = ARCHITECTURE.read_text(encoding="utf-8").split(MARKER, 1)[0]
    picture = text.split("## Layers", 1)[1].split("```", 2)[1]
    drawn = [
        line.split()[0] for line in picture.splitlines() if line[:1] == " " and line[1:2] != " "
    ]
    assert drawn == [name for name, _ in layers()]


def test_no_import_runs_back_up_the_layers() -> None:
    wrong = [
        f"{i.importer} -> {i.imported} (line {i.line})"
        for i in back_up(checked_edges())
        if (i.importer, i.imported) not in KNOWN_VIOLATIONS
    ]
    assert not wrong, "imports running back up ARCHITECTURE.md's layer order:\n" + "\n".join(wrong)


def test_no_import_circle() -> None:
    edges = {(i.importer, i.imported) for i in graph()} - set(KNOWN_VIOLATIONS)
    assert cycles(edges) == []


def test_every_known_violation_is_still_there() -> None:
    """A branch that removed one deletes its line: the list only shrinks."""
    edges = {(i.importer, i.imported) for i in graph()}
    gone = sorted(f"{a} -> {b}" for a, b in KNOWN_VIOLATIONS if (a, b) not in edges)
    assert not gone, f"no longer imported; delete from KNOWN_VIOLATIONS: {gone}"
    all_cycles = cycles(edges)
    for (a, b), branch in KNOWN_VIOLATIONS.items():
        running_up = rank().get(b, -1) < rank().get(a, -1)
        in_a_circle = any(a in c and b in c for c in all_cycles)
        assert running_up or in_a_circle, f"{a} -> {b} ({branch}) breaks no rule: delete it"


def test_above_the_store_only_its_face_is_imported() -> None:
    """ARCHITECTURE.md's rule: above the store, import `tenure._store`, not its modules
    (the receiver kit borrows the migration runner and the SQL parser)."""
    allowed = {"tenure._store._migrate", "tenure._store._queries"}
    reached = sorted(
        f"{i.importer} imports {i.written} (line {i.line})"
        for i in graph()
        if i.written.startswith("tenure._store.")
        and not i.importer.startswith("tenure._store")
        and not (i.importer.startswith("tenure.fence.") and i.written in allowed)
    )
    assert not reached, "\n".join(reached)


def test_the_embedded_server_is_imported_through_its_face() -> None:
    reached = sorted(
        f"{i.importer} imports {i.written}"
        for i in graph()
        if i.written.startswith("tenure._embedded.")
        and not i.importer.startswith("tenure._embedded")
    )
    assert not reached, "\n".join(reached)


def test_an_import_up_the_order_is_caught() -> None:
    up = Import("tenure._store._jobs", "tenure._app", "tenure._app", 1)
    down = Import("tenure._app", "tenure._store._jobs", "tenure._store", 1)
    sideways = Import("tenure._maintenance._rescuer", "tenure._pipeline._engine", "", 1)
    assert back_up([up, down, sideways]) == [up]


# -- the package table: what each part imports --

TOKEN = re.compile(r"`([^`]+)`")


def table_rows() -> list[tuple[list[str], list[str]]]:
    """(the modules a row is about, the modules its imports column names), for each row
    of ARCHITECTURE.md's package table (a file name is the row's own, not an import)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    table = text.split("| package | owns | imports", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines()[2:]:
        cells = line.split("|")
        parts = [named(t.rstrip("/").removesuffix(".py")) for t in TOKEN.findall(cells[1])]
        claims = [named(t) for t in TOKEN.findall(cells[3]) if not t.endswith(".py")]
        rows.append(([p for p in parts if p], [c for c in claims if c]))
    return rows


def named(token: str) -> str | None:
    """The module a table cell names (`_store`, `_observe._http`, `tenure.fence`,
    `examples/review_sigkill`), or None for a word that is not one (`App`)."""
    name = token.replace("/", ".")
    name = name if name == ROOT or name.startswith(ROOT + ".") else qualified(name)
    return name if name in modules() else None


def unit(module: str) -> str:
    """The part of tenure a module belongs to: a top-level module or package."""
    return ".".join(module.split(".")[:2])


def under(module: str, name: str) -> bool:
    return module == name or module.startswith(name + ".")


def test_the_table_is_read() -> None:
    rows = table_rows()
    assert len(rows) >= 8
    parts = {p for ps, _ in rows for p in ps}
    assert {"tenure._store", "tenure._embedded", "tenure.fence", "tenure._app"} <= parts


def test_the_table_names_each_part_s_real_imports() -> None:
    """Each row's imports column names every part of tenure its modules import, base
    modules and KNOWN_VIOLATIONS apart (both are named elsewhere), and nothing they do
    not import."""
    base = {qualified(n) for n in dict(layers())["base"]}
    wrong = []
    for parts, claims in table_rows():
        imports = [
            i
            for m in modules()
            if any(under(m, p) for p in parts)
            for i in imports_of(m)
            if not any(under(i.imported, p) or under(i.written, p) for p in parts)
        ]
        named_parts = {unit(c) for c in claims}
        unnamed = {
            f"{i.importer} -> {i.written}"
            for i in imports
            if unit(i.written) not in named_parts | base
            and (i.importer, i.imported) not in KNOWN_VIOLATIONS
        }
        stale = [
            c
            for c in claims
            if not any(under(i.imported, c) or under(i.written, c) for i in imports)
        ]
        if unnamed or stale:
            wrong.append(
                f"{[p.removeprefix('tenure.') for p in parts]}: not named "
                f"{sorted(unnamed)}; named but not imported {stale}"
            )
    assert not wrong, "ARCHITECTURE.md's package table:\n" + "\n".join(wrong)


def test_a_module_map_that_says_so_is_in_import_order() -> None:
    """A package whose module map says "each imports only those listed below it" keeps
    its word: no module of it imports one listed above it (or one the map leaves out)."""
    claim = "each imports only those listed below it"
    packages = [
        m for m in modules() if is_package(m) and claim in (ast.get_docstring(tree(m)) or "")
    ]
    assert "tenure._embedded" in packages
    wrong = []
    for package in packages:
        docstring = ast.get_docstring(tree(package)) or ""
        order = re.findall(r"^ {4}(_\w+) {2,}\S", docstring, re.MULTILINE)
        place = {f"{package}.{name}": i for i, name in enumerate(order)}
        wrong += [
            f"{i.importer} -> {i.imported}"
            for i in graph()
            if i.importer in place
            and under(i.imported, package)
            and i.imported != package
            and place.get(i.imported, -1) <= place[i.importer]
        ]
    assert not wrong, f"imports against the module map's order: {wrong}"
