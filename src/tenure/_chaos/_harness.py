"""The process harness: real worker processes, started, broken and always cleaned up.

`Supervisor` starts ``tenure worker`` processes, each with its log file and,
optionally, its own `FaultProxy` between it and PostgreSQL, and stops every one
of them on `close` (stopped ones are continued first). ``tenure chaos`` runs its
two workers with it; the test suite, the storms and the soak subclass it
(``tests/support``). By default a worker runs through `tenure._cli._chaos_worker`, which adds
the local history (`_history`) the runner reads its evidence from.

`WorkerHandle` is one process: signals (SIGKILL, SIGSTOP/SIGCONT, SIGTERM), its
log, and whether it has started. `wait_for` polls a condition with a deadline
instead of sleeping and hoping: it returns as soon as the condition holds and
fails loudly, saying what never happened, when it does not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Generic, Self, TypeVar

from ._history import read_jsonl
from ._proxy import FaultProxy

START_TIMEOUT = 30.0
EXIT_TIMEOUT = 10.0


def wait_for(
    predicate: Callable[[], object],
    timeout: float,
    what: str,
    interval: float = 0.1,
    *,
    error: type[Exception] = TimeoutError,
) -> None:
    """Poll ``predicate`` until it is truthy; ``error`` naming ``what`` past ``timeout``.

    The predicate is always evaluated at least once, and once more at the
    deadline, so a condition that became true while we slept is not missed.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            if predicate():
                return
            raise error(f"{what} (waited {timeout:.2f} s)")
        time.sleep(interval)


