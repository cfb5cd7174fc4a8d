# ruff: noqa: E501  (the report writes long Markdown table rows with math signs)
"""Worker memory: one tenure worker's RSS and USS, idle and with cfg.rss_jobs running jobs."""

from __future__ import annotations

import asyncio
import time

from ..config import Config
from ..core import Harness
from ..phase import Evaluation, Phase, Results
from ..procs import Procs
from ..system import log, rss_mb, scalar
from ..systems import worker_cmd


def run(h: Harness) -> None:
    cfg = h.cfg
    h.reset("tenure")
    c = h.db()
    cmd = worker_cmd(cfg, "tenure", {"concurrency": cfg.rss_jobs, "claim_batch": 100})
    log(f"rss: tenure worker idle and with {cfg.rss_jobs} running jobs")
    with Procs(cfg, "rss", [cmd], h.env) as ws:
        ws.wait_ready(h.pg_port)
        time.sleep(1.0)
        idle = rss_mb(ws.pids[0])
        asyncio.run(h.enqueue_bulk("tenure", cfg.rss_jobs, "hold", {"seconds": 600}))
        deadline = time.monotonic() + 120
        while scalar(c, "SELECT count(*) FROM tenure_jobs WHERE state = 'running'") < cfg.rss_jobs:
            ws.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError("rss: jobs did not all start")
            time.sleep(0.2)
        time.sleep(2.0)
        busy = rss_mb(ws.pids[0])
    h.results["rss"] = {"idle": idle, "running_jobs": cfg.rss_jobs, "busy": busy}
    log(f"  → idle {idle['rss_mb']} MB, with {cfg.rss_jobs} jobs {busy['rss_mb']} MB")


def section(cfg: Config, res: Results) -> list[str]:
    rss = res.get("rss")
    if not rss:
        return []
    return [
        "## 6. Worker memory",
        "",
        "| tenure worker (`tenure worker`, CLI) | RSS MB | USS MB |",
        "|---|---:|---:|",
        f"| idle | {rss['idle']['rss_mb']} | {rss['idle']['uss_mb']} |",
        f"| {rss['running_jobs']:,} running jobs | {rss['busy']['rss_mb']} | {rss['busy']['uss_mb']} |",
        "",
    ]


def evaluate(cfg: Config, res: Results, ev: Evaluation) -> None:
    rss = res.get("rss")
    if rss:
        ev.target(
            "idle worker RSS ≤ 60 MB",
            f"{rss['idle']['rss_mb']} MB",
            rss["idle"]["rss_mb"] <= 60,
        )


PHASE = Phase("rss", run, section, evaluate)
