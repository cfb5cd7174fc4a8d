"""What is measured, and on what: the tenure source under test, the workers' environment, the host.

The report names all three, so that a figure can be traced to the code and the server it
came from.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psutil
import psycopg

from .config import APPS, REPO, Config
from .system import loadavg, scalar


def resolve_tenure_src(cfg: Config) -> str | None:
    """The directory holding the `tenure` package the workers import."""
    if cfg.tenure_src:
        return str(Path(cfg.tenure_src).resolve())
    if not cfg.tenure_ref:
        # A copy of the working tree's package taken now, so that edits made to the
        # repo while the bench runs cannot change (or break) the code under test.
        dest = cfg.out / "tenure-src-snapshot"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(
            REPO / "src" / "tenure",
            dest / "src" / "tenure",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        return str(dest / "src")
    ref = cfg.tenure_ref
    dest = cfg.out / f"tenure-src-{ref.replace('/', '_')}"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", ref, "src/tenure"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return str(dest / "src")


def worker_env(cfg: Config, tenure_src: str | None) -> dict[str, str]:
    """The workers' environment: the bench database, the tenure source, the apps' intervals."""
    pythonpath = f"{tenure_src}{os.pathsep}{APPS}" if tenure_src else str(APPS)
    return {
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


def tenure_origin(cfg: Config) -> dict[str, Any]:
    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return r.stdout.strip()

    import tenure

    return {
        "imported_from": str(Path(tenure.__file__).parent),
        "ref": cfg.tenure_ref
        or ("custom source" if cfg.tenure_src else "working tree (copied at start)"),
        "head": git("rev-parse", "--short", "HEAD"),
        "working_tree_changes": len(git("status", "--porcelain", "src").splitlines()),
    }


def describe_machine(cfg: Config, c: psycopg.Connection[Any]) -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    settings = {
        name: scalar(c, f"SHOW {name}")
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
        "tenure_source": tenure_origin(cfg),
    }
