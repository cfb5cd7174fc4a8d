"""TENURE_DSN_FILE keeps the DSN out of a worker's environment (issue 17, item 18).

``tenure worker`` deletes TENURE_DSN from os.environ once it has read it, but
/proc/<pid>/environ keeps the environment the process started with: a tool can
read the DSN there. A worker given TENURE_DSN_FILE never has the DSN in its
environment at all (the file stays readable by the worker's user, and so by its
tools: the README says that this is no boundary either).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo
from tests.apps.environ_app import environ_holds
from tests.support.servers import traversable_temp_dir

import tenure

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("variable", "visible"), [("TENURE_DSN_FILE", False), ("TENURE_DSN", True)]
)
def test_a_worker_given_a_dsn_file_has_no_dsn_in_its_environment(
    tenure_dsn: str, tmp_path: Path, variable: str, visible: bool
) -> None:
    marker = f"dsn-marker-{secrets.token_hex(8)}"  # stands for a password in the DSN
    dsn = make_conninfo(tenure_dsn, application_name=marker)
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text(dsn + "\n")
    dsn_file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TENURE_", "PG"))}
    env[variable] = str(dsn_file) if variable == "TENURE_DSN_FILE" else dsn
    producer = tenure.App(tenure_dsn)
    producer.tool("environ_holds", lease=5, heartbeat=1, jitter=1)(environ_holds)
    # Without a DSN the worker would start an embedded server: keep that out of the way.
    with traversable_temp_dir("tenure-dsn-file-") as home, (tmp_path / "w.log").open("w") as log:
        env["TENURE_HOME"] = str(home)
        command = ["-m", "tenure", "worker", "tests.apps.environ_app:app", "--poll-interval", "0.1"]
        worker = subprocess.Popen(
            [sys.executable, *command], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            job = producer.sync.enqueue("environ_holds", {"marker": marker})
            seen = producer.sync.wait(job.id, timeout=30)
        finally:
            worker.terminate()
            worker.wait(20)
            producer.close()
    assert seen == {"initial": visible, "current": False}
