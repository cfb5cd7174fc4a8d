"""An App without a DSN says once, on stderr and in one short line, which server it uses
(issue 17, item 6; issue 22, item 13).

A producer that lost its TENURE_DSN (an MCP stdio client started with a minimal
environment) starts an embedded server of its own; its jobs then wait forever
while the real workers sit idle. The notice said so in ~300 characters, on every
command, and `tenure jobs list` printed it a second time on stdout, into piped
output. These tests run real processes with no DSN in their environment and a
TENURE_HOME of their own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.servers import traversable_temp_dir

from tenure._embedded import EmbeddedPostgres, announce, servers_in_use
from tenure._observe._doctor import check_embedded

NOTICE = "no TENURE_DSN: "
SHORT = 110  # characters besides the data dir's path
PRODUCER = """
import tenure

app = tenure.App()
first = app.dsn
assert app.dsn == first
print(first, flush=True)
app.close()
"""


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    with traversable_temp_dir("tenure-notice-") as path:
        yield path


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TENURE_", "PG"))}
    env["TENURE_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if NOTICE in line]


def test_an_app_without_a_dsn_names_its_embedded_server_once_on_stderr(home: Path) -> None:
    done = _run(home, "-c", PRODUCER)
    assert done.returncode == 0, done.stderr
    [notice] = _notices(done.stderr)
    assert notice == (
        f"tenure: no TENURE_DSN: this process runs the embedded PostgreSQL in {home / 'pg18'} "
        "(other machines do not see its jobs)"
    )
    assert len(notice) - len(str(home / "pg18")) <= SHORT


def test_doctor_warns_and_jobs_says_so_when_no_dsn_is_given(home: Path) -> None:
    assert _run(home, "-m", "tenure", "migrate").returncode == 0
    doctor = _run(home, "-m", "tenure", "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert re.search(r"^\s*server\s+warn\s+no TENURE_DSN", doctor.stdout, re.M)
    assert str(home / "pg18") in doctor.stdout
    assert len(_notices(doctor.stderr)) == 1

    jobs = _run(home, "-m", "tenure", "jobs", "list")
    assert jobs.returncode == 0, jobs.stderr
    assert len(_notices(jobs.stderr)) == 1
    assert _notices(jobs.stdout) == [] and str(home) not in jobs.stdout  # pipes get the table
    assert jobs.stdout.lstrip().startswith("0 jobs")


def test_announce_speaks_once_per_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = EmbeddedPostgres(tmp_path / "pg18")
    announce(server)
    announce(server)
    announce(EmbeddedPostgres(tmp_path / "pg18"))
    assert len(_notices(capsys.readouterr().err)) == 1
    assert servers_in_use() == []  # nothing runs: no server for the doctor to warn of


def test_doctor_says_ok_when_a_dsn_names_the_server() -> None:
    [check] = check_embedded()
    assert (check.name, check.status) == ("server", "ok")
