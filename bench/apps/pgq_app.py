"""The pgqueuer app: ``pgq run pgq_app:factory --batch-size N`` (its documented CLI).

Built as in pgqueuer's quick start: one asyncpg connection, AsyncpgDriver,
an entrypoint per job kind.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from _probe import started
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job


@asynccontextmanager
async def factory() -> AsyncIterator[PgQueuer]:
    # BENCH_PG_OPTIONS mirrors libpq's PGOPTIONS (which asyncpg does not read) for the
    # latency phase's no-fsync variant: "-c synchronous_commit=off".
    settings = dict(
        opt.split("=", 1)
        for opt in os.environ.get("BENCH_PG_OPTIONS", "").replace("-c ", "").split()
        if "=" in opt
    )
    connection = await asyncpg.connect(os.environ["BENCH_DSN_URL"], server_settings=settings)
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    @pgq.entrypoint("ping")
    async def ping(job: Job) -> None:
        started((job.payload or b"").decode())

    try:
        yield pgq
    finally:
        await connection.close()
