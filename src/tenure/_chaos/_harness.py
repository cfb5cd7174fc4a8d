"""The fault harness: worker processes under a supervisor, each behind its own proxy.

`Supervisor` starts ``tenure worker`` processes (through `_worker_main`, which
adds the local history), optionally under ``faketime`` and optionally with a
`ChaosProxy` of their own between them and PostgreSQL, and injects process
faults into them: SIGKILL, SIGSTOP/SIGCONT. Each action returns the evidence
that it took effect (the exit status, the process state in /proc), so a run
can tell a fault that fired from one that did not.

`ReceiverProcess` runs the example case service with its decision log, and
`read_tenure` / `read_effects` take the evidence out of the databases once a
run is over.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg.rows import dict_row

from .._store import QUERIES
from ._history import read_jsonl
from ._proxy import ChaosProxy

START_TIMEOUT = 30.0
EXIT_TIMEOUT = 10.0
POLL = 0.02
# Started with --insecure: on loopback, for the harness's own workers only.
RECEIVER_COMMAND = (sys.executable, "-m", "tenure.examples.case_service")
_URL = re.compile(r"^(http://127\.0\.0\.1:(\d+))$", re.MULTILINE)


def wait_for(
    predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.1
) -> None:
    """Poll ``predicate`` until it is truthy; TimeoutError naming ``what`` past ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            if predicate():
                return
            raise TimeoutError(f"{what} (waited {timeout:.1f} s)")
        time.sleep(interval)


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


