"""The review example runs as shipped: `python -m tenure.examples.review`."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from tests.support.workers import REPO_ROOT

pytestmark = pytest.mark.slow


def test_the_review_example_survives_its_kills_and_reports_ok(server_dsn: str) -> None:
    env = {**os.environ, "TENURE_DSN": server_dsn, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "tenure.examples.review"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert out.count("SIGKILL") == 2, out[-4000:]
    assert re.search(r"late verdict of the killed gate +refused with Conflict", out), out
    assert "verdict: no verdict lost, no step dispatched twice" in out, out
    # The last gate waited for a person with no call running and no lease held.
    assert re.search(r"wait for a maintainer's sign-off: 0 sign-off calls running", out), out
    assert re.search(r"sign-offs given while the gate held nothing +\d+", out), out
