"""The harness every phase is given: config, results, the workers' environment, the bench database.

One instance per run (run.py makes it). It also puts the tenure source under test and
bench/apps on this process's sys.path, so that the harness enqueues with the same code
the workers run.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg

from . import systems
from .config import APPS, Config
from .environment import describe_machine, resolve_tenure_src, worker_env
from .procs import Procs
from .system import CpuWindow, connect, rss_mb, scalar


class Harness:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.results: dict[str, Any] = {}
        self.tenure_src = resolve_tenure_src(cfg)
        self.env = worker_env(cfg, self.tenure_src)
        os.environ.update(
            {k: v for k, v in self.env.items() if k.startswith(("BENCH_", "TENURE_"))}
        )
        sys.path.insert(0, str(APPS))
        if self.tenure_src:
            sys.path.insert(0, self.tenure_src)
        self.conn: psycopg.Connection[Any] | None = None
        self.seq = 0
        self._tenure_on_f: bool | None = None
        self.pg_port = int(psycopg.conninfo.conninfo_to_dict(cfg.dsn).get("port") or 5432)

    def env_for(self, variant: dict[str, Any]) -> dict[str, str]:
        if not variant.get("src"):
            return self.env
        return {**self.env, "PYTHONPATH": f"{variant['src']}{os.pathsep}{APPS}"}

    # .. database lifecycle ..

    def create_db(self) -> None:
        with connect(self.cfg.admin_dsn) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.cfg.db}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{self.cfg.db}"')
        self.conn = connect(self.cfg.dsn)
        systems.install(self.cfg, self.env, self.conn)

    def drop_db(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.cfg.keep_db:
            return
        with connect(self.cfg.admin_dsn) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.cfg.db}" WITH (FORCE)')

    def db(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed:
            self.conn = connect(self.cfg.dsn)
        return self.conn

    def reset(self, system: str) -> None:
        if system in systems.RESET:
            self.db().execute(systems.RESET[system])

    def machine(self) -> dict[str, Any]:
        return describe_machine(self.cfg, self.db())

    # .. jobs ..

    async def enqueue_bulk(
        self, system: str, n: int, tool: str = "noop", payload: Any = None
    ) -> None:
        """Queue n jobs in one statement (one transaction) with the system's bulk API."""
        self.seq += 1
        await systems.enqueue_bulk(self.cfg, system, f"r{self.seq}-{os.getpid()}", n, tool, payload)

    def _f_storage(self, system: str) -> bool:
        """Whether tenure runs on storage F (bench/prototypes/f_storage.py); asked once per
        bench run (its schema is installed once), not on every poll of every drain."""
        if system != "tenure":
            return False
        if self._tenure_on_f is None:
            found = scalar(self.db(), "SELECT to_regclass('tenure_done') IS NOT NULL")
            self._tenure_on_f = bool(found)
        return self._tenure_on_f

    def remaining(self, system: str) -> bool:
        sql = systems.F_STORAGE["remaining"] if self._f_storage(system) else None
        return bool(scalar(self.db(), sql or systems.REMAINING[system]))

    def finished(self, system: str) -> tuple[int, float | None]:
        """(jobs that succeeded, epoch of the last success) from the database's own records."""
        sql = systems.F_STORAGE["finished"] if self._f_storage(system) else None
        row = self.db().execute(sql or systems.FINISHED[system]).fetchone()
        n, last = row if row is not None else (0, None)
        return int(n), (float(last) if last is not None else None)

    def drain_once(
        self,
        system: str,
        label: str,
        variant: dict[str, Any],
        procs: int,
        n: int,
        profile: Callable[[Procs], Any] | None = None,
        reset: bool = True,
    ) -> dict[str, Any]:
        """Start `procs` idle workers, enqueue n jobs at once, time the drain to the last success.

        ``reset=False`` keeps the table as it is (the bloat phase measures on top of its rows).
        """
        if reset:
            self.reset(system)
        tag = f"tp-{label.split()[0]}-{procs}p-{self.seq + 1}"
        cmds = [systems.worker_cmd(self.cfg, system, variant) for _ in range(procs)]
        with Procs(self.cfg, tag, cmds, self.env_for(variant)) as ws:
            ready_s = ws.wait_ready(self.pg_port)
            idle_rss = [rss_mb(p) for p in ws.pids]
            window = CpuWindow(self.db(), self.cfg.db, ws.all_pids())
            t0 = time.time()
            asyncio.run(self.enqueue_bulk(system, n))
            t1 = time.time()
            prof = profile(ws) if profile else None
            deadline = time.monotonic() + max(300.0, n / 50)
            while self.remaining(system):
                ws.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{label}: drain of {n} jobs did not finish")
                time.sleep(0.1)
            done, last = self.finished(system)
            # pgqueuer writes its log in batches; give a straggler flush a moment.
            t_wait = time.monotonic() + 5
            while done < n and time.monotonic() < t_wait:
                time.sleep(0.1)
                done, last = self.finished(system)
            cpu = window.close()
        drain = (last - t1) if last else float("nan")
        return {
            "system": system,
            "label": label,
            "procs": procs,
            "jobs": n,
            "succeeded": done,
            "enqueue_s": round(t1 - t0, 3),
            "drain_s": round(drain, 3),
            "jobs_per_s": round(n / drain, 1) if drain and drain > 0 else None,
            "ready_s": round(ready_s, 2),
            "idle_rss": idle_rss,
            "cpu": cpu,
            "profile": prof,
        }
