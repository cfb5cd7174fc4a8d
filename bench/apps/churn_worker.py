"""One tenure worker for bench/churn.py: a no-op tool, the real pruners on short intervals.

Usage: python churn_worker.py --stats FILE [--retain 60] [--prune-interval 10]
       [--journal-retention 60] [--concurrency 100] [--claim-batch 100]

The tool ``noop`` keeps its ended jobs ``--retain`` seconds (the tool's ``retain``; the
producer passes the same on enqueue). The worker runs tenure's own maintenance: the job
pruner (``JobPrunerConfig``) and the journal pruner (``JournalPrunerConfig``, retention at
least 60 s, its floor), both every ``--prune-interval`` seconds; everything else is
default. The worker's counters (``worker.counts``: claimed, succeeded, ...) go to a JSON
file twice a second and at exit, for the script to read. TENURE_DSN names the database.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from _stats import run_writing_stats

from tenure import App
from tenure.maintenance import JobPrunerConfig, JournalPrunerConfig


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stats", required=True)
    parser.add_argument("--retain", type=float, default=60.0)
    parser.add_argument("--prune-interval", type=float, default=10.0)
    parser.add_argument("--journal-retention", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--claim-batch", type=int, default=100)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level, format="%(message)s", stream=sys.stderr)

    app = App(retain=args.retain)

    @app.tool("noop", lease=30, heartbeat=10, jitter=5, retain=args.retain)
    async def noop(ctx) -> None:  # type: ignore[no-untyped-def]
        return None

    worker = app.worker(
        concurrency=args.concurrency,
        claim_batch=args.claim_batch,
        grace=1.0,
        job_pruner=JobPrunerConfig(interval=args.prune_interval),
        journal_pruner=JournalPrunerConfig(
            retention=max(60.0, args.journal_retention), interval=args.prune_interval
        ),
    )

    try:
        run_writing_stats(
            worker, args.stats, lambda: {"pid": os.getpid(), "counts": dict(worker.counts)}
        )
    finally:
        app.close()


if __name__ == "__main__":
    main()
