"""A handful of the hostile arguments of tests/integration/hostile/cli_corpus.py, each run as
a real ``python -m tenure`` subprocess: what running main() in the test's process cannot
show (argv bytes decoded by the interpreter, its exit, asyncio's "Future exception was
never retrieved" printed at shutdown, an environment read at start-up). The whole corpus
runs in-process in tests/integration/hostile/test_hostile_cli.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integration.hostile.cli_corpus import CASES, snapshot
from tests.support.cli import assert_clean_error, run_tenure

# One of each kind: a usage error, a payload past the parser, argv that is not UTF-8, a
# module that raises on import, an environment default, one that reaches the database, a
# payload with its problems listed.
HANDFUL = [
    "no command",
    "deep list",
    "tool not UTF-8",
    "enqueue into a module that raises",
    "TENURE_METRICS_PORT=nan",
    "unknown tool",
    "missing field",
]


@pytest.mark.parametrize("name", HANDFUL)
def test_hostile_arguments_fail_cleanly_in_a_real_process(
    name: str, seeded_dsn: str, cli_workdir: Path
) -> None:
    case = CASES[name]
    before = snapshot(seeded_dsn)
    done = run_tenure(case.args, dsn=seeded_dsn, env=case.env, cwd=cli_workdir, timeout=60)
    assert_clean_error(done.returncode, done.stderr, done.stdout)
    assert snapshot(seeded_dsn) == before