def process_state(pid: int) -> str:
    """The one-letter state of ``pid`` from /proc (``T`` stopped, ``Z`` zombie), or ``?``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return text[text.rindex(")") + 2]


@dataclass
class WorkerHandle:
    """One worker process, its log, and its proxy (if it has one)."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    proxy: ChaosProxy | None
    faketime: str | None = None
    paused: bool = False
    started: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class Supervisor:
    """Starts, breaks and always cleans up the worker processes of one run."""

    dsn: str
    workdir: Path
    app: str
    concurrency: int = 8
    poll_interval: float = 0.2
    grace: float = 2.0
    proxies: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    workers: dict[str, WorkerHandle] = field(default_factory=dict)
    _files: list[IO[bytes]] = field(default_factory=list)

    @property
    def history_dir(self) -> Path:
        return self.workdir / "history"

    def spawn(
        self,
        name: str,
        *,
        faketime: str | None = None,
        real_monotonic: bool = True,
        env: Mapping[str, str] | None = None,
        dsn: str | None = None,
        proxy: bool | None = None,
    ) -> WorkerHandle:
        """Start worker ``name`` (not waited for: see `wait_started`); ``proxy`` (default:
        the supervisor's ``proxies``) puts a `ChaosProxy` between it and PostgreSQL."""
        if name in self.workers:
            raise ValueError(f"worker {name!r} exists already")
        self.workdir.mkdir(parents=True, exist_ok=True)
        link = None
        target = dsn or self.dsn
        if self.proxies if proxy is None else proxy:
            link = ChaosProxy.for_dsn(target, name=name).start()
            target = link.dsn(target)
        command = [
            sys.executable,
            "-m",
            "tenure._chaos._worker_main",
            "--history",
            str(self.history_dir),
            "--name",
            name,
            self.app,
            "--concurrency",
            str(self.concurrency),
            "--poll-interval",
            str(self.poll_interval),
            "--grace",
            str(self.grace),
        ]
        child_env = {
            **os.environ,
            **self.env,
            **(env or {}),
            "TENURE_DSN": target,
            "PYTHONUNBUFFERED": "1",
        }
        child_env.pop("TENURE_LOG_FORMAT", None)
        child_env.pop("TENURE_DSN_FILE", None)  # TENURE_DSN is the one
        if faketime is not None:
            # What `faketime -f SPEC` does, minus its fork: the pid we signal is the worker.
            child_env["LD_PRELOAD"] = str(faketime_library())
            child_env["FAKETIME"] = faketime
            if real_monotonic:
                child_env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        log_path = self.workdir / f"worker-{name}.log"
        log = log_path.open("ab")
        self._files.append(log)
        proc = subprocess.Popen(
            command,
            cwd=self.cwd or Path.cwd(),
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        handle = WorkerHandle(name, proc, log_path, link, faketime)
        self.workers[name] = handle
        return handle

    def is_started(self, name: str) -> bool:
        """Whether worker ``name`` has logged ``worker_started`` (remembered once seen)."""
        handle = self.workers[name]
        if not handle.started:
            path = self.history_dir / f"{handle.name}-{handle.pid}.jsonl"
            handle.started = any(e.get("ev") == "worker_started" for e in read_jsonl(path))
        return handle.started

    def wait_started(self, *names: str, timeout: float = START_TIMEOUT) -> None:
        """Wait until each named worker (default: all) logged ``worker_started``."""
        for name in names or tuple(self.workers):
            handle = self.workers[name]

            def started(h: WorkerHandle = handle) -> bool:
                if not h.alive:
                    raise RuntimeError(f"worker {h.name} exited: {h.log_tail()}")
                return self.is_started(h.name)

            wait_for(started, timeout, f"worker {name} did not start: {handle.log_tail()}")

    def running(self) -> list[WorkerHandle]:
        return [w for w in self.workers.values() if w.alive]

    # -- process faults ------------------------------------------------------------------

    def kill(self, name: str) -> tuple[bool, str]:
        """SIGKILL and reap; (fired, evidence): fired if it died of that very signal."""
        handle = self.workers[name]
        if not handle.alive:
            return False, f"already exited rc={handle.proc.returncode}"
        with contextlib.suppress(ProcessLookupError):
            os.kill(handle.pid, signal.SIGCONT)  # a stopped process dies just the same
            os.kill(handle.pid, signal.SIGKILL)
        rc = handle.proc.wait(EXIT_TIMEOUT)
        if handle.proxy is not None:
            handle.proxy.stop()
        return rc == -signal.SIGKILL, f"rc={rc}"

    def pause(self, name: str) -> tuple[bool, str]:
        """SIGSTOP; fired once /proc shows the process stopped."""
        handle = self.workers[name]
        if not handle.alive:
            return False, "not running"
        os.kill(handle.pid, signal.SIGSTOP)
        handle.paused = True
        try:
            wait_for(lambda: process_state(handle.pid) in "Tt", 2.0, "stop")
        except TimeoutError:
            return False, f"state {process_state(handle.pid)}"
        return True, "state T"

    def resume(self, name: str) -> None:
        handle = self.workers[name]
        if handle.alive:
            os.kill(handle.pid, signal.SIGCONT)
        handle.paused = False

    def close(self) -> None:
        """Continue every stopped worker, SIGTERM the rest, SIGKILL what lingers; stop proxies."""
        for handle in self.workers.values():
            if handle.alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(handle.pid, signal.SIGCONT)
                    os.kill(handle.pid, signal.SIGTERM)
        for handle in self.workers.values():
            try:
                handle.proc.wait(EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(handle.pid, signal.SIGKILL)
                handle.proc.wait(EXIT_TIMEOUT)
            if handle.proxy is not None:
                handle.proxy.stop()
        for log in self._files:
            log.close()
        self._files.clear()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class ReceiverProcess:
    """The example case service (``tenure.examples.case_service``), logging every decision."""

    dsn: str
    workdir: Path
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    port: int = 0

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

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- evidence from the databases ---------------------------------------------------------


def _connect(dsn: str) -> psycopg.Connection[dict[str, Any]]:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=10)


def read_tenure(dsn: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(jobs, journal) from tenure's tables; journal times as Unix seconds."""
    with _connect(dsn) as conn:
        jobs = conn.execute(QUERIES["chaos_jobs"]).fetchall()
        journal = conn.execute(QUERIES["chaos_journal"]).fetchall()
    return jobs, journal


def read_effects(dsn: str, table: str = "example_cases") -> list[dict[str, Any]]:
    """The receiver's applied effects (id, key, scope, token), in insertion order."""
    queries = {"example_cases": "chaos_case_effects", "example_payments": "chaos_payment_effects"}
    if table not in queries:
        raise ValueError(f"unknown effects table {table!r}")
    with _connect(dsn) as conn:
        return conn.execute(QUERIES[queries[table]]).fetchall()


def terminal_count(dsn: str) -> tuple[int, int]:
    """(jobs, terminal jobs) right now."""
    with _connect(dsn) as conn:
        row = conn.execute(QUERIES["chaos_terminal_count"]).fetchone()
    assert row is not None
    return int(row["n"]), int(row["done"])


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
