"""The documentation's runnable examples: one way to mark them, one way to find them.

A block is an example when the line before it is
``<!-- example: NAME (tests/path/test_x.py runs this block) -->``, in README.md or in any
page under docs/. If the block is followed by a line starting with "prints" and then a
second fenced block, that block is what the example prints. Each example is run by the
test its marker names, which asks for it by name (`example`, `printed_and_shown`);
tests/system/docs/test_docs_examples.py runs those that need nothing more than a database and
checks that every named test really asks for its example. A Python block that is not a
whole program says why on the line before it, ``<!-- fragment: WHY -->``; any other
Python block must be an example.
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

MARKER = re.compile(
    r"^<!-- example: (?P<name>[a-z0-9-]+) \((?P<runner>tests/[\w/]+\.py) runs this block\) -->\n"
    r"```(?P<lang>\w*)\n(?P<code>.*?)\n```\n"
    r"(?:\n(?P<says>prints[^\n]*)\n\n```\w*\n(?P<shown>.*?)\n```\n)?",
    re.MULTILINE | re.DOTALL,
)
FENCE = re.compile(r"^```(\w*)\n(.*?)\n```$", re.MULTILINE | re.DOTALL)
# A block that is not a program (a config excerpt, a signature listing) says so and why.
FRAGMENT = re.compile(r"^<!-- fragment: (?P<why>\S[^>]*\S) -->$")


@dataclass(frozen=True)
class Example:
    """One marked block: where it is, the test that runs it, its code and its output."""

    name: str
    page: Path
    line: int
    runner: str
    code: str
    shown: str | None
    language: str = "python"  # the block's fence: ```python, or ```sql for a database's part

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page of the site."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def examples() -> dict[str, Example]:
    """Every marked example, by name (a name used twice is an error)."""
    found: dict[str, Example] = {}
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for match in MARKER.finditer(text):
            name = match["name"]
            assert name not in found, f"example {name!r} is marked twice"
            found[name] = Example(
                name=name,
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                runner=match["runner"],
                code=match["code"],
                shown=match["shown"],
                language=match["lang"] or "python",
            )
    return found


def example(name: str) -> Example:
    """The example marked NAME; fails loudly if no page marks it."""
    found = examples()
    assert name in found, f"no page marks an example {name!r} (have {sorted(found)})"
    return found[name]


def run(found: Example, dsn: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run an example as the script a reader would save, against DSN; its output, unchecked."""
    script = workdir / f"{found.name.replace('-', '_')}.py"
    script.write_text(found.code, encoding="utf-8")
    env = {**os.environ, "TENURE_DSN": dsn, "PYTHONUNBUFFERED": "1"}
    command, seconds = [sys.executable, str(script)], 120
    return subprocess.run(
        command, env=env, cwd=workdir, capture_output=True, text=True, timeout=seconds
    )


def imported(name: str, directory: Path, module: str) -> dict[str, Any]:
    """Example NAME saved as DIRECTORY/MODULE.py and run as an import runs it (a worker, a
    server, ``tenure mcp``), not as ``__main__``: its top-level names. They are a copy: its
    functions still see the module's own globals."""
    path = directory / f"{module}.py"
    path.write_text(example(name).code, encoding="utf-8")
    return runpy.run_path(str(path), run_name=module)


def jobs_left(dsn: str) -> list[tuple[str, str, str, int]]:
    """What an example did to tenure's jobs: (tool, idempotency key, state, attempt) of
    each job in the database DSN names, in the order they were queued."""
    with psycopg.connect(dsn) as db:
        query = "SELECT tool, idempotency_key, state, attempt FROM tenure_jobs ORDER BY id"
        return db.execute(query).fetchall()


def printed_and_shown(name: str, dsn: str, workdir: Path) -> tuple[list[str], list[str]]:
    """Run example NAME (it must succeed and its page must show its output): the lines it
    printed, and the lines its page shows."""
    found = example(name)
    assert found.shown is not None, f"{found.where}: no 'prints' block after the example"
    done = run(found, dsn, workdir)
    assert done.returncode == 0, f"{found.where}\n{done.stdout}{done.stderr}"
    return done.stdout.splitlines(), found.shown.splitlines()


def markers() -> list[tuple[Path, str]]:
    """Every ``<!-- example:`` line, well formed or not (a typo must not hide a block)."""
    return [
        (page, line)
        for page in pages()
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith("<!-- example:")
    ]


def code_blocks(language: str) -> list[tuple[Path, int, str]]:
    """Every fenced block in LANGUAGE on every page: (page, line, code)."""
    blocks = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match[1] == language:
                blocks.append((page, text.count("\n", 0, match.start()) + 1, match[2]))
    return blocks


def unmarked_in(text: str, language: str) -> list[int]:
    """The lines (1-based, their opening fence) of the blocks in LANGUAGE in one page's TEXT
    that are neither an example (a well-formed example marker on the line before) nor a
    fragment saying why (``<!-- fragment: WHY -->`` there)."""
    examples_at = {text.count("\n", 0, match.start()) + 2 for match in MARKER.finditer(text)}
    lines = text.splitlines()
    missing = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = lines[line - 2] if line > 1 else ""
        if match[1] == language and line not in examples_at and not FRAGMENT.match(before):
            missing.append(line)
    return missing


def unmarked(language: str) -> list[str]:
    """``page:line`` of every block in LANGUAGE, on every page, that `unmarked_in` finds."""
    return [
        f"{page.relative_to(ROOT)}:{line}"
        for page in pages()
        for line in unmarked_in(page.read_text(encoding="utf-8"), language)
    ]


def section(page: str) -> str:
    """The text of one page of the site, ``docs/<page>``."""
    return (DOCS / page).read_text(encoding="utf-8")
