"""What only storms need of the harness: skewed clocks, fault evidence, the receiver, evidence.

`StormSupervisor` is ``tenure chaos``'s `Supervisor` whose workers also record their
clocks (`worker_main`), and whose process faults return the evidence that they
took effect (the exit status, the process state in /proc), so a run can tell a
fault that fired from one that did not. `faketime_env` starts a worker under
libfaketime. `ReceiverProcess` runs the example case service with its decision
log, and `read_tenure` / `read_effects` take the evidence out of the databases
once a run is over.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tenure._chaos._harness import EXIT_TIMEOUT, START_TIMEOUT, Supervisor, wait_for
from tenure._chaos._history import read_jsonl
from tenure._store._queries import load_queries

QUERIES = load_queries("tests.support.storm", "storm.sql")
# Started with --insecure: on loopback, for the harness's own workers only.
RECEIVER_COMMAND = (sys.executable, "-m", "tenure.examples.case_service")
_URL = re.compile(r"^(http://127\.0\.0\.1:(\d+))$", re.MULTILINE)

FAKETIME_LIBRARIES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


def faketime_library() -> Path:
    """libfaketime's preload library (Debian package ``faketime``), or FileNotFoundError."""
    for candidate in FAKETIME_LIBRARIES:
        if Path(candidate).is_file():
            return Path(candidate)
    raise FileNotFoundError("libfaketime is not installed (Debian: apt-get install faketime)")


def faketime_env(spec: str, real_monotonic: bool = True) -> dict[str, str]:
    """A worker's environment under libfaketime's ``spec`` (``+30s``, ``+0 x1.5``).

    What ``faketime -f SPEC`` does, minus its fork: the pid we signal is the worker.
    """
    env = {"LD_PRELOAD": str(faketime_library()), "FAKETIME": spec}
    if real_monotonic:
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    return env


def process_state(pid: int) -> str:
    """The one-letter state of ``pid`` from /proc (``T`` stopped, ``Z`` zombie), or ``?``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return text[text.rindex(")") + 2]


class StormSupervisor(Supervisor):
    """The workers of one storm: process faults by name, each with its evidence."""

    worker_module = "tests.support.storm.worker_main"

    def is_started(self, name: str) -> bool:
        return self.workers[name].is_started()

    def kill(self, name: str) -> tuple[bool, str]:
        """SIGKILL and reap; (fired, evidence): fired if it died of that very signal."""
        worker = self.workers[name]
        if not worker.alive:
            return False, f"already exited rc={worker.proc.returncode}"
        rc = worker.kill()
        return rc == -signal.SIGKILL, f"rc={rc}"

    def pause(self, name: str) -> tuple[bool, str]:
        """SIGSTOP; fired once /proc shows the process stopped."""
        worker = self.workers[name]
        if not worker.alive:
            return False, "not running"
        worker.pause()
        try:
            wait_for(lambda: process_state(worker.pid) in "Tt", 2.0, "stop")
        except TimeoutError:
            return False, f"state {process_state(worker.pid)}"
        return True, "state T"

    def resume(self, name: str) -> None:
        self.workers[name].resume()


class ReceiverProcess:
    """The example case service (``tenure.examples.case_service``), logging every decision."""

    def __init__(self, dsn: str, workdir: Path, cwd: Path | None = None) -> None:
        self.dsn = dsn
        self.workdir = workdir
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.port = 0

    @property
    def decision_log(self) -> Path:
        return self.workdir / "decisions.jsonl"

    def start(self, timeout: float = START_TIMEOUT) -> ReceiverProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        out = self.workdir / "receiver.out"
        err = self.workdir / "receiver.err"
        env = {**os.environ, "RECEIVER_DECISION_LOG": str(self.decision_log)}
        with out.open("wb") as stdout, err.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [*RECEIVER_COMMAND, "--dsn", self.dsn, "--port", "0", "--insecure"],
                cwd=self.cwd or Path.cwd(),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
            )
        proc = self.proc

        def listening() -> re.Match[str] | None:
            if proc.poll() is not None:
                raise RuntimeError(f"the receiver exited: {err.read_text()[-2000:]}")
            return _URL.search(out.read_text())

        wait_for(listening, timeout, "the receiver never printed its URL")
        match = _URL.search(out.read_text())
        assert match is not None
        self.url, self.port = match.group(1), int(match.group(2))
        return self

    def decisions(self) -> list[dict[str, Any]]:
        return read_jsonl(self.decision_log)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(EXIT_TIMEOUT)

    def __enter__(self) -> ReceiverProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# -- evidence from the databases ---------------------------------------------------------


def _connect(dsn: str) -> psycopg.Connection[dict[str, Any]]:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=10)


def read_tenure(dsn: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(jobs, journal) from tenure's tables; journal times as Unix seconds."""
    with _connect(dsn) as conn:
        jobs = conn.execute(QUERIES["storm_jobs"]).fetchall()
        journal = conn.execute(QUERIES["storm_journal"]).fetchall()
    return jobs, journal


def read_effects(dsn: str, table: str = "example_cases") -> list[dict[str, Any]]:
    """The receiver's applied effects (id, key, scope, token), in insertion order."""
    queries = {"example_cases": "storm_case_effects", "example_payments": "storm_payment_effects"}
    if table not in queries:
        raise ValueError(f"unknown effects table {table!r}")
    with _connect(dsn) as conn:
        return conn.execute(QUERIES[queries[table]]).fetchall()


def unfinished(dsn: str) -> int:
    """Jobs not yet in a terminal state, right now."""
    with _connect(dsn) as conn:
        row = conn.execute(QUERIES["storm_terminal_count"]).fetchone()
    return int(row["n"]) - int(row["done"]) if row else 0


def all_terminal(dsn: str, keys: set[str]) -> bool:
    """Whether every job of ``keys`` is in a terminal state."""
    with _connect(dsn) as conn:
        row = conn.execute(QUERIES["storm_keys_terminal"], {"keys": list(keys)}).fetchone()
    return row is not None and int(row["n"]) >= len(keys)


def clock_offset() -> float:
    """This machine's ``time.time() - time.monotonic()`` (to map one clock on the other)."""
    samples = []
    for _ in range(5):
        a = time.monotonic()
        wall = time.time()
        b = time.monotonic()
        samples.append((b - a, wall - (a + b) / 2))
    return min(samples)[1]


def uptime_offset() -> float:
    """``time.time()`` minus /proc/uptime, to turn a worker's uptime into real wall time."""
    wall = time.time()
    up = float(Path("/proc/uptime").read_text().split()[0])
    return wall - up
