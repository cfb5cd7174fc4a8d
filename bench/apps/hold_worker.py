"""Runs a tenure Worker in-process and exposes its heartbeat counters.

The heartbeat phase needs to know what the heartbeat thread really sent, so
this wrapper counts every statement on the heartbeat thread's own connection
(``LeaseConnection._run``, by query name), the rows each extension asked for
and the rows the database extended, and the send time of every extension.
Nothing in tenure is changed: a subclass of HeartbeatThread registers itself
and a wrapper around LeaseConnection._run counts. Stats go to a JSON file once
a second (and at exit) for the harness to read.

Usage: python hold_worker.py --stats FILE [--concurrency N] [--claim-batch B]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

from _stats import run_writing_stats

import tenure._worker._worker as worker_module
from tenure._store import LeaseConnection
from tenure._worker._heartbeat import HeartbeatThread

STATS: dict[str, Any] = {
    "statements": Counter(),
    "statement_seconds": Counter(),
    "rows_sent": 0,
    "rows_extended": 0,
    "rows_lost": 0,
    "extend_sent_at": [],  # monotonic send time of each extension
    "extend_rows": [],
    "extend_ms": [],
    "errors": Counter(),  # "statement:ErrorType" -> count
    "error_ms": [],  # how long each failed extension ran before it failed
}
THREADS: list[HeartbeatThread] = []
_lock = threading.Lock()


class CountingHeartbeat(HeartbeatThread):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        THREADS.append(self)

    def _confirm_session(self, live: Any, beat: Any, left: Any) -> None:
        # A session beat (migration 0023) renews every lease it confirms without a row each.
        with _lock:
            STATS["rows_sent"] += len(live)
            STATS["rows_extended"] += len(live)
            STATS["extend_rows"].append(len(live))
        super()._confirm_session(live, beat, left)


_original_run = LeaseConnection._run


def _counting_run(
    self: LeaseConnection, name: str, make_params: Callable[[], dict[str, Any]], timeout: float
) -> Any:
    sent = time.monotonic()
    STATS.setdefault("timeouts", set()).add(timeout)
    try:
        params = make_params()
        sent_at, rows = _original_run(self, name, lambda: params, timeout)
    except Exception as exc:
        with _lock:
            STATS["errors"][f"{name}:{type(exc).__name__}"] += 1
            if name == "extend_leases":
                STATS["error_ms"].append(round((time.monotonic() - sent) * 1000, 1))
        raise
    finally:
        elapsed = time.monotonic() - sent
        with _lock:
            STATS["statements"][name] += 1
            STATS["statement_seconds"][name] += elapsed
    if name == "extend_leases":
        extended = sum(1 for row in rows if row["lease_until"] is not None)
        with _lock:
            STATS["rows_sent"] += len(params["ids"])
            STATS["rows_extended"] += extended
            STATS["rows_lost"] += len(rows) - extended
            STATS["extend_sent_at"].append(round(sent, 4))
            STATS["extend_rows"].append(len(params["ids"]))
            STATS["extend_ms"].append(round(elapsed * 1000, 2))
    return sent_at, rows


worker_module.HeartbeatThread = CountingHeartbeat  # type: ignore[misc]
LeaseConnection._run = _counting_run  # type: ignore[method-assign]


def snapshot(worker: Any) -> dict[str, Any]:
    with _lock:
        data = {
            "pid": os.getpid(),
            "at_monotonic": time.monotonic(),
            "active": len(worker._active),
            "counts": dict(worker.counts),
            "ticks": sum(t.ticks for t in THREADS),
            "tick_statements": sum(t.statements for t in THREADS),
            "statements": dict(STATS["statements"]),
            "statement_seconds": {k: round(v, 4) for k, v in STATS["statement_seconds"].items()},
            "rows_sent": STATS["rows_sent"],
            "rows_extended": STATS["rows_extended"],
            "rows_lost": STATS["rows_lost"],
            "extend_sent_at": list(STATS["extend_sent_at"]),
            "extend_rows": list(STATS["extend_rows"]),
            "extend_ms": list(STATS["extend_ms"]),
            "errors": dict(STATS["errors"]),
            "error_ms": list(STATS["error_ms"]),
            "timeout_s": sorted({round(t, 3) for t in STATS.get("timeouts", set())}),
        }
    return data


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stats", required=True)
    parser.add_argument("--concurrency", type=int, default=10_000)
    parser.add_argument("--claim-batch", type=int, default=1000)
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level, format="%(message)s", stream=sys.stderr)

    from tenure_app import app

    worker = app.worker(
        concurrency=args.concurrency,
        claim_batch=args.claim_batch,
        poll_interval=args.poll_interval,
        grace=0.0,
    )

    try:
        run_writing_stats(worker, args.stats, lambda: snapshot(worker))
    finally:
        app.close()


if __name__ == "__main__":
    main()
