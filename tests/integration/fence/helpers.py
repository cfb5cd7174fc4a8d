"""Helpers of the receiver-kit tests: unique names, row counts, real receivers.

``Receivers.start`` runs the example case service as a real subprocess
(uvicorn on 127.0.0.1) and waits for the URL it prints, so a test can kill
and restart a receiver exactly as an operator would. ``serve`` runs an ASGI
app under uvicorn in a thread, for tests that build their own app.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import psycopg
import uvicorn
from tests.support.waiting import wait_until

import tenure.fence


class Wire(TypedDict):
    """A request as ``fence_headers`` / ``sign_fence`` sign it: all three parts given."""

    method: str
    path: str
    body: bytes


REPO_ROOT = Path(__file__).resolve().parents[3]
# Where `tenure` is importable from, whether installed or run from the source tree.
TENURE_ROOT = Path(tenure.fence.__file__).resolve().parents[2]
_URL = re.compile(r"^(http://127\.0\.0\.1:(\d+))$", re.MULTILINE)

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS fence_test_effects (
    id bigserial PRIMARY KEY,
    idempotency_key text NOT NULL,
    token bigint NOT NULL
)
"""


def unique(prefix: str = "tool-job") -> str:
    """A scope no other test (or earlier run on the same server) uses."""
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


def count_rows(dsn: str, table: str, key: str) -> int:
    query = {
        "fence_test_effects": "SELECT count(*) FROM fence_test_effects WHERE idempotency_key = %s",
        "example_cases": "SELECT count(*) FROM example_cases WHERE idempotency_key = %s",
        "example_payments": "SELECT count(*) FROM example_payments WHERE idempotency_key = %s",
    }[table]
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query, (key,)).fetchone()
    assert row is not None
    return int(row[0])


def fence_tables(dsn: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every row of the kit's two tables, in key order: equal before and after = nothing changed."""
    with psycopg.connect(dsn) as conn:
        scopes = conn.execute("SELECT * FROM tenure_fence_scopes ORDER BY scope").fetchall()
        requests = conn.execute(
            "SELECT * FROM tenure_fence_requests ORDER BY idempotency_key"
        ).fetchall()
    return scopes, requests


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run ``app`` under uvicorn in a thread on a free loopback port; yield its URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), message="uvicorn never started")
        assert server.started, "uvicorn exited during startup"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@dataclass
class Receiver:
    """One running example case service."""

    process: subprocess.Popen[bytes]
    url: str
    port: int
    decision_log: Path
    stderr: Path

    def decisions(self, key: str | None = None) -> list[dict[str, Any]]:
        """The decision log so far (shared by every run that used the same file)."""
        if not self.decision_log.exists():
            return []
        lines = self.decision_log.read_text(encoding="utf-8").splitlines()
        found = [json.loads(line) for line in lines if line.strip()]
        return [d for d in found if key is None or d["key"] == key]

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, like a crashed host."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


@dataclass
class Receivers:
    dsn: str
    root: Path
    started: list[Receiver] = field(default_factory=list)

    def stop_all(self) -> None:
        """Stop every receiver still running (SIGTERM, then SIGKILL after 10 s)."""
        for receiver in self.started:
            if receiver.process.poll() is None:
                receiver.process.terminate()
                try:
                    receiver.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    receiver.kill()

    def start(
        self, *, port: int = 0, secret: bytes | None = None, decision_log: Path | None = None
    ) -> Receiver:
        index = len(self.started)
        stdout = self.root / f"receiver-{index}.out"
        stderr = self.root / f"receiver-{index}.err"
        log = decision_log or self.root / f"decisions-{index}.jsonl"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(TENURE_ROOT), str(REPO_ROOT), env.get("PYTHONPATH", "")]
        )
        env["RECEIVER_DECISION_LOG"] = str(log)
        args = [
            sys.executable,
            "-m",
            "tenure.examples.case_service",
            "--dsn",
            self.dsn,
            "--port",
            str(port),
        ]
        if secret is not None:
            env["CASE_SERVICE_TEST_SECRET"] = secret.decode()
            args += ["--secret-env", "CASE_SERVICE_TEST_SECRET"]
        else:
            args += ["--insecure"]
        with stdout.open("wb") as out, stderr.open("wb") as err:
            process = subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=out, stderr=err)

        def listening() -> re.Match[str] | None:
            if process.poll() is not None:
                raise AssertionError(
                    f"receiver exited with {process.returncode}: {stderr.read_text()[-2000:]}"
                )
            return _URL.search(stdout.read_text())

        wait_until(listening, timeout=30.0, message="the receiver never printed its URL")
        match = _URL.search(stdout.read_text())
        assert match is not None
        receiver = Receiver(process, match.group(1), int(match.group(2)), log, stderr)
        self.started.append(receiver)
        return receiver
