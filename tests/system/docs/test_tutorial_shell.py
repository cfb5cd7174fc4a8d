"""The tutorial as a reader follows it, from a fresh data directory and no TENURE_DSN
(issue 22, item 8): ``python myapp.py``; then ``tenure worker myapp:app`` in one terminal
and, while it runs, the commands of "From the shell" in a second one, each as its own
process, in the page's order.

The second terminal's commands failed with "a PostgreSQL server ... already holds
.../postmaster.pid": each tried to start an embedded server of its own on the data dir the
worker's server held. Now they find that server and use it, and leave it running: the
worker started it, and it stops when the worker stops. Each says so once, on stderr, in
one short line (issue 22, item 13), and prints nothing but its own output on stdout.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.docs import example, section
from tests.support.servers import traversable_temp_dir
from tests.support.waiting import wait_until

from tenure._embedded import EmbeddedPostgres

TIMEOUT = 120


def shell_blocks() -> list[str]:
    """The ``sh`` blocks of the tutorial's "From the shell": terminal 1's, terminal 2's."""
    part = section("tutorial.md").split("## From the shell", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", part, re.DOTALL)


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """The reader's directory (``myapp.py`` saved from the page) and environment: the
    installed ``tenure`` on PATH, no TENURE_DSN, a data directory of their own."""
    with traversable_temp_dir("tenure-tutorial-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TENURE_", "PG"))}
        env["TENURE_HOME"] = str(home)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        (tmp_path / "myapp.py").write_text(example("tutorial").code, encoding="utf-8")
        yield tmp_path, env


def _run(args: list[str], work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One command of the reader's, run to its end."""
    return subprocess.run(
        args, cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def _notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "no TENURE_DSN" in line]


def test_the_tutorial_runs_from_the_shell_in_two_terminals(
    reader: tuple[Path, dict[str, str]],
) -> None:
    work, env = reader
    home = Path(env["TENURE_HOME"])
    [terminal_1, terminal_2] = shell_blocks()

    script = _run([sys.executable, "myapp.py"], work, env)
    assert script.returncode == 0, script.stderr
    assert script.stdout == "{'invoice_id': 'c-1048'}\n"

    log = work / "worker.log"
    with log.open("w") as err:
        worker = subprocess.Popen(
            shlex.split(terminal_1), cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        wait_until(
            lambda: "event=worker_started" in log.read_text() or worker.poll() is not None,
            timeout=TIMEOUT,
            message="the worker never started",
        )
        assert worker.poll() is None, log.read_text()
        [owned] = _notices(log.read_text())
        assert f"this process runs the embedded PostgreSQL in {home / 'pg18'} " in owned

        printed: list[str] = []
        for line in terminal_2.splitlines():
            if printed:  # the reader types the id the first command printed for ID
                line = line.replace("ID", str(json.loads(printed[0].splitlines()[0])["id"]))
            done = _run(shlex.split(line), work, env)
            assert done.returncode == 0, f"{line}\n{done.stderr}"
            [notice] = _notices(done.stderr)  # once, on stderr, short
            assert notice == (
                f"tenure: no TENURE_DSN: using the embedded PostgreSQL in {home / 'pg18'} "
                f"that pid {worker.pid} runs (it stops when that process exits)"
            )
            assert "no TENURE_DSN" not in done.stdout
            printed.append(done.stdout)
        queued, shown = printed
        receipt, result = queued.splitlines()
        assert json.loads(receipt)["created"] is True
        assert result == '{"invoice_id": "c-7"}'
        assert re.search(r"^\s*state\s+succeeded\s*$", shown, re.M), shown
        assert re.search(r"\bjob_claimed\b.*\bsucceeded\b", shown, re.S), shown
    finally:
        worker.send_signal(signal.SIGINT)  # Ctrl-C in terminal 1
        code = worker.wait(TIMEOUT)
    assert code == 0, log.read_text()
    # The worker stopped the server it started, and the others left it to the worker.
    assert EmbeddedPostgres(home / "pg18").running() is None
