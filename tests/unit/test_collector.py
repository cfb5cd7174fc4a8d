"""`tenure worker`'s garbage collector: tuned by default, Python's own on request.

Each case runs in a child interpreter: the collector's settings belong to the process, and
the test process must keep its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tenure._cli import _parser

PROBE = """
import gc, json, sys
from tenure._cli import _collector
before = gc.get_threshold()
_collector(sys.argv[1])
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def _run(choice: str) -> dict[str, list[int] | int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, choice], check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, list[int] | int] = json.loads(out)
    return result


def test_tuned_freezes_what_is_loaded_and_collects_the_young_less_often() -> None:
    seen = _run("tuned")
    assert seen["before"] != [10_000, 10, 10]  # Python's own, before the worker starts
    assert seen["after"] == [10_000, 10, 10]
    frozen = seen["frozen"]
    assert isinstance(frozen, int) and frozen > 10_000  # tenure and its imports


def test_python_leaves_the_collector_as_it_was() -> None:
    seen = _run("python")
    assert seen["after"] == seen["before"] and seen["frozen"] == 0


def test_the_worker_command_tunes_by_default_and_refuses_an_unknown_choice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = _parser()
    assert parser.parse_args(["worker", "m:app"]).gc == "tuned"
    assert parser.parse_args(["worker", "m:app", "--gc", "python"]).gc == "python"
    with pytest.raises(SystemExit):
        parser.parse_args(["worker", "m:app", "--gc", "off"])
    assert "invalid choice: 'off'" in capsys.readouterr().err
