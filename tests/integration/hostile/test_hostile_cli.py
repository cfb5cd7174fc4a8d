"""Every hostile argument of cli_corpus.py, through ``tenure._cli.main`` in this process:
a clean failure, and tenure's tables as they were.

In-process, each case costs its parse (and, for the few that get that far, one connection)
instead of an interpreter's start and tenure's import: 246 subprocesses took about two
minutes of a 2-core machine, these take seconds. The process's state is reset around
each case as a new process would have it: no TENURE_* variable but the case's own,
``TENURE_DSN`` naming the seeded schema, the work dir as the current directory, the
import path as it was, and the corpus's app module imported afresh.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from tests.integration.hostile.cli_corpus import CASES, Case, snapshot
from tests.support.cli import assert_clean_error

from tenure._cli import main


def run_main(
    case: Case,
    dsn: str,
    cwd: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str, str]:
    """``tenure ARGS`` as main() runs it here: exit code, stdout, stderr."""
    for name in [n for n in os.environ if n.startswith("TENURE_")]:
        monkeypatch.delenv(name)
    for name, value in {**case.env, "TENURE_DSN": dsn}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_app puts the work dir first
    monkeypatch.delitem(sys.modules, "hostile_cli_app", raising=False)
    argv = [a if isinstance(a, str) else os.fsdecode(a) for a in case.args]  # as Python's argv
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's usage errors
        code = exit.code if isinstance(exit.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_the_seed_is_there(seeded_dsn: str) -> None:
    jobs, _, events, _ = snapshot(seeded_dsn)
    assert jobs == 3 and events >= 2  # the corpus below would prove little on empty tables


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_hostile_arguments_fail_cleanly_and_change_nothing(
    case: Case,
    seeded_dsn: str,
    cli_workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = snapshot(seeded_dsn)
    code, out, err = run_main(case, seeded_dsn, cli_workdir, monkeypatch, capsys)
    assert_clean_error(code, err, out)
    assert snapshot(seeded_dsn) == before
