"""Worker processes of one measurement, in their own sessions, with their output in cfg.logs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import psutil

from .config import APPS, Config
from .system import log, proc_cpu


class Procs:
    """Worker processes of one measurement: started, made ready, stopped, logged."""

    def __init__(self, cfg: Config, tag: str, cmds: list[list[str]], env: dict[str, str]) -> None:
        self.cfg, self.tag, self.cmds, self.env = cfg, tag, cmds, env
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started_at = 0.0

    def __enter__(self) -> Procs:
        self.cfg.logs.mkdir(parents=True, exist_ok=True)
        self.started_at = time.monotonic()
        for i, cmd in enumerate(self.cmds):
            logf = open(self.cfg.logs / f"{self.tag}.{i}.log", "wb")
            self.procs.append(
                subprocess.Popen(
                    cmd,
                    env=self.env,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    cwd=str(APPS),
                    start_new_session=True,
                )
            )
            logf.close()
        return self

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def all_pids(self) -> list[int]:
        """Worker pids and their children (a CLI may fork)."""
        out = []
        for pid in self.pids:
            with contextlib.suppress(psutil.Error):
                out.append(pid)
                out.extend(c.pid for c in psutil.Process(pid).children(recursive=True))
        return out

    def check_alive(self) -> None:
        for i, p in enumerate(self.procs):
            if p.poll() is not None:
                tail = (self.cfg.logs / f"{self.tag}.{i}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{self.tag} worker {i} exited with {p.returncode}:\n{tail}")

    def pg_connections(self, port: int) -> int:
        """How many of the workers' processes hold at least one connection to PostgreSQL."""
        n = 0
        for pid in self.pids:
            with contextlib.suppress(psutil.Error):
                conns = psutil.Process(pid).net_connections(kind="tcp")
                if any(
                    c.raddr and c.raddr.port == port and c.status == "ESTABLISHED" for c in conns
                ):
                    n += 1
        return n

    def wait_ready(self, port: int, timeout: float = 60.0) -> float:
        """Wait until every process is connected to PostgreSQL and its CPU is quiet."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            n = self.pg_connections(port)
            if n >= len(self.procs) and time.monotonic() - self.started_at > 0.5:
                break
            if time.monotonic() > deadline:
                log(f"{self.tag}: only {n}/{len(self.procs)} connected after {timeout:.0f}s")
                break
            time.sleep(0.05)
        # Quiet CPU: start-up work (imports, pools, schema checks, LISTEN) is over.
        quiet = 0
        while time.monotonic() < deadline and quiet < 2:
            before = {p: proc_cpu(p) or 0.0 for p in self.all_pids()}
            time.sleep(0.25)
            busy = max(((proc_cpu(p) or 0.0) - c) / 0.25 for p, c in before.items())
            quiet = quiet + 1 if busy < 0.05 else 0
        self.check_alive()
        return time.monotonic() - self.started_at

    def signal(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, sig)

    def stop(self, timeout: float = 20.0) -> None:
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def __exit__(self, *exc: object) -> None:
        self.stop()
