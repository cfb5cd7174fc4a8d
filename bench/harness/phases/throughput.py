# ruff: noqa: E501, RUF001  (the report writes long Markdown table rows with math signs)
"""Throughput: n no-op jobs enqueued at once onto idle workers, timed to the last success.

Every system, at each process count, in interleaved rounds (the order reverses each round,
so that drift in the machine's other load falls on all systems alike).
"""

from __future__ import annotations

import collections
import os
import statistics
from typing import Any

from ..config import Config
from ..core import Harness
from ..phase import Evaluation, Phase, Results
from ..system import log


def variants(cfg: Config) -> list[tuple[str, str, dict[str, Any]]]:
    """(system, label, worker variant) of every throughput cell, in the configured systems."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for level in cfg.tenure_log_levels:
        label = "tenure" if level == "INFO" else f"tenure (log {level})"
        out.append(("tenure", label, {"log_level": level}))
    # `tenure worker` with no tuning flags: what a user gets out of the box.
    out.append(("tenure", "tenure (defaults)", {"defaults": True}))
    for name, src in cfg.tenure_variants:
        out.append(("tenure", f"tenure [{name}]", {"src": src}))
    for b in cfg.pgq_batches:
        label = f"pgqueuer batch={b}" + (" (default)" if b == 10 else "")
        out.append(("pgqueuer", label, {"batch": b}))
    out.append(("procrastinate", f"procrastinate c={cfg.procr_concurrency}", {}))
    out.append(("raw", f"raw SQL ceiling (claim {cfg.raw_batch})", {}))
    for b in cfg.raw_extra_batches:
        out.append(("raw", f"raw SQL (claim {b})", {"batch": b}))
    # The cheapest raw variant that keeps a journal: one row per job, written by the commit.
    best = max([cfg.raw_batch, *cfg.raw_extra_batches])
    out.append(
        ("raw", f"raw SQL (claim {best}, journal row per job)", {"batch": best, "journal": True})
    )
    return [v for v in out if v[0] in cfg.systems]


def run(h: Harness) -> None:
    cfg = h.cfg
    cells: dict[tuple[str, int], list[dict[str, Any]]] = collections.defaultdict(list)
    todo = variants(cfg)
    for procs in cfg.procs:
        for rnd in range(cfg.rounds):
            order = todo if rnd % 2 == 0 else list(reversed(todo))
            for system, label, variant in order:
                log(f"throughput: {label}, {procs} proc(s), round {rnd + 1}/{cfg.rounds}")
                n = cfg.procr_jobs if system == "procrastinate" else cfg.jobs
                r = h.drain_once(system, label, variant, procs, n)
                log(
                    f"  → {r['jobs_per_s']} jobs/s (drain {r['drain_s']} s, "
                    f"{r['succeeded']}/{r['jobs']} ok, load {r['cpu']['load_end'][0]}, "
                    f"other load {r['cpu']['other_load_cores']} cores)"
                )
                cells[(label, procs)].append(r)
    summary = [summarize(label, procs, runs) for (label, procs), runs in cells.items()]
    h.results["throughput"] = {
        "runs": [r for v in cells.values() for r in v],
        "summary": summary,
    }


def summarize(label: str, procs: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell of the table: medians over its rounds."""
    rates = [r["jobs_per_s"] for r in runs if r["jobs_per_s"]]

    def median_cpu(key: str, per_job: bool) -> float:
        return float(
            statistics.median(
                (1e6 * r["cpu"][key] / r["jobs"]) if per_job else r["cpu"][key] for r in runs
            )
        )

    row = {
        "system": runs[0]["system"],
        "label": label,
        "procs": procs,
        "jobs": runs[0]["jobs"],
        "jobs_per_s_median": round(statistics.median(rates), 1) if rates else None,
        "jobs_per_s_runs": rates,
        "all_succeeded": all(r["succeeded"] == r["jobs"] for r in runs),
        "worker_cpu_s": round(median_cpu("worker_cpu_s", per_job=False), 2),
        "worker_us_per_job": round(median_cpu("worker_cpu_s", per_job=True), 1),
        "pg_us_per_job": round(median_cpu("pg_backend_cpu_s", per_job=True), 1),
        "pg_cpu_s": round(median_cpu("pg_backend_cpu_s", per_job=False), 2),
        "other_load_cores": max(r["cpu"]["other_load_cores"] or 0 for r in runs),
        "load": [runs[0]["cpu"]["load_start"][0], runs[-1]["cpu"]["load_end"][0]],
        "idle_rss_mb": runs[0]["idle_rss"][0]["rss_mb"],
    }
    per_job = (row["worker_us_per_job"] + row["pg_us_per_job"]) / 1e6
    row["cpu_bound_jobs_per_s"] = round((os.cpu_count() or 1) / per_job) if per_job else None
    return row


def section(cfg: Config, res: Results) -> list[str]:
    tp = res.get("throughput")
    if not tp:
        return []
    lines = [
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
    return lines


def evaluate(cfg: Config, res: Results, ev: Evaluation) -> None:
    tp = res.get("throughput")
    if not tp:
        return
    ratios = ev.ratios
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
        ev.target(
            f"tenure {top} procs ≥ 1.5 × pgqueuer best",
            f"{ten:,.0f} vs {best:,.0f} jobs/s = {r:.2f}×",
            r >= 1.5,
        )
    if ten and raw:
        r = ten / raw
        ratios[f"tenure {top}p / raw ceiling {top}p"] = f"{100 * r:.0f} %"
        ev.target(
            f"tenure {top} procs ≥ 60 % of raw-SQL ceiling",
            f"{ten:,.0f} vs {raw:,.0f} jobs/s = {100 * r:.0f} %",
            r >= 0.6,
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
    pgq_cap = {k: v for k, v in cap.items() if k[0].startswith("pgqueuer") and k[1] == top and v}
    raw_cap = cap.get((f"raw SQL ceiling (claim {cfg.raw_batch})", top))
    if t_cap and pgq_cap:
        lbl, best_cap = max(pgq_cap.items(), key=lambda kv: kv[1])
        ratios[f"CPU-bound: tenure {top}p / {lbl[0]} {top}p"] = f"{t_cap / best_cap:.2f}×"
    if t_cap and raw_cap:
        ratios[f"CPU-bound: tenure {top}p / raw ceiling {top}p"] = f"{100 * t_cap / raw_cap:.0f} %"
    one = by.get(("tenure", 1))
    raw1 = by.get((f"raw SQL ceiling (claim {cfg.raw_batch})", 1))
    if one and raw1:
        ratios["tenure 1p / raw ceiling 1p"] = f"{100 * one / raw1:.0f} %"
    if one and ten:
        ratios[f"tenure {top}p / tenure 1p (scaling)"] = f"{ten / one:.2f}×"


PHASE = Phase("throughput", run, section, evaluate)
