"""The documentation's examples are code that runs: every Python block is an example run by
the test its marker names (the plain ones here) or a fragment that says why it is not; an
example is a whole program (no name it never defines), and every Python block compiles."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.docs import (
    ROOT,
    Example,
    code_blocks,
    examples,
    markers,
    printed_and_shown,
    unmarked,
    unmarked_in,
)

HERE = "tests/system/docs/test_docs_examples.py"


def plain() -> list[Example]:
    """The examples this file runs: a script, a database, and what it prints."""
    return [found for found in examples().values() if found.runner == HERE]


def test_every_marker_is_well_formed_and_found() -> None:
    found = examples()
    assert len(markers()) == len(found), (
        "a <!-- example: --> line that the collector does not read (its form: "
        "<!-- example: NAME (tests/path/test_x.py runs this block) -->, then the block): "
        f"{[line for _, line in markers()]}"
    )
    # The examples the tests were written for are where the pages say.
    assert {"readme", "from-an-agent", "mcp", "traces", "fence-tool"} <= set(found)


def test_every_example_is_asked_for_by_the_test_its_marker_names() -> None:
    for found in examples().values():
        runner = ROOT / found.runner
        assert runner.is_file(), f"{found.where}: {found.runner} does not exist"
        if found.runner != HERE:
            assert f'"{found.name}"' in runner.read_text(encoding="utf-8"), (
                f"{found.where}: {found.runner} never runs example {found.name!r}"
            )


def test_every_python_block_is_an_example_or_says_why_it_is_not() -> None:
    """A block showing how to use tenure is a whole program a test runs; only a block that
    cannot be one (a config excerpt, a signature listing) is a marked fragment."""
    missing = unmarked("python")
    assert not missing, (
        "Python blocks that are neither an example a test runs "
        "(<!-- example: NAME (tests/path/test_x.py runs this block) -->) nor a fragment "
        f"saying why (<!-- fragment: WHY -->): {missing}"
    )


def undefined_or_unused(code: str) -> str:
    """What ruff (pyflakes' rules, no project settings) finds in CODE saved as a module: a
    name used but never defined or imported, an import or a variable never used."""
    rules = ["--isolated", "--select", "F821,F401,F841", "--output-format", "concise"]
    checked = subprocess.run(
        [sys.executable, "-m", "ruff", "check", *rules, "--stdin-filename", "example.py", "-"],
        input=code,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return "" if checked.returncode == 0 else checked.stdout + checked.stderr


def test_every_example_is_a_whole_program() -> None:
    """No example leans on a name the page never defines (an ``app``, a helper, a token)."""
    assert "example.py:1:7: F821" in undefined_or_unused("print(ask_approver)\n")
    found = {
        name: undefined_or_unused(example.code)
        for name, example in examples().items()
        if example.language == "python"
    }
    assert {name: problems for name, problems in found.items() if problems} == {}


def test_only_a_fragment_that_says_why_may_be_left_unrun() -> None:
    page = "\n".join(
        [
            "<!-- fragment: a signature listing, not a program -->",
            "```python",
            "def f(x: int) -> int: ...",
            "```",
            "",
            f"<!-- example: listed ({HERE} runs this block) -->",
            "```python",
            "print(1)",
            "```",
            "",
            "<!-- fragment: -->",  # no reason given
            "```python",
            "x",
            "```",
            "",
            "```python",
            "y",
            "```",
            "",
            "<!-- example: misspelt (tests/x.py run this block) -->",
            "```python",
            "z",
            "```",
            "",
            "```sh",
            "ls",
            "```",
            "",
        ]
    )
    assert unmarked_in(page, "python") == [12, 16, 21]


def test_every_python_block_compiles() -> None:
    """Fragments too: top-level ``await`` is allowed, a syntax error in a page is not."""
    blocks = code_blocks("python")
    assert len(blocks) >= 15  # as many as the pages have today: none was skipped
    for page, line, code in blocks:
        try:
            compile(
                code, f"{page.relative_to(ROOT)}:{line}", "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            )
        except SyntaxError as error:
            pytest.fail(f"{page.relative_to(ROOT)}:{line}: {error}")


@pytest.mark.storage
@pytest.mark.parametrize("found", plain(), ids=lambda found: found.name)
def test_the_example_runs_and_prints_what_its_page_says(
    found: Example, tenure_dsn: str, tmp_path: Path
) -> None:
    printed, shown = printed_and_shown(found.name, tenure_dsn, tmp_path)
    assert printed == shown, found.where
