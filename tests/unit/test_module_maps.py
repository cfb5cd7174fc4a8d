"""Every package's docstring maps its modules, and the map stays current.

A newcomer reads a package's ``__init__`` first; a map that names a module that has
moved (or misses one that arrived) sends them the wrong way, so a rename or a new
module fails here until the map says so too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import tenure

SOURCE = Path(tenure.__file__).parent
PACKAGES = sorted(path.parent for path in SOURCE.rglob("__init__.py") if path.parent != SOURCE)
# A map line: four spaces, a name (a module, a folder/ or a .sql file), two spaces or more.
ENTRY = re.compile(r"^ {4}([A-Za-z_]\w*)(/|\.sql)? {2,}\S", re.MULTILINE)


def docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""


def modules(package: Path) -> set[str]:
    """The package's modules and subpackages, by the name an import uses."""
    found = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    found |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    return found


def test_every_package_is_seen() -> None:
    names = {p.relative_to(SOURCE).as_posix() for p in PACKAGES}
    assert {"_store", "_worker", "_pipeline", "_maintenance", "_observe", "_chaos"} <= names
    assert {"fence", "mcp", "integrations", "examples"} <= names


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.relative_to(SOURCE).as_posix())
def test_the_package_docstring_names_each_of_its_modules(package: Path) -> None:
    text = docstring(package)
    assert text, f"{package.relative_to(SOURCE)}/__init__.py has no docstring"
    missing = sorted(name for name in modules(package) if not re.search(rf"\b{name}\b", text))
    assert not missing, f"not in the module map of {package.name}: {missing}"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.relative_to(SOURCE).as_posix())
def test_the_map_names_nothing_that_is_not_there(package: Path) -> None:
    entries = ENTRY.findall(docstring(package))
    gone = sorted(
        name + suffix
        for name, suffix in entries
        if not (package / f"{name}.py").is_file() and not (package / f"{name}{suffix}").exists()
    )
    assert not gone, f"the module map of {package.name} names what is not there: {gone}"


def test_the_entry_pattern_reads_the_maps_as_written() -> None:
    """The entry pattern reads the maps as they are written (else the test above is empty)."""
    entries = ENTRY.findall(docstring(SOURCE / "_store"))
    assert ("_lease", "") in entries and ("queries", "/") in entries
    assert ("schema", ".sql") in entries


ROOT = SOURCE.parents[1]
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
# `_worker/_heartbeat.py`, `queries/jobs.sql`, `tests/system/e2e/`, `_pipeline._engine`, ...
PATH = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:py|sql|md)|(?:[\w.-]+/)+)`")
DOTTED = re.compile(r"`(_\w+(?:\._?\w+)+)`")


def _exists(name: str) -> bool:
    """A path from the repository's root or from the package, or a file's own name
    (``_lease.py``) or tail (``queries/jobs.sql``) anywhere in the package."""
    if (ROOT / name).exists() or (SOURCE / name).exists():
        return True
    tail = name.rstrip("/")
    return any(path.as_posix().endswith("/" + tail) for path in SOURCE.rglob("*"))


def test_architecture_names_only_modules_and_files_that_exist() -> None:
    """ARCHITECTURE.md cites files by path: a move or a rename fails here until the map
    follows it."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    paths = set(PATH.findall(text))
    dotted = {
        name.replace(".", "/")
        for name in DOTTED.findall(text)
        if not name.endswith((".py", ".sql", ".md"))
    }
    assert len(paths) > 30 and "_worker/_heartbeat.py" in paths  # the pattern reads the map
    gone = sorted(
        name
        for name in paths | {d + ".py" for d in dotted}
        if "*" not in name and not _exists(name) and not _exists(name.removesuffix(".py"))
    )
    assert not gone, f"ARCHITECTURE.md names what is not there: {gone}"