class WorkerHandle:
    """One worker process, its log, its proxy (if it has one) and its history (if kept)."""

    def __init__(
        self,
        name: str,
        proc: subprocess.Popen[bytes],
        log_path: Path,
        *,
        proxy: FaultProxy | None = None,
        history: Path | None = None,
    ) -> None:
        self.name = name
        self.proc = proc
        self.log_path = log_path
        self.proxy = proxy
        self.history = history
        self.paused = False
        self.started = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} pid={self.proc.pid} rc={self.proc.poll()}>"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    # -- the log and the start -------------------------------------------------------------

    def log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = 3000) -> str:
        return self.log()[-chars:]

    def has_started(self) -> bool:
        """Whether the worker said ``worker_started`` (here: in its history)."""
        if self.history is None:
            return False
        return any(e.get("ev") == "worker_started" for e in read_jsonl(self.history))

    def is_started(self) -> bool:
        """`has_started`, remembered once seen (the storms ask often)."""
        self.started = self.started or self.has_started()
        return self.started

    def wait_started(self, timeout: float = START_TIMEOUT) -> None:
        """Wait until the worker started; RuntimeError if it exited first."""
        wait_for(
            lambda: self.is_started() or not self.alive,
            timeout,
            f"worker {self.name} did not start: {self.log_tail()}",
            interval=0.02,
        )
        if not self.is_started():
            rc = self.proc.poll()
            raise RuntimeError(f"worker {self.name} exited (rc={rc}): {self.log_tail()}")

    # -- signals ---------------------------------------------------------------------------

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            os.kill(self.proc.pid, sig)

    def kill(self) -> int:
        """SIGKILL, then reap; returns the exit status (-9). Its proxy stops too."""
        self.signal(signal.SIGKILL)
        rc = self.wait(EXIT_TIMEOUT)
        if self.proxy is not None:
            self.proxy.stop()
        return rc

    def pause(self) -> None:
        """SIGSTOP: the whole process freezes, heartbeat thread included."""
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT."""
        self.signal(signal.SIGCONT)
        self.paused = False

    def terminate(self) -> None:
        """SIGTERM: the worker's graceful shutdown."""
        self.signal(signal.SIGTERM)

    def wait(self, timeout: float = EXIT_TIMEOUT) -> int:
        """Wait for the process to exit; raises subprocess.TimeoutExpired past ``timeout``."""
        return self.proc.wait(timeout)

    def stop(self) -> None:
        """Cleanup: continue it if stopped, then SIGKILL it if still alive, and reap."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # a zombie we cannot reap
            self.proc.wait(EXIT_TIMEOUT)


W = TypeVar("W", bound=WorkerHandle)


class Workers(Generic[W]):
    """Starts the worker processes of one run and guarantees they are all gone afterwards.

    ``concurrency``, ``poll_interval`` and ``grace`` are each spawn's defaults (``grace``
    None: the worker's own); ``env`` is added to every worker's environment; ``proxies``
    puts a `FaultProxy` in front of each worker's PostgreSQL by default. `close` lets
    workers shut down gracefully (SIGTERM) if ``graceful``, else kills them outright.
    """

    handle: type[W]
    worker_module = "tenure._cli._chaos_worker"  # `command`: run with ``python -m``
    graceful = True
    log_mode = "ab"  # what `open` makes of a worker's log file ("wb": start it afresh)

    def __init__(
        self,
        dsn: str,
        workdir: Path,
        app: str,
        *,
        concurrency: int = 8,
        poll_interval: float = 0.2,
        grace: float | None = 2.0,
        proxies: bool = False,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.dsn = dsn
        self.workdir = workdir
        self.app = app
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.grace = grace
        self.proxies = proxies
        self.env = dict(env or {})
        self.cwd = cwd
        self.workers: dict[str, W] = {}
        self._files: list[IO[bytes]] = []

    @property
    def history_dir(self) -> Path:
        return self.workdir / "history"

    def command(self, name: str) -> list[str]:
        """The worker's command before ``MODULE:APP`` and the options: ``tenure worker``
        with this run's history (`worker_module`)."""
        return [sys.executable, "-m", self.worker_module, "--history", str(self.history_dir)]

    def history_of(self, name: str, pid: int) -> Path | None:
        """Where worker ``name`` (process ``pid``) keeps its history, if it keeps one."""
        return self.history_dir / f"{name}-{pid}.jsonl"

    def spawn(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        poll_interval: float | None = None,
        grace: float | None = None,
        dsn: str | None = None,
        env: Mapping[str, str] | None = None,
        proxy: bool | None = None,
    ) -> W:
        """Start worker ``name`` (not waited for: see `wait_started`); ``proxy`` (default:
        the group's ``proxies``) puts a `FaultProxy` between it and PostgreSQL."""
        if name in self.workers:
            raise ValueError(f"worker {name!r} exists already")
        self.workdir.mkdir(parents=True, exist_ok=True)
        link = None
        target = dsn or self.dsn
        if self.proxies if proxy is None else proxy:
            link = FaultProxy.for_dsn(target, name=name).start()
            target = link.dsn(target)
        grace = self.grace if grace is None else grace
        command = [
            *self.command(name),
            self.app,
            "--concurrency",
            str(self.concurrency if concurrency is None else concurrency),
            "--name",
            name,
            "--poll-interval",
            str(self.poll_interval if poll_interval is None else poll_interval),
            *(["--grace", str(grace)] if grace is not None else []),
        ]
        child_env = {
            **os.environ,
            **self.env,
            **(env or {}),
            "TENURE_DSN": target,
            "PYTHONUNBUFFERED": "1",
        }
        child_env.pop("TENURE_LOG_FORMAT", None)  # logs are read as key=value lines
        child_env.pop("TENURE_DSN_FILE", None)  # TENURE_DSN is the one
        log_path = self.workdir / f"worker-{name}.log"
        log = log_path.open(self.log_mode)  # closed by close()
        self._files.append(log)
        proc = subprocess.Popen(
            command,
            cwd=self.cwd or Path.cwd(),
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        history = self.history_of(name, proc.pid)
        worker = self.handle(name, proc, log_path, proxy=link, history=history)
        self.workers[name] = worker
        return worker

    def wait_started(self, *names: str, timeout: float = START_TIMEOUT) -> None:
        """Wait until each named worker (default: all) has started."""
        for name in names or tuple(self.workers):
            self.workers[name].wait_started(timeout)

    def running(self) -> list[W]:
        return [w for w in self if w.alive]

    def __getitem__(self, name: str) -> W:
        return self.workers[name]

    def __iter__(self) -> Iterator[W]:
        return iter(list(self.workers.values()))

    def close(self) -> None:
        """Continue every stopped worker; SIGTERM them if graceful, and wait; SIGKILL
        whatever is left; stop the proxies."""
        for worker in self.running():
            worker.resume()
            if self.graceful:
                with contextlib.suppress(ProcessLookupError):
                    worker.terminate()
        for worker in self:
            if self.graceful:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.wait(EXIT_TIMEOUT)
            worker.stop()
            if worker.proxy is not None:
                worker.proxy.stop()
        for log in self._files:
            log.close()
        self._files.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Supervisor(Workers[WorkerHandle]):
    """The workers of one ``tenure chaos`` run (or one storm), each keeping its history."""

    handle = WorkerHandle
