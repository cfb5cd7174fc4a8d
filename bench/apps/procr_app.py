"""The procrastinate app: ``procrastinate --app=procr_app.app worker -c N``."""

from __future__ import annotations

import os

import procrastinate
from _probe import started

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ["BENCH_DSN"]))


@app.task(name="noop")
async def noop() -> None:
    return None


@app.task(name="ping")
async def ping(k: str) -> None:
    started(k)
