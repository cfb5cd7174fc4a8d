"""Scratch databases and process CPU for the bench's standalone scripts
(statements.py, enqueue_calls.py, scale.py, churn.py): each makes a fresh database of its own
on $BENCH_ADMIN_DSN's server and drops it at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence

import psycopg
from psycopg import sql

ADMIN = os.environ.get("BENCH_ADMIN_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres")


def fresh_database(name: str) -> str:
    """Drop and create database ``name``; its DSN (the admin DSN's server and user)."""
    drop_database(name)
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = psycopg.conninfo.conninfo_to_dict(ADMIN)
    params["dbname"] = name
    return psycopg.conninfo.make_conninfo(**params)  # type: ignore[arg-type]


def drop_database(name: str) -> None:
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_processes(procs: Sequence[subprocess.Popen[bytes]], timeout: float) -> None:
    """SIGTERM to every process, then wait up to ``timeout`` s for all of them together and
    kill what is left (a wait per process, one after another, could take 20 times 120 s when twenty
    workers holding 50,000 calls each were slow to hand them back)."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
