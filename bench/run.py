#!/usr/bin/env python
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
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import report
from harness.config import SYSTEMS, Config
from harness.core import Harness
from harness.phases import ALL, NAMES
from harness.system import CpuWindow, backend_pids, loadavg, log, pct

# CpuWindow, backend_pids, log and pct live in harness.system; copies of bench/runtime.py
# on other branches still import them from here.
__all__ = ["CpuWindow", "backend_pids", "log", "main", "parse_args", "pct"]

HERE = Path(__file__).resolve().parent
PHASES = NAMES


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


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    cfg.out.mkdir(parents=True, exist_ok=True)
    bench = Harness(cfg)
    started = time.monotonic()
    res: dict[str, Any] = bench.results
    res["started"] = datetime.now(UTC).isoformat(timespec="seconds")
    res["config"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(cfg).items()}
    log(f"creating database {cfg.db} and installing tenure, pgqueuer, procrastinate schemas")
    bench.create_db()
    try:
        res["machine"] = bench.machine()
        for phase in ALL:
            if phase.name in cfg.phases:
                try:
                    phase.run(bench)
                except Exception as exc:  # one phase failing must not lose the others
                    log(f"phase {phase.name} failed: {exc!r}")
                    res.setdefault("errors", {})[phase.name] = repr(exc)
    finally:
        res["duration_s"] = time.monotonic() - started
        res["load_at_end"] = loadavg()
        bench.drop_db()
    report.evaluate(cfg, res, ALL)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    md = report.render(cfg, res, ALL)
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
