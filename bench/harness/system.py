"""The machine as the bench sees it: log lines, CPU and memory per process, percentiles.

CPU is read from /proc, not from psutil's cached counters, so that a window's figures are
the kernel's own, taken at the window's edges.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import psutil
import psycopg
from psycopg.abc import Params

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def pct(values: Sequence[float], q: float) -> float:
    """Percentile by linear interpolation (q in 0..100)."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def proc_cpu(pid: int) -> float | None:
    """User+system CPU seconds of one process (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def system_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot."""
    with open("/proc/stat") as fh:
        parts = [int(x) for x in fh.readline().split()[1:]]
    idle = parts[3] + parts[4]
    total = sum(parts[:8])
    return (total - idle) / CLK_TCK, total / CLK_TCK


def rss_mb(pid: int) -> dict[str, float]:
    p = psutil.Process(pid)
    info = p.memory_full_info()
    return {"rss_mb": round(info.rss / 2**20, 1), "uss_mb": round(info.uss / 2**20, 1)}


def connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


def backend_pids(conn: psycopg.Connection[Any], db: str) -> set[int]:
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (db,)
    ).fetchall()
    return {r[0] for r in rows}


class CpuWindow:
    """CPU used in a window by: our worker processes, our database's backends, the rest."""

    def __init__(self, conn: psycopg.Connection[Any], db: str, workers: Sequence[int]) -> None:
        self.conn, self.db = conn, db
        self.workers = list(workers)
        self.backends = backend_pids(conn, db)
        self.me = os.getpid()
        self.t0 = time.monotonic()
        self.w0 = {p: proc_cpu(p) for p in self.workers}
        self.b0 = {p: proc_cpu(p) for p in self.backends}
        self.m0 = proc_cpu(self.me)
        self.s0 = system_busy()
        self.load0 = loadavg()

    def close(self) -> dict[str, Any]:
        wall = time.monotonic() - self.t0
        s1 = system_busy()
        self.backends |= backend_pids(self.conn, self.db)

        def delta(before: dict[int, float | None], pids: Sequence[int] | set[int]) -> float:
            total = 0.0
            for pid in pids:
                a, b = before.get(pid), proc_cpu(pid)
                if a is not None and b is not None:
                    total += b - a
            return total

        workers = delta(self.w0, self.workers)
        backends = delta(self.b0, self.backends)
        me = (proc_cpu(self.me) or 0) - (self.m0 or 0)
        busy = s1[0] - self.s0[0]
        return {
            "wall_s": round(wall, 3),
            "worker_cpu_s": round(workers, 3),
            "pg_backend_cpu_s": round(backends, 3),
            "harness_cpu_s": round(me, 3),
            "machine_busy_cores": round(busy / wall, 2) if wall else None,
            "other_load_cores": round(max(0.0, busy - workers - backends - me) / wall, 2)
            if wall
            else None,
            "load_start": self.load0,
            "load_end": loadavg(),
        }


def scalar(conn: psycopg.Connection[Any], query: str, params: Params = ()) -> Any:
    """The first column of the first row (the bench's queries all return one)."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from: {query}")
    return row[0]
