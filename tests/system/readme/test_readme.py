"""The README's two Quick start commands work in a fresh virtual environment."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slow


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_quick_start_has_exactly_two_commands_and_ci_runs_the_second() -> None:
    commands = quick_start_commands()
    assert len(commands) == 2
    assert "tenure demo" in commands[0]
    assert "pytest" in commands[1]
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


def test_install_and_demo_in_a_fresh_virtualenv() -> None:
    install_and_demo = quick_start_commands()[0]
    work = Path(tempfile.mkdtemp(prefix="tenure-readme-"))
    os.chmod(work, 0o755)  # the embedded server runs as nobody under root
    try:
        project = work / "project"
        shutil.copytree(
            ROOT,
            project,
            ignore=shutil.ignore_patterns(
                ".venv", ".git", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"
            ),
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TENURE_", "VIRTUAL_ENV"))}
        env["TENURE_HOME"] = str(work / "home")
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        done = subprocess.run(
            ["bash", "-c", install_and_demo],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-4000:]
        assert "duplicates committed                         0" in out
        assert "every call committed once, every side effect applied once" in out
        assert re.search(r"duplicate side effects applied\s+0\n", out)
        assert re.search(r"SIGKILL worker-\d in the middle of jobs", out)
        assert out.count("froze (SIGSTOP") == 3  # mid-call, before a request, before a commit
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_test_command_installs_and_collects_in_a_fresh_virtualenv() -> None:
    """Command 2 itself is what .ci/run executes; here its install step and collection."""
    install = quick_start_commands()[1].rsplit("&&", 1)[0]
    work = Path(tempfile.mkdtemp(prefix="tenure-readme-"))
    try:
        project = work / "project"
        shutil.copytree(
            ROOT,
            project,
            ignore=shutil.ignore_patterns(
                ".venv", ".git", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"
            ),
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        done = subprocess.run(
            ["bash", "-c", install + " && .venv/bin/pytest --collect-only -q"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        assert re.search(r"\d+ tests collected", done.stdout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert sys.version_info >= (3, 11)
