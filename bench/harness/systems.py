"""The four systems under test: schema, worker command, bulk enqueue, and what their tables say.

Everything that differs between tenure, pgqueuer, procrastinate and the raw-SQL ceiling is
here, so the phases can treat a system as a name.
"""

from __future__ import annotations

import subprocess
from typing import Any

import psycopg

from .config import APPS, BIN, PY, Config

# Empties a system's tables between measurements.
RESET = {
    # tenure_steps and runs are keyed on jobs; sessions only exist from migration 0023 on
    "tenure": "TRUNCATE tenure_jobs, tenure_events CASCADE; DO $$ BEGIN "
    "IF to_regclass('tenure_sessions') IS NOT NULL THEN TRUNCATE tenure_sessions; END IF; "
    "IF to_regclass('tenure_done') IS NOT NULL THEN TRUNCATE tenure_done; END IF; END $$",
    "raw": "TRUNCATE raw_jobs, raw_events",
    "pgqueuer": "TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics",
    "procrastinate": "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_workers "
    "CASCADE",
}

# True while a job is queued or held.
REMAINING = {
    "tenure": "SELECT EXISTS (SELECT 1 FROM tenure_jobs WHERE state = 'queued') "
    "OR EXISTS (SELECT 1 FROM tenure_jobs WHERE lease_until IS NOT NULL)",
    "raw": "SELECT EXISTS (SELECT 1 FROM raw_jobs WHERE state = 'queued') "
    "OR EXISTS (SELECT 1 FROM raw_jobs WHERE lease_until IS NOT NULL)",
    "pgqueuer": "SELECT EXISTS (SELECT 1 FROM pgqueuer)",
    "procrastinate": "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs "
    "WHERE status IN ('todo', 'doing'))",
}

# (jobs that succeeded, epoch of the last success), as the system itself recorded them.
FINISHED = {
    "tenure": "SELECT count(*), extract(epoch FROM max(finished_at)) FROM tenure_jobs "
    "WHERE state = 'succeeded'",
    "raw": "SELECT count(*), extract(epoch FROM max(finished_at)) FROM raw_jobs "
    "WHERE state = 'succeeded'",
    "pgqueuer": "SELECT count(*), extract(epoch FROM max(created)) FROM pgqueuer_log "
    "WHERE status = 'successful'",
    "procrastinate": "SELECT count(*), extract(epoch FROM max(at)) FROM "
    "procrastinate_events WHERE type = 'succeeded'",
}


# Storage F (bench/prototypes/f_storage.py) moves a finished job to tenure_done, and a
# session lease has no lease_until while it runs.
F_STORAGE = {
    "remaining": "SELECT EXISTS (SELECT 1 FROM tenure_jobs WHERE state IN ('queued', 'running'))",
    "finished": "SELECT count(*), extract(epoch FROM max(finished_at)) FROM tenure_done "
    "WHERE state = 'succeeded'",
}


def run_cli(cmd: list[str], what: str, env: dict[str, str]) -> None:
    r = subprocess.run(cmd, env=env, cwd=str(APPS), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")


def install(cfg: Config, env: dict[str, str], conn: psycopg.Connection[Any]) -> None:
    """Every system's schema in the (new, empty) bench database, each with its own tool."""
    run_cli([PY, "-m", "tenure", "--dsn", cfg.dsn, "migrate"], "tenure migrate", env)
    run_cli([str(BIN / "pgq"), "--pg-dsn", cfg.dsn_url, "install"], "pgq install", env)
    run_cli(
        [str(BIN / "procrastinate"), "--app=procr_app.app", "schema", "--apply"],
        "procrastinate schema",
        env,
    )
    conn.execute("CREATE SEQUENCE raw_fence_token AS bigint")
    conn.execute("CREATE TABLE raw_jobs (LIKE tenure_jobs INCLUDING ALL)")
    conn.execute("CREATE TABLE raw_events (LIKE tenure_events INCLUDING ALL)")


def worker_cmd(cfg: Config, system: str, variant: dict[str, Any]) -> list[str]:
    if system == "tenure" and variant.get("defaults"):
        return [PY, "-m", "tenure", "worker", "tenure_app:app"]
    if system == "tenure":
        return [
            PY,
            "-m",
            "tenure",
            "--log-level",
            variant.get("log_level", "INFO"),
            "worker",
            "tenure_app:app",
            "--concurrency",
            str(variant.get("concurrency", cfg.tenure_concurrency)),
            "--claim-batch",
            str(variant.get("claim_batch", cfg.tenure_claim_batch)),
            "--poll-interval",
            str(variant.get("poll_interval", 1.0)),
        ]
    if system == "pgqueuer":
        return [
            PY,
            str(APPS / "pgq_run.py"),
            "--factory",
            "pgq_app:factory",
            "--batch-size",
            str(variant.get("batch", 10)),
        ]
    if system == "procrastinate":
        return [
            str(BIN / "procrastinate"),
            "--app=procr_app.app",
            "worker",
            "--concurrency",
            str(variant.get("concurrency", cfg.procr_concurrency)),
        ]
    if system == "raw":
        return [
            PY,
            str(APPS / "raw_worker.py"),
            "--dsn",
            cfg.dsn,
            "--batch",
            str(variant.get("batch", cfg.raw_batch)),
            *(["--journal"] if variant.get("journal") else []),
        ]
    raise ValueError(system)


async def enqueue_bulk(
    cfg: Config, system: str, run: str, n: int, tool: str, payload: Any = None
) -> None:
    """Queue n jobs in one statement (one transaction) with the system's bulk API.

    ``run`` prefixes the idempotency keys, so that two batches never collide.
    """
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

        conn = await asyncpg.connect(cfg.dsn_url)
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
        async with await psycopg.AsyncConnection.connect(cfg.dsn) as conn:
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO raw_jobs (tool, idempotency_key, payload, payload_hash, "
                    "max_attempts) SELECT %s, %s || g, '{}'::jsonb, 'x', 5 "
                    "FROM generate_series(1, %s) g",
                    (tool, run + "-", n),
                )
                await conn.execute("NOTIFY raw_jobs")
