#!/usr/bin/env python
# ruff: noqa: E501, RUF001  (the report writes long Markdown table rows with math signs)
"""tenure bench: tenure vs pgqueuer vs procrastinate vs a raw-SQL ceiling, same run, same server.

Run it with ``bash bench/run.sh`` (which builds bench/.venv first); ``--quick``
for a sanity run, ``--help`` for every knob. Prints a Markdown report and
writes it, with the raw figures as JSON, to bench/results/. Never asserts on
timing: it measures and prints.

Phases (``--only`` picks some):
  throughput  20,000 no-op jobs, 1 and 4 worker processes, every system
  latency     enqueue → tool start on an idle queue, every system
  heartbeat   10,000 held leases in one tenure worker at H = 5 s
  recovery    SIGKILL of the owner → start on another worker
  bloat       claim throughput: empty table, 1M terminal rows, after prune
  rss         tenure worker RSS idle and with 1,000 running jobs
  profile     py-spy of one tenure worker draining (top frames)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import psycopg

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
APPS = HERE / "apps"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PHASES = ("throughput", "latency", "heartbeat", "recovery", "bloat", "rss", "profile")
SYSTEMS = ("tenure", "pgqueuer", "procrastinate", "raw")


# -- configuration ----------------------------------------------------------------------------


@dataclass
class Config:
    admin_dsn: str
    db: str
    quick: bool
    jobs: int
    procs: list[int]
    rounds: int
    pgq_batches: list[int]
    tenure_concurrency: int
    tenure_claim_batch: int
    tenure_log_levels: list[str]
    procr_concurrency: int
    procr_jobs: int
    raw_batch: int
    raw_extra_batches: list[int]
    latency_jobs: int
    hold_jobs: int
    hold_seconds: float
    hold_lease: float
    hold_heartbeat: float
    hold_jitter: float
    recovery_trials: int
    slow_lease: float
    slow_heartbeat: float
    slow_jitter: float
    bloat_rows: int
    bloat_jobs: int
    bloat_reps: int
    rss_jobs: int
    phases: list[str]
    systems: list[str]
    keep_db: bool
    out: Path
    tenure_src: str | None
    tenure_ref: str | None
    tenure_variants: list[tuple[str, str]]
    latency_nofsync: bool
    logs: Path = field(init=False)

    def __post_init__(self) -> None:
        self.logs = self.out / "logs"

    @property
    def dsn(self) -> str:
        return psycopg.conninfo.make_conninfo(self.admin_dsn, dbname=self.db)

    @property
    def dsn_url(self) -> str:
        p = psycopg.conninfo.conninfo_to_dict(self.dsn)
        user = p.get("user", "postgres")
        password = f":{p['password']}" if p.get("password") else ""
        return (
            f"postgresql://{user}{password}@{p.get('host', '127.0.0.1')}:"
            f"{p.get('port', 5432)}/{self.db}"
        )


def parse_args(argv: Sequence[str] | None = None) -> Config:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fast sanity run (small sizes)")
    p.add_argument(
        "--admin-dsn",
        default=env("BENCH_ADMIN_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"),
        help="DSN of a database to create/drop the bench database from ($BENCH_ADMIN_DSN)",
    )
    p.add_argument("--db", default=env("BENCH_DB", "tenure_bench"), help="bench database name")
    p.add_argument("--jobs", type=int, help="jobs per throughput run (20000; quick 2000)")
    p.add_argument("--procs", default="1,4", help="worker process counts (1,4)")
    p.add_argument("--rounds", type=int, help="interleaved rounds per throughput cell (2; quick 1)")
    p.add_argument("--pgq-batches", default=None, help="pgqueuer --batch-size values (10,100,500)")
    p.add_argument("--tenure-concurrency", type=int, default=200)
    p.add_argument("--tenure-claim-batch", type=int, default=100)
    p.add_argument(
        "--tenure-log-levels",
        default="INFO,WARNING",
        help="tenure worker --log-level variants to run (INFO is the CLI default)",
    )
    p.add_argument("--procrastinate-concurrency", type=int, default=10)
    p.add_argument(
        "--procrastinate-jobs",
        type=int,
        help="jobs per procrastinate throughput run (1000; quick 500): it fetches one job per "
        "statement and slows with the backlog, so a full 20,000 would take minutes",
    )
    p.add_argument("--raw-batch", type=int, default=100, help="the ceiling's claim size (100)")
    p.add_argument(
        "--raw-extra-batches",
        default="500",
        help="further raw-SQL claim sizes shown for reference (500: pgqueuer's largest batch); "
        "'' for none",
    )
    p.add_argument("--latency-jobs", type=int, help="jobs per latency run (500; quick 100)")
    p.add_argument("--hold-jobs", type=int, help="held leases in the heartbeat phase (10000)")
    p.add_argument("--hold-seconds", type=float, help="heartbeat window (120; quick 20)")
    p.add_argument("--hold-lease", type=float, default=15.0)
    p.add_argument("--hold-heartbeat", type=float, default=5.0)
    p.add_argument("--hold-jitter", type=float, default=4.0)
    p.add_argument("--recovery-trials", type=int, help="SIGKILL trials (3; quick 1)")
    p.add_argument("--slow-lease", type=float, default=6.0, help="lease of the recovery tool")
    p.add_argument("--slow-heartbeat", type=float, default=1.5)
    p.add_argument("--slow-jitter", type=float, default=2.0)
    p.add_argument("--bloat-rows", type=int, help="terminal rows (1000000; quick 200000)")
    p.add_argument("--bloat-jobs", type=int, help="jobs drained per bloat case (10000; quick 2000)")
    p.add_argument("--bloat-reps", type=int, help="repetitions per bloat case (2; quick 1)")
    p.add_argument("--rss-jobs", type=int, default=1000)
    p.add_argument("--only", help=f"comma-separated phases of {','.join(PHASES)}")
    p.add_argument("--skip", help="comma-separated phases to skip")
    p.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help="systems in the throughput and latency phases (tenure,pgqueuer,procrastinate,raw)",
    )
    p.add_argument("--keep-db", action="store_true", help="do not drop the bench database")
    p.add_argument(
        "--tenure-src",
        default=env("BENCH_TENURE_SRC"),
        help="directory holding the `tenure` package to bench instead of the installed one "
        "(e.g. a patched copy); default: a copy of the working tree's src/tenure taken at start",
    )
    p.add_argument(
        "--tenure-ref",
        default=env("BENCH_TENURE_REF"),
        help="bench the repo's src/tenure as of this git ref (read with `git archive`), "
        "e.g. HEAD, instead of the working tree",
    )
    p.add_argument(
        "--tenure-variant",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also run tenure from DIR (a directory holding a `tenure` package, e.g. a patched "
        "copy) in the throughput and heartbeat phases, labelled LABEL; repeatable",
    )
    p.add_argument(
        "--no-latency-nofsync",
        action="store_true",
        help="skip the latency variant with synchronous_commit=off on the bench's sessions",
    )
    p.add_argument("--out", default=str(HERE / "results"))
    a = p.parse_args(argv)
    q = a.quick
    phases = list(PHASES) if not a.only else [x.strip() for x in a.only.split(",") if x.strip()]
    if a.skip:
        phases = [x for x in phases if x not in {s.strip() for s in a.skip.split(",")}]
    unknown = set(phases) - set(PHASES)
    if unknown:
        p.error(f"unknown phases: {', '.join(sorted(unknown))}")
    jobs = a.jobs or int(env("BENCH_JOBS", 2000 if q else 20000))
    return Config(
        admin_dsn=a.admin_dsn,
        db=a.db,
        quick=q,
        jobs=jobs,
        procs=[int(x) for x in a.procs.split(",")],
        rounds=a.rounds or (1 if q else 2),
        pgq_batches=[
            int(x) for x in (a.pgq_batches or ("10,100" if q else "10,100,500")).split(",")
        ],
        tenure_concurrency=a.tenure_concurrency,
        tenure_claim_batch=a.tenure_claim_batch,
        tenure_log_levels=[x.strip().upper() for x in a.tenure_log_levels.split(",") if x.strip()],
        procr_concurrency=a.procrastinate_concurrency,
        procr_jobs=min(jobs, a.procrastinate_jobs or (500 if q else 1000)),
        raw_batch=a.raw_batch,
        raw_extra_batches=[int(x) for x in a.raw_extra_batches.split(",") if x.strip()],
        latency_jobs=a.latency_jobs or (100 if q else 500),
        hold_jobs=a.hold_jobs or 10_000,
        hold_seconds=a.hold_seconds or (20.0 if q else 120.0),
        hold_lease=a.hold_lease,
        hold_heartbeat=a.hold_heartbeat,
        hold_jitter=a.hold_jitter,
        recovery_trials=a.recovery_trials or (1 if q else 3),
        slow_lease=a.slow_lease,
        slow_heartbeat=a.slow_heartbeat,
        slow_jitter=a.slow_jitter,
        bloat_rows=a.bloat_rows or (200_000 if q else 1_000_000),
        bloat_jobs=a.bloat_jobs or min(jobs, 10_000),
        bloat_reps=a.bloat_reps or (1 if q else 2),
        rss_jobs=a.rss_jobs,
        phases=phases,
        systems=[x.strip() for x in a.systems.split(",") if x.strip()],
        keep_db=a.keep_db,
        out=Path(a.out),
        tenure_src=a.tenure_src,
        tenure_ref=a.tenure_ref,
        tenure_variants=[
            (v.split("=", 1)[0], str(Path(v.split("=", 1)[1]).resolve())) for v in a.tenure_variant
        ],
        latency_nofsync=not a.no_latency_nofsync,
    )


# -- small utilities --------------------------------------------------------------------------


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


def postgres_pids() -> set[int]:
    pids = set()
    for p in psutil.process_iter(["name"]):
        if p.info["name"] in ("postgres", "postmaster"):
            pids.add(p.pid)
    return pids


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


# -- processes --------------------------------------------------------------------------------


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


# -- the systems --------------------------------------------------------------------------------


class Bench:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.results: dict[str, Any] = {}
        self.py = sys.executable
        self.bin = Path(sys.executable).parent
        self.tenure_src = self.resolve_tenure_src()
        pythonpath = f"{self.tenure_src}{os.pathsep}{APPS}" if self.tenure_src else str(APPS)
        self.env = {
            **os.environ,
            "TENURE_DSN": cfg.dsn,
            "BENCH_DSN": cfg.dsn,
            "BENCH_DSN_URL": cfg.dsn_url,
            "PYTHONPATH": pythonpath,
            "PYTHONUNBUFFERED": "1",
            "BENCH_HOLD_LEASE": str(cfg.hold_lease),
            "BENCH_HOLD_HEARTBEAT": str(cfg.hold_heartbeat),
            "BENCH_HOLD_JITTER": str(cfg.hold_jitter),
            "BENCH_SLOW_LEASE": str(cfg.slow_lease),
            "BENCH_SLOW_HEARTBEAT": str(cfg.slow_heartbeat),
            "BENCH_SLOW_JITTER": str(cfg.slow_jitter),
        }
        os.environ.update(
            {k: v for k, v in self.env.items() if k.startswith(("BENCH_", "TENURE_"))}
        )
        sys.path.insert(0, str(APPS))
        if self.tenure_src:
            sys.path.insert(0, self.tenure_src)
        self.conn: psycopg.Connection[Any] | None = None
        self.seq = 0
        self.pg_port = int(psycopg.conninfo.conninfo_to_dict(cfg.dsn).get("port") or 5432)

    def env_for(self, variant: dict[str, Any]) -> dict[str, str]:
        if not variant.get("src"):
            return self.env
        return {**self.env, "PYTHONPATH": f"{variant['src']}{os.pathsep}{APPS}"}

    def resolve_tenure_src(self) -> str | None:
        if self.cfg.tenure_src:
            return str(Path(self.cfg.tenure_src).resolve())
        if not self.cfg.tenure_ref:
            # A copy of the working tree's package taken now, so that edits made to the
            # repo while the bench runs cannot change (or break) the code under test.
            dest = self.cfg.out / "tenure-src-snapshot"
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(
                REPO / "src" / "tenure",
                dest / "src" / "tenure",
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
            return str(dest / "src")
        ref = self.cfg.tenure_ref
        dest = self.cfg.out / f"tenure-src-{ref.replace('/', '_')}"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", ref, "src/tenure"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return str(dest / "src")

    def tenure_origin(self) -> dict[str, Any]:
        def git(*args: str) -> str:
            r = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
            return r.stdout.strip()

        import tenure

        return {
            "imported_from": str(Path(tenure.__file__).parent),
            "ref": self.cfg.tenure_ref
            or ("custom source" if self.cfg.tenure_src else "working tree (copied at start)"),
            "head": git("rev-parse", "--short", "HEAD"),
            "working_tree_changes": len(git("status", "--porcelain", "src").splitlines()),
        }

    # .. database lifecycle ..

    def create_db(self) -> None:
        with connect(self.cfg.admin_dsn) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.cfg.db}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{self.cfg.db}"')
        self.conn = connect(self.cfg.dsn)
        self.run_cli([self.py, "-m", "tenure", "--dsn", self.cfg.dsn, "migrate"], "tenure migrate")
        self.run_cli(
            [str(self.bin / "pgq"), "--pg-dsn", self.cfg.dsn_url, "install"], "pgq install"
        )
        self.run_cli(
            [str(self.bin / "procrastinate"), "--app=procr_app.app", "schema", "--apply"],
            "procrastinate schema",
        )
        c = self.db()
        c.execute("CREATE SEQUENCE raw_fence_token AS bigint")
        c.execute("CREATE TABLE raw_jobs (LIKE tenure_jobs INCLUDING ALL)")

    def drop_db(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.cfg.keep_db:
            return
        with connect(self.cfg.admin_dsn) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.cfg.db}" WITH (FORCE)')

    def run_cli(self, cmd: list[str], what: str) -> None:
        r = subprocess.run(cmd, env=self.env, cwd=str(APPS), capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{what} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")

    def db(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed:
            self.conn = connect(self.cfg.dsn)
        return self.conn

    def reset(self, system: str) -> None:
        c = self.db()
        if system == "tenure":
            c.execute("TRUNCATE tenure_jobs, tenure_events")
        elif system == "raw":
            c.execute("TRUNCATE raw_jobs")
        elif system == "pgqueuer":
            c.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
        elif system == "procrastinate":
            c.execute(
                "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_workers CASCADE"
            )

    def machine(self) -> dict[str, Any]:
        model = ""
        with contextlib.suppress(OSError):
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        c = self.db()
        settings = {
            name: c.execute(f"SHOW {name}").fetchone()[0]
            for name in (
                "server_version",
                "synchronous_commit",
                "shared_buffers",
                "max_connections",
                "fsync",
                "wal_level",
            )
        }
        versions = {}
        for pkg in ("tenure", "pgqueuer", "procrastinate", "psycopg", "psycopg-pool", "asyncpg"):
            with contextlib.suppress(Exception):
                from importlib.metadata import version

                versions[pkg] = version(pkg)
        return {
            "cpu_model": model or platform.processor(),
            "cores": os.cpu_count(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "postgres": settings,
            "packages": versions,
            "load_at_start": loadavg(),
            "tenure_source": self.tenure_origin(),
        }

    # .. worker commands ..

    def worker_cmd(self, system: str, variant: dict[str, Any]) -> list[str]:
        if system == "tenure":
            return [
                self.py,
                "-m",
                "tenure",
                "--log-level",
                variant.get("log_level", "INFO"),
                "worker",
                "tenure_app:app",
                "--concurrency",
                str(variant.get("concurrency", self.cfg.tenure_concurrency)),
                "--claim-batch",
                str(variant.get("claim_batch", self.cfg.tenure_claim_batch)),
                "--poll-interval",
                str(variant.get("poll_interval", 1.0)),
            ]
        if system == "pgqueuer":
            return [
                self.py,
                str(APPS / "pgq_run.py"),
                "--factory",
                "pgq_app:factory",
                "--batch-size",
                str(variant.get("batch", 10)),
            ]
        if system == "procrastinate":
            return [
                str(self.bin / "procrastinate"),
                "--app=procr_app.app",
                "worker",
                "--concurrency",
                str(variant.get("concurrency", self.cfg.procr_concurrency)),
            ]
        if system == "raw":
            return [
                self.py,
                str(APPS / "raw_worker.py"),
                "--dsn",
                self.cfg.dsn,
                "--batch",
                str(variant.get("batch", self.cfg.raw_batch)),
            ]
        raise ValueError(system)

    # .. enqueue ..

    async def enqueue_bulk(
        self, system: str, n: int, tool: str = "noop", payload: Any = None
    ) -> None:
        """Queue n jobs in one statement (one transaction) with the system's bulk API."""
        self.seq += 1
        run = f"r{self.seq}-{os.getpid()}"
        if system == "tenure":
            from tenure_app import app

            body = payload if payload is not None else {}
            try:
                await app.enqueue_many(
                    tool, [body] * n, idempotency_keys=[f"{run}-{i}" for i in range(n)]
                )
            finally:
                await app.aclose()
        elif system == "pgqueuer":
            import asyncpg
            from pgqueuer.db import AsyncpgDriver
            from pgqueuer.queries import Queries

            conn = await asyncpg.connect(self.cfg.dsn_url)
            try:
                await Queries(AsyncpgDriver(conn)).enqueue([tool] * n, [None] * n, [0] * n)
            finally:
                await conn.close()
        elif system == "procrastinate":
            from procr_app import app as papp

            async with papp.open_async():
                task = papp.tasks[tool]
                await task.batch_defer_async(*({} for _ in range(n)))
        elif system == "raw":
            async with await psycopg.AsyncConnection.connect(self.cfg.dsn) as conn:
                async with conn.transaction():
                    await conn.execute(
                        "INSERT INTO raw_jobs (tool, idempotency_key, payload, payload_hash, "
                        "max_attempts) SELECT %s, %s || g, '{}'::jsonb, 'x', 5 "
                        "FROM generate_series(1, %s) g",
                        (tool, run + "-", n),
                    )
                    await conn.execute("NOTIFY raw_jobs")

    def remaining(self, system: str) -> bool:
        c = self.db()
        q = {
            "tenure": "SELECT EXISTS (SELECT 1 FROM tenure_jobs WHERE state = 'queued') "
            "OR EXISTS (SELECT 1 FROM tenure_jobs WHERE lease_until IS NOT NULL)",
            "raw": "SELECT EXISTS (SELECT 1 FROM raw_jobs WHERE state = 'queued') "
            "OR EXISTS (SELECT 1 FROM raw_jobs WHERE lease_until IS NOT NULL)",
            "pgqueuer": "SELECT EXISTS (SELECT 1 FROM pgqueuer)",
            "procrastinate": "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs "
            "WHERE status IN ('todo', 'doing'))",
        }[system]
        return bool(c.execute(q).fetchone()[0])

    def finished(self, system: str) -> tuple[int, float | None]:
        """(jobs that succeeded, epoch of the last success) from the database's own records."""
        c = self.db()
        q = {
            "tenure": "SELECT count(*), extract(epoch FROM max(finished_at)) FROM tenure_jobs "
            "WHERE state = 'succeeded'",
            "raw": "SELECT count(*), extract(epoch FROM max(finished_at)) FROM raw_jobs "
            "WHERE state = 'succeeded'",
            "pgqueuer": "SELECT count(*), extract(epoch FROM max(created)) FROM pgqueuer_log "
            "WHERE status = 'successful'",
            "procrastinate": "SELECT count(*), extract(epoch FROM max(at)) FROM "
            "procrastinate_events WHERE type = 'succeeded'",
        }[system]
        n, last = c.execute(q).fetchone()
        return int(n), (float(last) if last is not None else None)

    # .. throughput ..

    def throughput_variants(self) -> list[tuple[str, str, dict[str, Any]]]:
        out: list[tuple[str, str, dict[str, Any]]] = []
        for level in self.cfg.tenure_log_levels:
            label = "tenure" if level == "INFO" else f"tenure (log {level})"
            out.append(("tenure", label, {"log_level": level}))
        for name, src in self.cfg.tenure_variants:
            out.append(("tenure", f"tenure [{name}]", {"src": src}))
        for b in self.cfg.pgq_batches:
            label = f"pgqueuer batch={b}" + (" (default)" if b == 10 else "")
            out.append(("pgqueuer", label, {"batch": b}))
        out.append(("procrastinate", f"procrastinate c={self.cfg.procr_concurrency}", {}))
        out.append(("raw", f"raw SQL ceiling (claim {self.cfg.raw_batch})", {}))
        for b in self.cfg.raw_extra_batches:
            out.append(("raw", f"raw SQL (claim {b})", {"batch": b}))
        return [v for v in out if v[0] in self.cfg.systems]

    def drain_once(
        self,
        system: str,
        label: str,
        variant: dict[str, Any],
        procs: int,
        n: int,
        profile: Callable[[Procs], Any] | None = None,
    ) -> dict[str, Any]:
        self.reset(system)
        tag = f"tp-{label.split()[0]}-{procs}p-{self.seq + 1}"
        cmds = [self.worker_cmd(system, variant) for _ in range(procs)]
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

    def phase_throughput(self) -> None:
        cfg = self.cfg
        variants = self.throughput_variants()
        cells: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for procs in cfg.procs:
            for rnd in range(cfg.rounds):
                order = variants if rnd % 2 == 0 else list(reversed(variants))
                for system, label, variant in order:
                    log(f"throughput: {label}, {procs} proc(s), round {rnd + 1}/{cfg.rounds}")
                    n = cfg.procr_jobs if system == "procrastinate" else cfg.jobs
                    r = self.drain_once(system, label, variant, procs, n)
                    log(
                        f"  → {r['jobs_per_s']} jobs/s (drain {r['drain_s']} s, "
                        f"{r['succeeded']}/{r['jobs']} ok, load {r['cpu']['load_end'][0]}, "
                        f"other load {r['cpu']['other_load_cores']} cores)"
                    )
                    cells[f"{label}|{procs}"].append(r)
        summary = []
        for key, runs in cells.items():
            label, procs = key.rsplit("|", 1)
            rates = [r["jobs_per_s"] for r in runs if r["jobs_per_s"]]
            summary.append(
                {
                    "system": runs[0]["system"],
                    "label": label,
                    "procs": int(procs),
                    "jobs": runs[0]["jobs"],
                    "jobs_per_s_median": round(statistics.median(rates), 1) if rates else None,
                    "jobs_per_s_runs": rates,
                    "all_succeeded": all(r["succeeded"] == r["jobs"] for r in runs),
                    "worker_cpu_s": round(
                        statistics.median(r["cpu"]["worker_cpu_s"] for r in runs), 2
                    ),
                    "worker_us_per_job": round(
                        statistics.median(1e6 * r["cpu"]["worker_cpu_s"] / r["jobs"] for r in runs),
                        1,
                    ),
                    "pg_us_per_job": round(
                        statistics.median(
                            1e6 * r["cpu"]["pg_backend_cpu_s"] / r["jobs"] for r in runs
                        ),
                        1,
                    ),
                    "pg_cpu_s": round(
                        statistics.median(r["cpu"]["pg_backend_cpu_s"] for r in runs), 2
                    ),
                    "other_load_cores": max(r["cpu"]["other_load_cores"] or 0 for r in runs),
                    "load": [runs[0]["cpu"]["load_start"][0], runs[-1]["cpu"]["load_end"][0]],
                    "idle_rss_mb": runs[0]["idle_rss"][0]["rss_mb"],
                }
            )
        cores = os.cpu_count() or 1
        for row in summary:
            per_job = (row["worker_us_per_job"] + row["pg_us_per_job"]) / 1e6
            row["cpu_bound_jobs_per_s"] = round(cores / per_job) if per_job else None
        self.results["throughput"] = {
            "runs": [r for v in cells.values() for r in v],
            "summary": summary,
        }

    # .. latency ..

    async def _latency(self, system: str, n: int, sock: Any, pg_options: str) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        arrivals: dict[str, tuple[float, int]] = {}
        waiters: dict[str, asyncio.Future[None]] = {}

        class Proto(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: Any) -> None:
                key, t, pid = data.decode().split()
                arrivals[key] = (float(t), int(pid))
                fut = waiters.get(key)
                if fut is not None and not fut.done():
                    fut.set_result(None)

        transport, _ = await loop.create_datagram_endpoint(Proto, sock=sock)
        enqueue_one: Callable[[str], Any]
        closers: list[Callable[[], Any]] = []
        if system == "tenure":
            from tenure_app import app

            async def enqueue_one(k: str) -> None:
                await app.enqueue("ping", {"k": k}, idempotency_key=k)

            closers.append(app.aclose)
        elif system == "pgqueuer":
            import asyncpg
            from pgqueuer.db import AsyncpgDriver
            from pgqueuer.queries import Queries

            settings = (
                {"synchronous_commit": "off"} if "synchronous_commit=off" in pg_options else {}
            )
            pconn = await asyncpg.connect(self.cfg.dsn_url, server_settings=settings)
            queries = Queries(AsyncpgDriver(pconn))

            async def enqueue_one(k: str) -> None:
                await queries.enqueue("ping", k.encode())

            closers.append(pconn.close)
        elif system == "procrastinate":
            from procr_app import app as papp

            await papp.open_async()
            ping = papp.tasks["ping"]

            async def enqueue_one(k: str) -> None:
                await ping.defer_async(k=k)

            closers.append(papp.close_async)
        else:
            rconn = await psycopg.AsyncConnection.connect(self.cfg.dsn, autocommit=True)

            async def enqueue_one(k: str) -> None:
                async with rconn.transaction():
                    await rconn.execute(
                        "INSERT INTO raw_jobs (tool, idempotency_key, payload, payload_hash, "
                        "max_attempts) VALUES ('ping', %s, jsonb_build_object('k', %s::text), "
                        "'x', 5)",
                        (k, k),
                    )
                    await rconn.execute("NOTIFY raw_jobs")

            closers.append(rconn.close)

        lat, enq, after, missed = [], [], [], 0
        try:
            # A few unrecorded warm-up jobs: connections, prepared statements, caches.
            for i in range(-5, n):
                k = f"lat-{system}-{self.seq}-{i}"
                await asyncio.sleep(random.uniform(0.01, 0.03))  # the queue is idle
                fut = loop.create_future()
                waiters[k] = fut
                t0 = time.time()
                await enqueue_one(k)
                t1 = time.time()
                try:
                    await asyncio.wait_for(fut, 10.0)
                except TimeoutError:
                    missed += 1
                    continue
                if i >= 0:
                    lat.append((arrivals[k][0] - t0) * 1000)
                    enq.append((t1 - t0) * 1000)
                    after.append((arrivals[k][0] - t1) * 1000)
        finally:
            for close in closers:
                await close()
            transport.close()
        return {
            "system": system,
            "jobs": len(lat),
            "missed": missed,
            "p50_ms": round(pct(lat, 50), 2),
            "p95_ms": round(pct(lat, 95), 2),
            "p99_ms": round(pct(lat, 99), 2),
            "max_ms": round(max(lat), 2) if lat else None,
            "enqueue_call_p50_ms": round(pct(enq, 50), 2),
            "start_after_enqueue_returned_p50_ms": round(pct(after, 50), 2),
        }

    def commit_floor(self, pg_options: str, n: int = 100) -> dict[str, float]:
        """One-row INSERT commit on this server, after the same idle gaps as the jobs get.

        It includes what every hop of a wake-up pays on this machine: the WAL flush (when
        durable) and the scheduler's delay in waking an idle process on shared cores.
        """
        with psycopg.connect(self.cfg.dsn, autocommit=True, options=pg_options or None) as c:
            c.execute("CREATE TABLE IF NOT EXISTS bench_commit_probe (x int)")
            times = []
            for _ in range(n):
                time.sleep(random.uniform(0.01, 0.03))
                t = time.perf_counter()
                c.execute("INSERT INTO bench_commit_probe VALUES (1)")
                times.append((time.perf_counter() - t) * 1000)
            c.execute("TRUNCATE bench_commit_probe")
        return {"p50_ms": round(pct(times, 50), 3), "p95_ms": round(pct(times, 95), 3)}

    def phase_latency(self) -> None:
        import socket

        variants = [("durable", "")]
        if self.cfg.latency_nofsync:
            variants.append(("no-fsync", "-c synchronous_commit=off"))
        result: dict[str, Any] = {}
        for name, options in variants:
            floor0 = self.commit_floor(options)
            out = []
            saved = os.environ.get("PGOPTIONS")
            if options:
                os.environ["PGOPTIONS"] = options
            try:
                for system in [x for x in SYSTEMS if x in self.cfg.systems]:
                    self.reset(system)
                    self.seq += 1
                    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    sock.bind(("127.0.0.1", 0))
                    env = {**self.env, "BENCH_UDP_PORT": str(sock.getsockname()[1])}
                    if options:
                        env["PGOPTIONS"] = options
                        env["BENCH_PG_OPTIONS"] = options
                    variant: dict[str, Any] = {"batch": 10} if system == "pgqueuer" else {}
                    if system == "tenure":
                        variant = {"concurrency": 10, "claim_batch": 10}
                    log(f"latency ({name}): {system}")
                    cmd = [self.worker_cmd(system, variant)]
                    with Procs(self.cfg, f"lat-{name}-{system}", cmd, env) as ws:
                        ws.wait_ready(self.pg_port)
                        load0 = loadavg()
                        n = (
                            self.cfg.latency_jobs
                            if not options
                            else max(50, self.cfg.latency_jobs // 3)
                        )
                        r = asyncio.run(self._latency(system, n, sock, options))
                        r["load"] = [load0[0], loadavg()[0]]
                    log(f"  → p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms, p99 {r['p99_ms']} ms")
                    out.append(r)
            finally:
                if saved is None:
                    os.environ.pop("PGOPTIONS", None)
                else:
                    os.environ["PGOPTIONS"] = saved
            floor1 = self.commit_floor(options)
            result[name] = {
                "pg_options": options or "(server defaults: synchronous_commit=on)",
                "commit_floor_before": floor0,
                "commit_floor_after": floor1,
                "systems": out,
            }
        self.results["latency"] = result

    # .. heartbeat ..

    def phase_heartbeat(self) -> None:
        self.results["heartbeat"] = self._heartbeat("tenure", {})
        for name, src in self.cfg.tenure_variants:
            self.results.setdefault("heartbeat_variants", {})[name] = self._heartbeat(
                f"tenure [{name}]", {"src": src}
            )

    def _heartbeat(self, label: str, variant: dict[str, Any]) -> dict[str, Any]:
        cfg = self.cfg
        self.reset("tenure")
        stats_path = cfg.logs / "hold_stats.json"
        cfg.logs.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            stats_path.unlink()
        cmd = [
            self.py,
            str(APPS / "hold_worker.py"),
            "--stats",
            str(stats_path),
            "--concurrency",
            str(cfg.hold_jobs),
            "--claim-batch",
            "1000",
        ]
        read = lambda: json.loads(stats_path.read_text())  # noqa: E731
        c = self.db()
        log(
            f"heartbeat ({label}): {cfg.hold_jobs} held leases, H={cfg.hold_heartbeat}s, "
            f"window {cfg.hold_seconds:.0f}s"
        )
        tag = "heartbeat" + (f"-{label.split('[')[1].rstrip(']')}" if "[" in label else "")
        with Procs(cfg, tag, [cmd], self.env_for(variant)) as ws:
            ws.wait_ready(self.pg_port)
            idle_rss = rss_mb(ws.pids[0])
            hold_for = cfg.hold_seconds + 4 * cfg.hold_lease + 120
            t_claim0 = time.monotonic()
            for start in range(0, cfg.hold_jobs, 5000):
                asyncio.run(
                    self.enqueue_bulk(
                        "tenure", min(5000, cfg.hold_jobs - start), "hold", {"seconds": hold_for}
                    )
                )
            while True:
                ws.check_alive()
                running = c.execute(
                    "SELECT count(*) FROM tenure_jobs WHERE state = 'running'"
                ).fetchone()[0]
                if running >= cfg.hold_jobs:
                    break
                if time.monotonic() - t_claim0 > max(120, cfg.hold_jobs / 50):
                    raise RuntimeError(f"only {running} of {cfg.hold_jobs} hold jobs running")
                time.sleep(0.2)
            all_running_s = time.monotonic() - t_claim0
            # One full heartbeat period first, so the window sees steady state.
            time.sleep(cfg.hold_heartbeat + 0.5)
            c.execute("SELECT pg_stat_force_next_flush()")
            snap = lambda: c.execute(  # noqa: E731
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                "WHERE relname = 'tenure_jobs'"
            ).fetchone()
            xact = lambda: c.execute(  # noqa: E731
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                (cfg.db,),
            ).fetchone()[0]
            wal = lambda: c.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # noqa: E731
            s0, u0, x0, w0 = read(), snap(), xact(), wal()
            window = CpuWindow(c, cfg.db, ws.all_pids())
            time.sleep(cfg.hold_seconds)
            cpu = window.close()
            time.sleep(1.2)  # the stats file is rewritten twice a second
            s1, u1, x1, w1 = read(), snap(), xact(), wal()
            wal_bytes = c.execute("SELECT pg_wal_lsn_diff(%s, %s)", (w1, w0)).fetchone()[0]
            rss_held = rss_mb(ws.pids[0])
            lost_events = c.execute(
                "SELECT count(*) FROM tenure_events WHERE kind = 'heartbeat_lost'"
            ).fetchone()[0]
            still = c.execute(
                "SELECT count(*) FROM tenure_jobs WHERE state = 'running' "
                "AND lease_until > clock_timestamp()"
            ).fetchone()[0]
            lag = c.execute(
                "SELECT extract(epoch FROM max(clock_timestamp() - heartbeat_at)), "
                "extract(epoch FROM min(lease_until - clock_timestamp())) "
                "FROM tenure_jobs WHERE state = 'running'"
            ).fetchone()
            t_stop = time.monotonic()
            ws.stop(timeout=60)
            stop_s = time.monotonic() - t_stop
        released = c.execute("SELECT count(*) FROM tenure_jobs WHERE state = 'queued'").fetchone()[
            0
        ]
        window_s = cpu["wall_s"]
        sent = [t for t in s1["extend_sent_at"] if t >= s0["at_monotonic"]]
        ext = s1["statements"].get("extend_leases", 0) - s0["statements"].get("extend_leases", 0)
        other = {
            k: v - s0["statements"].get(k, 0)
            for k, v in s1["statements"].items()
            if k != "extend_leases" and v - s0["statements"].get(k, 0)
        }
        n_intervals = window_s / cfg.hold_heartbeat
        rows = s1["rows_extended"] - s0["rows_extended"]
        ext_ms = s1["extend_ms"][len(s0["extend_ms"]) :]
        ext_rows = s1["extend_rows"][len(s0["extend_rows"]) :]
        h = {
            "label": label,
            "held": cfg.hold_jobs,
            "lease_s": cfg.hold_lease,
            "heartbeat_s": cfg.hold_heartbeat,
            "jitter_s": cfg.hold_jitter,
            "window_s": window_s,
            "all_running_after_s": round(all_running_s, 2),
            "ticks": s1["ticks"] - s0["ticks"],
            "extend_statements": ext,
            "other_heartbeat_statements": other,
            "extend_statements_per_heartbeat_interval": round(ext / n_intervals, 2),
            "rows_per_extend_statement_median": statistics.median(ext_rows) if ext_rows else None,
            "rows_per_extend_statement_min_max": [min(ext_rows), max(ext_rows)]
            if ext_rows
            else None,
            "extend_ms_median": round(statistics.median(ext_ms), 1) if ext_ms else None,
            "extend_ms_max": max(ext_ms) if ext_ms else None,
            "rows_extended": rows,
            "rows_extended_per_s": round(rows / window_s, 1),
            "rows_lost_in_window": s1["rows_lost"] - s0["rows_lost"],
            "db_row_updates": u1[0] - u0[0],
            "db_hot_updates": u1[1] - u0[1],
            "db_transactions": x1 - x0,
            "wal_bytes": int(wal_bytes),
            "wal_bytes_per_row": round(wal_bytes / rows, 1) if rows else None,
            "worker_cpu_pct_of_core": round(100 * cpu["worker_cpu_s"] / window_s, 2),
            "pg_cpu_pct_of_core": round(100 * cpu["pg_backend_cpu_s"] / window_s, 2),
            "cpu": cpu,
            "heartbeat_lost_events": lost_events,
            "worker_lease_lost": s1["counts"].get("lease_lost", 0),
            "still_running_with_valid_lease": still,
            "max_heartbeat_age_s": round(float(lag[0]), 2) if lag[0] is not None else None,
            "min_lease_left_s": round(float(lag[1]), 2) if lag[1] is not None else None,
            "rss_idle": idle_rss,
            "rss_held": rss_held,
            "shutdown_s": round(stop_s, 2),
            "released_on_shutdown": released,
            "extend_send_times_in_window": len(sent),
            "heartbeat_statement_errors": {
                k: v - s0.get("errors", {}).get(k, 0)
                for k, v in s1.get("errors", {}).items()
                if v - s0.get("errors", {}).get(k, 0)
            },
            "failed_extend_ms": s1.get("error_ms", [])[len(s0.get("error_ms", [])) :],
            "heartbeat_statement_seconds": {
                k: round(v - s0["statement_seconds"].get(k, 0), 2)
                for k, v in s1["statement_seconds"].items()
            },
            "heartbeat_timeouts_s": s1.get("timeout_s"),
            "worker_counts_end": s1["counts"],
        }
        log(
            f"  → {ext} extend statements in {window_s:.0f}s "
            f"({h['extend_statements_per_heartbeat_interval']} per H), "
            f"{h['rows_extended_per_s']} rows/s, worker {h['worker_cpu_pct_of_core']}% core, "
            f"pg {h['pg_cpu_pct_of_core']}% core, lost {lost_events}"
        )
        return h

    # .. recovery ..

    def phase_recovery(self) -> None:
        import socket

        cfg = self.cfg
        trials = []
        for trial in range(cfg.recovery_trials):
            self.reset("tenure")
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            sock.settimeout(0.05)
            env = {**self.env, "BENCH_UDP_PORT": str(sock.getsockname()[1])}
            cmd = self.worker_cmd("tenure", {"concurrency": 10, "claim_batch": 10})
            key = f"rec{trial}"
            log(f"recovery: trial {trial + 1}/{cfg.recovery_trials}, lease {cfg.slow_lease}s")

            def wait_for(
                tag: str, timeout: float, sock: socket.socket = sock
            ) -> tuple[float, int] | None:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    try:
                        data = sock.recv(200).decode().split()
                    except TimeoutError:
                        continue
                    if data[0] == tag:
                        return float(data[1]), int(data[2])
                return None

            with Procs(cfg, f"rec-a{trial}", [cmd], env) as a:
                a.wait_ready(self.pg_port)
                asyncio.run(self._enqueue_slow(key))
                first = wait_for(f"{key}:1", 20)
                if first is None:
                    raise RuntimeError("recovery: worker A never started the job")
                with Procs(cfg, f"rec-b{trial}", [cmd], env) as b:
                    b.wait_ready(self.pg_port)
                    c = self.db()
                    # Kill right after a confirmed heartbeat: the worst case, a full lease left.
                    hb0 = c.execute(
                        "SELECT heartbeat_at FROM tenure_jobs WHERE idempotency_key = %s", (key,)
                    ).fetchone()[0]
                    deadline = time.monotonic() + cfg.slow_heartbeat * 3 + 5
                    while time.monotonic() < deadline:
                        hb = c.execute(
                            "SELECT heartbeat_at FROM tenure_jobs WHERE idempotency_key = %s",
                            (key,),
                        ).fetchone()[0]
                        if hb != hb0:
                            break
                        time.sleep(0.005)
                    t_kill = time.time()
                    os.kill(a.pids[0], signal.SIGKILL)
                    a.procs[0].wait()
                    lease_until = c.execute(
                        "SELECT extract(epoch FROM lease_until) FROM tenure_jobs "
                        "WHERE idempotency_key = %s",
                        (key,),
                    ).fetchone()[0]
                    second = wait_for(f"{key}:2", cfg.slow_lease * 3 + 10)
                    if second is None:
                        raise RuntimeError("recovery: no other worker started the job")
                    trials.append(
                        {
                            "lease_s": cfg.slow_lease,
                            "lease_left_at_kill_s": round(float(lease_until) - t_kill, 3),
                            "kill_to_start_s": round(second[0] - t_kill, 3),
                            "expiry_to_start_s": round(second[0] - float(lease_until), 3),
                            "reclaimed_by_other_pid": second[1] != first[1],
                        }
                    )
                    log(
                        f"  → start on another worker {trials[-1]['kill_to_start_s']} s after SIGKILL"
                    )
            sock.close()
        self.results["recovery"] = {
            "lease_s": cfg.slow_lease,
            "heartbeat_s": cfg.slow_heartbeat,
            "poll_interval_s": 1.0,
            "trials": trials,
            "max_kill_to_start_s": max(t["kill_to_start_s"] for t in trials),
        }

    async def _enqueue_slow(self, key: str) -> None:
        from tenure_app import app

        try:
            await app.enqueue("slow", {"k": key, "seconds": 3600}, idempotency_key=key)
        finally:
            await app.aclose()

    # .. bloat ..

    def claim_only(self, n: int) -> dict[str, Any]:
        """Claim statements alone (tenure's Store.claim, 100 per statement) over n queued jobs.

        The table is ANALYZEd after the enqueue (the state autovacuum reaches soon after),
        so every case is planned with statistics that know about the queued rows.
        """
        asyncio.run(self.enqueue_bulk("tenure", n))
        c = self.db()
        c.execute("ANALYZE tenure_jobs")
        from tenure._store import QUERIES

        plan_ms, scans, plan_text = None, [], None
        with contextlib.suppress(Exception), c.transaction(force_rollback=True):
            plan_text = "\n".join(
                r[0]
                for r in c.execute(
                    "EXPLAIN (ANALYZE, BUFFERS) " + QUERIES["claim"],
                    {"owner": "plan", "tools": ["noop"], "lease_ms": [30000], "limit": 100},
                ).fetchall()
            )
        with contextlib.suppress(Exception), c.transaction(force_rollback=True):
            plan = c.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + QUERIES["claim"],
                {"owner": "plan", "tools": ["noop"], "lease_ms": [30000], "limit": 100},
            ).fetchone()[0][0]
            plan_ms = round(plan["Execution Time"], 3)

            def walk(node: dict[str, Any]) -> None:
                if node.get("Relation Name") == "tenure_jobs" and "Scan" in node["Node Type"]:
                    scans.append(f"{node['Node Type']}:{node.get('Index Name', '-')}")
                for child in node.get("Plans", []):
                    walk(child)

            walk(plan["Plan"])

        async def go() -> list[float]:
            from tenure._store import Store

            store = Store(self.cfg.dsn, max_size=1)
            await store.open()
            times = []
            try:
                while True:
                    t = time.perf_counter()
                    got = await store.claim("claim-bench", {"noop": 30000}, 100)
                    times.append(time.perf_counter() - t)
                    if not got:
                        break
            finally:
                await store.close()
            return times

        times = asyncio.run(go())
        total = sum(times[:-1])
        return {
            "claims": len(times) - 1,
            "jobs_per_s": round(n / total, 1) if total else None,
            "claim_ms_median": round(statistics.median(times[:-1]) * 1000, 3),
            "explain_analyze_ms": plan_ms,
            "scans": sorted(set(scans)),
            "plan_text": plan_text,
        }

    def phase_bloat(self) -> None:
        cfg = self.cfg
        cases = []
        c = self.db()

        def measure(case: str) -> None:
            drains, claims = [], []
            for rep in range(cfg.bloat_reps):
                log(f"bloat: {case} ({rep + 1}/{cfg.bloat_reps})")
                # Every repetition starts from the same steady state: no dead tuples
                # left by the previous one, fresh statistics.
                c.execute("VACUUM ANALYZE tenure_jobs")
                c.execute("VACUUM tenure_events")
                drains.append(self.drain_once("tenure", "tenure", {}, 1, cfg.bloat_jobs))
                c.execute("DELETE FROM tenure_jobs WHERE idempotency_key NOT LIKE 'done-%'")
                c.execute("VACUUM ANALYZE tenure_jobs")
                claims.append(self.claim_only(cfg.bloat_jobs))
                c.execute("DELETE FROM tenure_jobs WHERE idempotency_key NOT LIKE 'done-%'")
            rows = c.execute("SELECT count(*) FROM tenure_jobs").fetchone()[0]
            size = c.execute("SELECT pg_total_relation_size('tenure_jobs')").fetchone()[0]
            med = lambda xs: round(statistics.median(xs), 1)  # noqa: E731
            cases.append(
                {
                    "case": case,
                    "rows_in_table": rows,
                    "table_mb": round(size / 2**20, 1),
                    "drain_jobs_per_s": med([d["jobs_per_s"] for d in drains]),
                    "drain_runs": [d["jobs_per_s"] for d in drains],
                    "claim_jobs_per_s": med([x["jobs_per_s"] for x in claims]),
                    "claim_runs": [x["jobs_per_s"] for x in claims],
                    "claim_ms_median": med([x["claim_ms_median"] for x in claims]),
                    "claim_explain_ms": med([x["explain_analyze_ms"] or 0 for x in claims]),
                    "claim_scans": claims[-1]["scans"],
                    "claim_plan": claims[-1].get("plan_text"),
                    "drain_worker_cpu_us_per_job": med(
                        [1e6 * d["cpu"]["worker_cpu_s"] / cfg.bloat_jobs for d in drains]
                    ),
                    "drain_pg_cpu_us_per_job": med(
                        [1e6 * d["cpu"]["pg_backend_cpu_s"] / cfg.bloat_jobs for d in drains]
                    ),
                    "load": [drains[0]["cpu"]["load_start"][0], loadavg()[0]],
                }
            )
            log(
                f"  → drain {cases[-1]['drain_runs']} jobs/s, claim-only {cases[-1]['claim_runs']} jobs/s"
            )

        # reset() truncates; keep the terminal rows across the measurement by not resetting.
        self.reset("tenure")
        c.execute("VACUUM ANALYZE tenure_jobs")
        self._measure_without_reset(measure, "empty table")
        log(f"bloat: inserting {cfg.bloat_rows} terminal rows")
        t = time.monotonic()
        c.execute(
            "INSERT INTO tenure_jobs (tool, state, idempotency_key, payload, payload_hash, "
            "max_attempts, attempt, token, result, finished_at, created_at, updated_at) "
            "SELECT 'noop', 'succeeded', 'done-' || g, '{}'::jsonb, 'x', 5, 1, g, "
            "'null'::jsonb, now() - interval '1 day', now() - interval '1 day', "
            "now() - interval '1 day' FROM generate_series(1, %s) g",
            (cfg.bloat_rows,),
        )
        c.execute("VACUUM ANALYZE tenure_jobs")
        insert_s = time.monotonic() - t
        self._measure_without_reset(measure, f"{cfg.bloat_rows:,} terminal rows")
        c.execute("DELETE FROM tenure_jobs WHERE state IN ('succeeded', 'failed', 'cancelled')")
        c.execute("VACUUM ANALYZE tenure_jobs")
        self._measure_without_reset(measure, "after DELETE + VACUUM (pruned)")
        self.results["bloat"] = {
            "terminal_rows": cfg.bloat_rows,
            "insert_s": round(insert_s, 1),
            "jobs": cfg.bloat_jobs,
            "cases": cases,
        }

    def _measure_without_reset(self, measure: Callable[[str], None], case: str) -> None:
        original = self.reset
        self.reset = lambda system: None  # type: ignore[method-assign]
        try:
            measure(case)
        finally:
            self.reset = original  # type: ignore[method-assign]

    # .. rss ..

    def phase_rss(self) -> None:
        cfg = self.cfg
        self.reset("tenure")
        c = self.db()
        cmd = self.worker_cmd("tenure", {"concurrency": cfg.rss_jobs, "claim_batch": 100})
        log(f"rss: tenure worker idle and with {cfg.rss_jobs} running jobs")
        with Procs(cfg, "rss", [cmd], self.env) as ws:
            ws.wait_ready(self.pg_port)
            time.sleep(1.0)
            idle = rss_mb(ws.pids[0])
            asyncio.run(self.enqueue_bulk("tenure", cfg.rss_jobs, "hold", {"seconds": 600}))
            deadline = time.monotonic() + 120
            while (
                c.execute("SELECT count(*) FROM tenure_jobs WHERE state = 'running'").fetchone()[0]
                < cfg.rss_jobs
            ):
                ws.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError("rss: jobs did not all start")
                time.sleep(0.2)
            time.sleep(2.0)
            busy = rss_mb(ws.pids[0])
        self.results["rss"] = {"idle": idle, "running_jobs": cfg.rss_jobs, "busy": busy}
        log(f"  → idle {idle['rss_mb']} MB, with {cfg.rss_jobs} jobs {busy['rss_mb']} MB")

    # .. profile ..

    def phase_profile(self) -> None:
        spy = shutil.which("py-spy", path=str(self.bin)) or shutil.which("py-spy")
        if not spy:
            log("profile: py-spy not found; skipped")
            return
        n = min(self.cfg.jobs, 10_000)
        for level in self.cfg.tenure_log_levels:
            out = self.cfg.out / f"profile-tenure-worker-{level.lower()}.txt"
            with contextlib.suppress(FileNotFoundError):
                out.unlink()
            holder: dict[str, Any] = {}

            def start(ws: Procs, out: Path = out, holder: dict[str, Any] = holder) -> None:
                holder["proc"] = subprocess.Popen(
                    [
                        spy,
                        "record",
                        "--pid",
                        str(ws.pids[0]),
                        "--rate",
                        "250",
                        "--format",
                        "raw",
                        "--output",
                        str(out),
                        "--nonblocking",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )

            log(f"profile: py-spy on one tenure worker (log {level}) draining {n} jobs")
            r = self.drain_once("tenure", "tenure", {"log_level": level}, 1, n, profile=start)
            proc = holder.get("proc")
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(30)
            if not out.exists():
                log("profile: py-spy wrote nothing (ptrace not permitted?)")
                continue
            self.results.setdefault("profile", {})[level] = {
                "jobs_per_s_under_profiler": r["jobs_per_s"],
                "file": str(out),
                **top_frames(out.read_text()),
            }


def top_frames(raw: str, n: int = 15) -> dict[str, Any]:
    """Self and inclusive top frames from py-spy's collapsed ("raw") output."""
    selfc: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        total += k
        frames = [
            f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].split("/")[-1] + ")"
            if " (" in f
            else f
            for f in stack.split(";")
        ]
        frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
        if frames:
            selfc[frames[-1]] += k
        for f in set(frames):
            incl[f] += k

    def fmt(c: collections.Counter[str]) -> list[list[Any]]:
        return [[name, round(100 * v / total, 1)] for name, v in c.most_common(n)] if total else []

    generic = (
        "runpy",
        "runners.py",
        "base_events.py",
        "events.py",
        "__main__.py",
        "_cli.py",
        "threading.py)",
    )
    focus = collections.Counter(
        {k: v for k, v in incl.items() if not any(g in k for g in generic) or "Thread" in k}
    )
    return {
        "samples": total,
        "self_top": fmt(selfc),
        "inclusive_top": fmt(incl),
        "inclusive_focus": fmt(focus),
    }


# -- report -------------------------------------------------------------------------------------


def report(cfg: Config, res: dict[str, Any]) -> str:
    m = res["machine"]
    lines = [
        "# tenure bench results",
        "",
        f"Run {res['started']} ({'quick' if cfg.quick else 'full'}), {res['duration_s']:.0f} s. "
        f"Machine: {m['cpu_model']}, {m['cores']} cores, {m['memory_gb']} GB; "
        f"PostgreSQL {m['postgres']['server_version']} (synchronous_commit="
        f"{m['postgres']['synchronous_commit']}, shared_buffers={m['postgres']['shared_buffers']}) "
        f"on loopback; Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in m["packages"].items())
        + f". Load average at start {m['load_at_start']}, at end {res.get('load_at_end')}.",
        "",
        "The machine's cores are shared with other work; *other load* is the machine's busy CPU "
        "minus the bench's own processes and its database's backends, in cores, during the window.",
        "",
    ]
    tp = res.get("throughput")
    if tp:
        lines += [
            f"## 1. Throughput: {cfg.jobs:,} no-op jobs (bulk enqueue, then drain)",
            "",
            "Workers start on an empty queue and go idle; the jobs are enqueued in one statement; "
            "the clock runs from the enqueue's commit to the last success as the database recorded "
            f"it. Median of {cfg.rounds} interleaved round(s) (the order reverses each round). "
            "*CPU µs/job* is the CPU the workers and the bench database's backends spent per job "
            "(robust to the machine's other load); *CPU-bound jobs/s* = cores ÷ (worker + PG "
            "CPU per job), the rate this machine would reach with nothing else running and "
            "CPU the only limit.",
            "",
            "| system | procs | jobs | jobs/s (median) | runs | worker CPU µs/job | PG CPU µs/job | CPU-bound jobs/s | other load (cores) | load 1m start→end | idle RSS MB |",
            "|---|---:|---:|---:|---|---:|---:|---:|---:|---|---:|",
        ]
        for s in sorted(tp["summary"], key=lambda s: (s["procs"], s["label"])):
            lines.append(
                f"| {s['label']} | {s['procs']} | {s['jobs']:,} | {s['jobs_per_s_median']:,} "
                f"| {', '.join(f'{x:,.0f}' for x in s['jobs_per_s_runs'])} "
                f"| {s['worker_us_per_job']:,} | {s['pg_us_per_job']:,} | {s['cpu_bound_jobs_per_s']:,} "
                f"| {s['other_load_cores']} "
                f"| {s['load'][0]}→{s['load'][1]} | {s['idle_rss_mb']} |"
                + ("" if s["all_succeeded"] else " ⚠ not all succeeded")
            )
        lines += ["", "Ratios (same run):", ""]
        for k, v in res.get("ratios", {}).items():
            lines.append(f"- {k}: **{v}**")
        lines.append("")
    lat = res.get("latency")
    if lat:
        lines += [
            f"## 2. Wake-up latency: enqueue → tool start, idle queue ({cfg.latency_jobs} jobs; "
            f"no-fsync variant {max(50, cfg.latency_jobs // 3)})",
            "",
            "Enqueuer (this harness) and worker are separate processes; both sides take "
            "`time.time()` on the same machine (enqueuer just before the enqueue call, tool as its "
            "first action, sent back over UDP). 10–30 ms idle gap between jobs. Every system "
            "needs two commits before a tool starts (the enqueue, then the claim), so the "
            "*commit floor* (one-row INSERT commit on this server, same session settings) is "
            "shown: with durable commits, two of them bound the latency from below. The "
            "*no-fsync* variant sets `synchronous_commit=off` on the bench's own sessions "
            "(enqueuer and workers) to show the queue machinery alone; it is not a safe setting "
            "for claims (a crash could hand out a fencing token twice).",
            "",
        ]
        for name, v in lat.items():
            lines += [
                f"**{name}** ({v['pg_options']}); commit floor p50 {v['commit_floor_before']['p50_ms']}"
                f" ms before, {v['commit_floor_after']['p50_ms']} ms after "
                f"(p95 {v['commit_floor_before']['p95_ms']} / {v['commit_floor_after']['p95_ms']} ms)",
                "",
                "| system | p50 ms | p95 ms | p99 ms | max ms | enqueue call p50 ms | start − enqueue returned p50 ms | missed | load 1m |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---|",
            ]
            for r in v["systems"]:
                lines.append(
                    f"| {r['system']} | {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | {r['max_ms']} "
                    f"| {r['enqueue_call_p50_ms']} | {r['start_after_enqueue_returned_p50_ms']} "
                    f"| {r['missed']} | {r['load'][0]}→{r['load'][1]} |"
                )
            lines.append("")
    hb = res.get("heartbeat")
    if hb:
        lines += [
            f"## 3. Heartbeat cost: {hb['held']:,} held leases, one worker process, "
            f"{hb['window_s']:.0f} s window",
            "",
            f"Lease {hb['lease_s']:g} s, heartbeat H = {hb['heartbeat_s']:g} s, jitter reserve "
            f"{hb['jitter_s']:g} s. Counted on the heartbeat thread's own connection (wrapper "
            "around `LeaseConnection._run`), in pg_stat_user_tables and pg_stat_database.",
            "",
            "| figure | value |",
            "|---|---:|",
            f"| extend statements in window | {hb['extend_statements']} |",
            f"| extend statements per heartbeat interval H (target 1) | {hb['extend_statements_per_heartbeat_interval']} |",
            f"| heartbeat ticks in window (thread counter) | {hb['ticks']} |",
            f"| other statements on the heartbeat connection | {hb['other_heartbeat_statements'] or 0} |",
            f"| seconds the heartbeat connection spent, by statement | {hb.get('heartbeat_statement_seconds')} |",
            f"| failed heartbeat-connection statements (failed extends ran ms) | {hb.get('heartbeat_statement_errors') or 0} ({hb.get('failed_extend_ms') or '-'}) |",
            f"| statement timeouts used (s) | {hb.get('heartbeat_timeouts_s')} |",
            f"| worker counters at the end | {hb.get('worker_counts_end')} |",
            f"| rows per extend statement (median; min–max) | {hb['rows_per_extend_statement_median']} ({hb['rows_per_extend_statement_min_max']}) |",
            f"| extend statement time, median / max ms | {hb['extend_ms_median']} / {hb['extend_ms_max']} |",
            f"| rows extended per second | {hb['rows_extended_per_s']:,} |",
            f"| row updates seen by PostgreSQL (HOT) | {hb['db_row_updates']:,} ({hb['db_hot_updates']:,}) |",
            f"| transactions in the bench database | {hb['db_transactions']:,} |",
            f"| WAL written (whole server) | {hb['wal_bytes'] / 2**20:.1f} MB ({hb['wal_bytes_per_row']} B/row) |",
            f"| worker CPU (% of one core) | {hb['worker_cpu_pct_of_core']} |",
            f"| PostgreSQL backends' CPU (% of one core) | {hb['pg_cpu_pct_of_core']} |",
            f"| leases lost (journal heartbeat_lost / worker counter) | {hb['heartbeat_lost_events']} / {hb['worker_lease_lost']} |",
            f"| still running with a valid lease at the end | {hb['still_running_with_valid_lease']:,} / {hb['held']:,} |",
            f"| oldest heartbeat age / least lease left at the end, s | {hb['max_heartbeat_age_s']} / {hb['min_lease_left_s']} |",
            f"| worker RSS idle → holding {hb['held']:,} | {hb['rss_idle']['rss_mb']} → {hb['rss_held']['rss_mb']} MB |",
            f"| time to claim all {hb['held']:,} | {hb['all_running_after_s']} s |",
            f"| SIGTERM → exit with {hb['held']:,} held (grace 0), released | {hb['shutdown_s']} s, {hb['released_on_shutdown']:,} |",
            f"| load 1m start→end; other load | {hb['cpu']['load_start'][0]}→{hb['cpu']['load_end'][0]}; {hb['cpu']['other_load_cores']} cores |",
            "",
        ]
    hv = res.get("heartbeat_variants")
    if hv and hb:
        lines += [
            "Same phase with other tenure builds (prototypes of the recommended changes):",
            "",
            "| build | extend statements per H | ticks | rows/s | worker CPU % | PG CPU % | lost |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for v in [hb, *hv.values()]:
            lines.append(
                f"| {v['label']} | {v['extend_statements_per_heartbeat_interval']} | {v['ticks']} "
                f"| {v['rows_extended_per_s']:,} | {v['worker_cpu_pct_of_core']} "
                f"| {v['pg_cpu_pct_of_core']} | {v['heartbeat_lost_events'] + v['worker_lease_lost']} |"
            )
        lines.append("")
    rec = res.get("recovery")
    if rec:
        lines += [
            f"## 4. Recovery after SIGKILL (lease {rec['lease_s']:g} s, heartbeat "
            f"{rec['heartbeat_s']:g} s, poll {rec['poll_interval_s']:g} s)",
            "",
            "Worker A runs the job; worker B idles; A is SIGKILLed right after a confirmed "
            "heartbeat (the worst case: a whole lease left). Time until the tool starts on B.",
            "",
            "| trial | lease left at kill s | kill → start on B s | lease expiry → start s | other worker |",
            "|---:|---:|---:|---:|---|",
        ]
        for i, t in enumerate(rec["trials"], 1):
            lines.append(
                f"| {i} | {t['lease_left_at_kill_s']} | {t['kill_to_start_s']} "
                f"| {t['expiry_to_start_s']} | {t['reclaimed_by_other_pid']} |"
            )
        lines.append("")
    bl = res.get("bloat")
    if bl:
        lines += [
            f"## 5. Claim throughput vs terminal rows ({bl['jobs']:,} jobs per case, 1 worker, "
            f"median of {cfg.bloat_reps})",
            "",
            "tenure has no pruner yet: the pruned case is `DELETE` of the terminal rows + "
            "`VACUUM ANALYZE`. *Drain* is the full worker; *claim-only* is `Store.claim` of 100 per "
            "statement in a loop (no execution, no commit), after an `ANALYZE` so that every case "
            "is planned with statistics that know the queued rows. Each repetition starts with "
            "`VACUUM ANALYZE` (no dead tuples from the previous one). The claim's plans are in the "
            "JSON (`bloat.cases[].claim_plan`).",
            "",
            "| case | rows in table | table+indexes MB | drain jobs/s | drain CPU µs/job (worker+PG) | claim-only jobs/s | claim ms (median) | EXPLAIN ANALYZE ms | claim's scans | load 1m |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for cse in bl["cases"]:
            lines.append(
                f"| {cse['case']} | {cse['rows_in_table']:,} | {cse['table_mb']} "
                f"| {cse['drain_jobs_per_s']:,} "
                f"| {cse['drain_worker_cpu_us_per_job']}+{cse['drain_pg_cpu_us_per_job']} "
                f"| {cse['claim_jobs_per_s']:,} "
                f"| {cse['claim_ms_median']} | {cse['claim_explain_ms']} "
                f"| {', '.join(cse['claim_scans'])} "
                f"| {cse['load'][0]}→{cse['load'][1]} |"
            )
        lines.append("")
    rss = res.get("rss")
    if rss:
        lines += [
            "## 6. Worker memory",
            "",
            "| tenure worker (`tenure worker`, CLI) | RSS MB | USS MB |",
            "|---|---:|---:|",
            f"| idle | {rss['idle']['rss_mb']} | {rss['idle']['uss_mb']} |",
            f"| {rss['running_jobs']:,} running jobs | {rss['busy']['rss_mb']} | {rss['busy']['uss_mb']} |",
            "",
        ]
    for level, prof in (res.get("profile") or {}).items():
        lines += [
            f"## Profile: one tenure worker draining, log level {level} ({prof['samples']} py-spy "
            f"samples, {prof['jobs_per_s_under_profiler']} jobs/s under the profiler)",
            "",
            "Inclusive: share of samples with the frame on the stack (all threads).",
            "",
            "| self % | frame | | inclusive % | frame (tenure and library frames) |",
            "|---:|---|---|---:|---|",
        ]
        for a, b in zip(prof["self_top"], prof["inclusive_focus"], strict=False):
            lines.append(f"| {a[1]} | `{a[0]}` | | {b[1]} | `{b[0]}` |")
        lines.append("")
    targets = res.get("targets")
    if targets:
        lines += ["## Targets", "", "| target | measured | verdict |", "|---|---|---|"]
        for t in targets:
            lines.append(f"| {t['target']} | {t['measured']} | {t['verdict']} |")
        lines.append("")
    return "\n".join(lines)


def evaluate(cfg: Config, res: dict[str, Any]) -> None:
    targets: list[dict[str, str]] = []
    ratios: dict[str, str] = {}

    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else ("met" if ok else "**missed**")

    tp = res.get("throughput")
    if tp:
        by = {(s["label"], s["procs"]): s["jobs_per_s_median"] for s in tp["summary"]}
        top = max(cfg.procs)
        ten = by.get(("tenure", top))
        pgq = {k: v for k, v in by.items() if k[0].startswith("pgqueuer") and k[1] == top and v}
        raw = by.get((f"raw SQL ceiling (claim {cfg.raw_batch})", top))
        proc = by.get((f"procrastinate c={cfg.procr_concurrency}", top))
        if ten and pgq:
            best_label, best = max(pgq.items(), key=lambda kv: kv[1])
            r = ten / best
            ratios[f"tenure {top}p / {best_label[0]} {top}p (pgqueuer's best)"] = f"{r:.2f}×"
            targets.append(
                {
                    "target": f"tenure {top} procs ≥ 1.5 × pgqueuer best",
                    "measured": f"{ten:,.0f} vs {best:,.0f} jobs/s = {r:.2f}×",
                    "verdict": verdict(r >= 1.5),
                }
            )
        if ten and raw:
            r = ten / raw
            ratios[f"tenure {top}p / raw ceiling {top}p"] = f"{100 * r:.0f} %"
            targets.append(
                {
                    "target": f"tenure {top} procs ≥ 60 % of raw-SQL ceiling",
                    "measured": f"{ten:,.0f} vs {raw:,.0f} jobs/s = {100 * r:.0f} %",
                    "verdict": verdict(r >= 0.6),
                }
            )
        if ten and proc:
            ratios[f"tenure {top}p / procrastinate {top}p"] = f"{ten / proc:.2f}×"
        for level in cfg.tenure_log_levels:
            if level != "INFO" and by.get((f"tenure (log {level})", top)) and ten:
                q = by[(f"tenure (log {level})", top)]
                ratios[f"tenure log {level} / log INFO ({top}p)"] = f"{q / ten:.2f}×"
                if raw:
                    ratios[f"tenure (log {level}) {top}p / raw ceiling {top}p"] = (
                        f"{100 * q / raw:.0f} %"
                    )
                if pgq:
                    ratios[f"tenure (log {level}) {top}p / pgqueuer best {top}p"] = (
                        f"{q / max(pgq.values()):.2f}×"
                    )
        cap = {(s["label"], s["procs"]): s["cpu_bound_jobs_per_s"] for s in tp["summary"]}
        t_cap = cap.get(("tenure", top))
        pgq_cap = {
            k: v for k, v in cap.items() if k[0].startswith("pgqueuer") and k[1] == top and v
        }
        raw_cap = cap.get((f"raw SQL ceiling (claim {cfg.raw_batch})", top))
        if t_cap and pgq_cap:
            lbl, best_cap = max(pgq_cap.items(), key=lambda kv: kv[1])
            ratios[f"CPU-bound: tenure {top}p / {lbl[0]} {top}p"] = f"{t_cap / best_cap:.2f}×"
        if t_cap and raw_cap:
            ratios[f"CPU-bound: tenure {top}p / raw ceiling {top}p"] = (
                f"{100 * t_cap / raw_cap:.0f} %"
            )
        one = by.get(("tenure", 1))
        raw1 = by.get((f"raw SQL ceiling (claim {cfg.raw_batch})", 1))
        if one and raw1:
            ratios["tenure 1p / raw ceiling 1p"] = f"{100 * one / raw1:.0f} %"
        if one and ten:
            ratios[f"tenure {top}p / tenure 1p (scaling)"] = f"{ten / one:.2f}×"
    lat = res.get("latency")
    if lat:
        for name, v in lat.items():
            t = next((r for r in v["systems"] if r["system"] == "tenure"), None)
            floor = v["commit_floor_before"]["p50_ms"]
            if t:
                targets.append(
                    {
                        "target": f"wake-up p50 ≤ 3 ms ({name})",
                        "measured": f"{t['p50_ms']} ms (commit floor {floor} ms)",
                        "verdict": verdict(t["p50_ms"] <= 3),
                    }
                )
                targets.append(
                    {
                        "target": f"wake-up p95 ≤ 10 ms ({name})",
                        "measured": f"{t['p95_ms']} ms",
                        "verdict": verdict(t["p95_ms"] <= 10),
                    }
                )
    hb = res.get("heartbeat")
    if hb:
        per = hb["extend_statements_per_heartbeat_interval"]
        targets.append(
            {
                "target": f"{hb['held']:,} held leases: one heartbeat statement per H per process",
                "measured": f"{per} extend statements per {hb['heartbeat_s']:g} s "
                f"({hb['extend_statements']} in {hb['window_s']:.0f} s; "
                f"{hb['ticks']} ticks)",
                "verdict": verdict(
                    0.95 <= per <= 1.05 and not hb.get("heartbeat_statement_errors")
                ),
            }
        )
        lost = hb["heartbeat_lost_events"] + hb["worker_lease_lost"] + hb["rows_lost_in_window"]
        targets.append(
            {
                "target": "no lease lost",
                "measured": f"{lost} lost; "
                f"{hb['still_running_with_valid_lease']:,}/{hb['held']:,} valid at end",
                "verdict": verdict(
                    lost == 0 and hb["still_running_with_valid_lease"] == hb["held"]
                ),
            }
        )
    rec = res.get("recovery")
    if rec:
        worst = rec["max_kill_to_start_s"]
        targets.append(
            {
                "target": "reclaim after SIGKILL ≤ lease + 1 s",
                "measured": f"worst {worst} s vs {rec['lease_s'] + 1:g} s",
                "verdict": verdict(worst <= rec["lease_s"] + 1),
            }
        )
    bl = res.get("bloat")
    if bl and len(bl["cases"]) >= 2:
        empty, full = bl["cases"][0], bl["cases"][1]
        for key, what in (("drain_jobs_per_s", "drain"), ("claim_jobs_per_s", "claim-only")):
            if empty[key] and full[key]:
                r = full[key] / empty[key]
                targets.append(
                    {
                        "target": f"{what} with {bl['terminal_rows']:,} terminal rows ≥ 80 % of empty",
                        "measured": f"{full[key]:,.0f} vs {empty[key]:,.0f} jobs/s = {100 * r:.0f} %",
                        "verdict": verdict(r >= 0.8),
                    }
                )
    rss = res.get("rss")
    if rss:
        targets.append(
            {
                "target": "idle worker RSS ≤ 60 MB",
                "measured": f"{rss['idle']['rss_mb']} MB",
                "verdict": verdict(rss["idle"]["rss_mb"] <= 60),
            }
        )
    res["targets"] = targets
    res["ratios"] = ratios


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    cfg.out.mkdir(parents=True, exist_ok=True)
    bench = Bench(cfg)
    started = time.monotonic()
    res: dict[str, Any] = bench.results
    res["started"] = datetime.now(UTC).isoformat(timespec="seconds")
    res["config"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(cfg).items()}
    log(f"creating database {cfg.db} and installing tenure, pgqueuer, procrastinate schemas")
    bench.create_db()
    try:
        res["machine"] = bench.machine()
        for phase in PHASES:
            if phase in cfg.phases:
                try:
                    getattr(bench, f"phase_{phase}")()
                except Exception as exc:  # one phase failing must not lose the others
                    log(f"phase {phase} failed: {exc!r}")
                    res.setdefault("errors", {})[phase] = repr(exc)
    finally:
        res["duration_s"] = time.monotonic() - started
        res["load_at_end"] = loadavg()
        bench.drop_db()
    evaluate(cfg, res)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    md = report(cfg, res)
    if res.get("errors"):
        md += (
            "\n## Errors\n\n" + "\n".join(f"- {k}: `{v}`" for k, v in res["errors"].items()) + "\n"
        )
    kind = "quick" if cfg.quick else "full"
    (cfg.out / f"bench-{kind}-{stamp}.json").write_text(json.dumps(res, indent=2, default=str))
    (cfg.out / f"bench-{kind}-{stamp}.md").write_text(md)
    (cfg.out / f"latest-{kind}.json").write_text(json.dumps(res, indent=2, default=str))
    (cfg.out / f"latest-{kind}.md").write_text(md)
    print(md)
    log(f"wrote {cfg.out}/bench-{kind}-{stamp}.{{md,json}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
