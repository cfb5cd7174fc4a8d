# ruff: noqa: E501, RUF001  (the report writes long Markdown table rows with math signs)
"""Heartbeat cost: thousands of held leases in one tenure worker, over a window of steady state.

bench/apps/hold_worker.py wraps the heartbeat thread's connection and writes what it sent
to a stats file twice a second; PostgreSQL's own statistics (row updates, transactions,
WAL) and the CPU of the worker and its backends are read at the window's edges.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..config import APPS, PY, Config
from ..core import Harness
from ..phase import Evaluation, Phase, Results
from ..procs import Procs
from ..system import CpuWindow, log, rss_mb, scalar


def run(h: Harness) -> None:
    h.results["heartbeat"] = hold(h, "tenure", {})
    for name, src in h.cfg.tenure_variants:
        h.results.setdefault("heartbeat_variants", {})[name] = hold(
            h, f"tenure [{name}]", {"src": src}
        )


@dataclass
class Window:
    """What was read at the start (…0) and end (…1) of the window, and around it."""

    s0: dict[str, Any]  # the worker's stats file
    s1: dict[str, Any]
    u0: tuple[int, int]  # n_tup_upd, n_tup_hot_upd of tenure_jobs
    u1: tuple[int, int]
    x0: int  # transactions in the bench database
    x1: int
    wal_bytes: Decimal  # pg_wal_lsn_diff is numeric
    cpu: dict[str, Any]
    idle_rss: dict[str, float]
    rss_held: dict[str, float]
    lost_events: int
    still: int
    lag: tuple[Any, Any]  # oldest heartbeat age, least lease left (s) at the end
    all_running_s: float
    stop_s: float
    released: int


def hold(h: Harness, label: str, variant: dict[str, Any]) -> dict[str, Any]:
    """Hold cfg.hold_jobs leases in one worker; measure one window of cfg.hold_seconds."""
    cfg = h.cfg
    h.reset("tenure")
    stats_path = cfg.logs / "hold_stats.json"
    cfg.logs.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        stats_path.unlink()
    cmd = [
        PY,
        str(APPS / "hold_worker.py"),
        "--stats",
        str(stats_path),
        "--concurrency",
        str(cfg.hold_jobs),
        "--claim-batch",
        "1000",
    ]
    c = h.db()

    def read() -> dict[str, Any]:
        stats: dict[str, Any] = json.loads(stats_path.read_text())
        return stats

    def snap() -> tuple[int, int]:
        row = c.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'tenure_jobs'"
        ).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    def xact() -> int:
        return int(
            scalar(
                c,
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                (cfg.db,),
            )
        )

    def wal() -> Any:
        return scalar(c, "SELECT pg_current_wal_lsn()")

    log(
        f"heartbeat ({label}): {cfg.hold_jobs} held leases, H={cfg.hold_heartbeat}s, "
        f"window {cfg.hold_seconds:.0f}s"
    )
    tag = "heartbeat" + (f"-{label.split('[')[1].rstrip(']')}" if "[" in label else "")
    with Procs(cfg, tag, [cmd], h.env_for(variant)) as ws:
        ws.wait_ready(h.pg_port)
        idle_rss = rss_mb(ws.pids[0])
        hold_for = cfg.hold_seconds + 4 * cfg.hold_lease + 120
        t_claim0 = time.monotonic()
        for start in range(0, cfg.hold_jobs, 5000):
            n = min(5000, cfg.hold_jobs - start)
            asyncio.run(h.enqueue_bulk("tenure", n, "hold", {"seconds": hold_for}))
        while True:
            ws.check_alive()
            running = scalar(c, "SELECT count(*) FROM tenure_jobs WHERE state = 'running'")
            if running >= cfg.hold_jobs:
                break
            if time.monotonic() - t_claim0 > max(120, cfg.hold_jobs / 50):
                raise RuntimeError(f"only {running} of {cfg.hold_jobs} hold jobs running")
            time.sleep(0.2)
        all_running_s = time.monotonic() - t_claim0
        # One full heartbeat period first, so the window sees steady state.
        time.sleep(cfg.hold_heartbeat + 0.5)
        c.execute("SELECT pg_stat_force_next_flush()")
        s0, u0, x0, w0 = read(), snap(), xact(), wal()
        window = CpuWindow(c, cfg.db, ws.all_pids())
        time.sleep(cfg.hold_seconds)
        cpu = window.close()
        time.sleep(1.2)  # the stats file is rewritten twice a second
        s1, u1, x1, w1 = read(), snap(), xact(), wal()
        wal_bytes = scalar(c, "SELECT pg_wal_lsn_diff(%s, %s)", (w1, w0))
        rss_held = rss_mb(ws.pids[0])
        lost_events = scalar(c, "SELECT count(*) FROM tenure_events WHERE kind = 'heartbeat_lost'")
        still = scalar(
            c,
            "SELECT count(*) FROM tenure_jobs WHERE state = 'running' "
            "AND lease_until > clock_timestamp()",
        )
        lag = c.execute(
            "SELECT extract(epoch FROM max(clock_timestamp() - heartbeat_at)), "
            "extract(epoch FROM min(lease_until - clock_timestamp())) "
            "FROM tenure_jobs WHERE state = 'running'"
        ).fetchone()
        t_stop = time.monotonic()
        ws.stop(timeout=60)
        stop_s = time.monotonic() - t_stop
    released = scalar(c, "SELECT count(*) FROM tenure_jobs WHERE state = 'queued'")
    w = Window(
        s0=s0,
        s1=s1,
        u0=u0,
        u1=u1,
        x0=x0,
        x1=x1,
        wal_bytes=wal_bytes,
        cpu=cpu,
        idle_rss=idle_rss,
        rss_held=rss_held,
        lost_events=lost_events,
        still=still,
        lag=(lag[0], lag[1]) if lag else (None, None),
        all_running_s=all_running_s,
        stop_s=stop_s,
        released=released,
    )
    return figures(cfg, label, w)


def figures(cfg: Config, label: str, w: Window) -> dict[str, Any]:
    """The phase's figures (the JSON's ``heartbeat`` object) from one window's readings."""
    s0, s1, u0, u1, x0, x1, cpu = w.s0, w.s1, w.u0, w.u1, w.x0, w.x1, w.cpu
    wal_bytes, lag, lost_events = w.wal_bytes, w.lag, w.lost_events
    window_s = cpu["wall_s"]
    sent = [t for t in s1["extend_sent_at"] if t >= s0["at_monotonic"]]
    ext = s1["statements"].get("extend_leases", 0) - s0["statements"].get("extend_leases", 0)
    other = {
        k: v - s0["statements"].get(k, 0)
        for k, v in s1["statements"].items()
        if k != "extend_leases" and v - s0["statements"].get(k, 0)
    }
    n_intervals = window_s / cfg.hold_heartbeat
    rows = s1["rows_extended"] - s0["rows_extended"]
    ext_ms = s1["extend_ms"][len(s0["extend_ms"]) :]
    ext_rows = s1["extend_rows"][len(s0["extend_rows"]) :]
    fig = {
        "label": label,
        "held": cfg.hold_jobs,
        "lease_s": cfg.hold_lease,
        "heartbeat_s": cfg.hold_heartbeat,
        "jitter_s": cfg.hold_jitter,
        "window_s": window_s,
        "all_running_after_s": round(w.all_running_s, 2),
        "ticks": s1["ticks"] - s0["ticks"],
        "extend_statements": ext,
        "other_heartbeat_statements": other,
        "extend_statements_per_heartbeat_interval": round(ext / n_intervals, 2),
        "rows_per_extend_statement_median": statistics.median(ext_rows) if ext_rows else None,
        "rows_per_extend_statement_min_max": [min(ext_rows), max(ext_rows)] if ext_rows else None,
        "extend_ms_median": round(statistics.median(ext_ms), 1) if ext_ms else None,
        "extend_ms_max": max(ext_ms) if ext_ms else None,
        "rows_extended": rows,
        "rows_extended_per_s": round(rows / window_s, 1),
        "rows_lost_in_window": s1["rows_lost"] - s0["rows_lost"],
        "db_row_updates": u1[0] - u0[0],
        "db_hot_updates": u1[1] - u0[1],
        "db_transactions": x1 - x0,
        "wal_bytes": int(wal_bytes),
        "wal_bytes_per_row": round(wal_bytes / rows, 1) if rows else None,
        "worker_cpu_pct_of_core": round(100 * cpu["worker_cpu_s"] / window_s, 2),
        "pg_cpu_pct_of_core": round(100 * cpu["pg_backend_cpu_s"] / window_s, 2),
        "cpu": cpu,
        "heartbeat_lost_events": lost_events,
        "worker_lease_lost": s1["counts"].get("lease_lost", 0),
        "still_running_with_valid_lease": w.still,
        "max_heartbeat_age_s": round(float(lag[0]), 2) if lag[0] is not None else None,
        "min_lease_left_s": round(float(lag[1]), 2) if lag[1] is not None else None,
        "rss_idle": w.idle_rss,
        "rss_held": w.rss_held,
        "shutdown_s": round(w.stop_s, 2),
        "released_on_shutdown": w.released,
        "extend_send_times_in_window": len(sent),
        "heartbeat_statement_errors": {
            k: v - s0.get("errors", {}).get(k, 0)
            for k, v in s1.get("errors", {}).items()
            if v - s0.get("errors", {}).get(k, 0)
        },
        "failed_extend_ms": s1.get("error_ms", [])[len(s0.get("error_ms", [])) :],
        "heartbeat_statement_seconds": {
            k: round(v - s0["statement_seconds"].get(k, 0), 2)
            for k, v in s1["statement_seconds"].items()
        },
        "heartbeat_timeouts_s": s1.get("timeout_s"),
        "worker_counts_end": s1["counts"],
    }
    log(
        f"  → {ext} extend statements in {window_s:.0f}s "
        f"({fig['extend_statements_per_heartbeat_interval']} per H), "
        f"{fig['rows_extended_per_s']} rows/s, worker {fig['worker_cpu_pct_of_core']}% core, "
        f"pg {fig['pg_cpu_pct_of_core']}% core, lost {lost_events}"
    )
    return fig


def section(cfg: Config, res: Results) -> list[str]:
    hb = res.get("heartbeat")
    if not hb:
        return []
    lines = [
        f"## 3. Heartbeat cost: {hb['held']:,} held leases, one worker process, "
        f"{hb['window_s']:.0f} s window",
        "",
        f"Lease {hb['lease_s']:g} s, heartbeat H = {hb['heartbeat_s']:g} s, jitter reserve "
        f"{hb['jitter_s']:g} s. Counted on the heartbeat thread's own connection (wrapper "
        "around `LeaseConnection._run`), in pg_stat_user_tables and pg_stat_database.",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| extend statements in window | {hb['extend_statements']} |",
        f"| extend statements per heartbeat interval H (target 1) | {hb['extend_statements_per_heartbeat_interval']} |",
        f"| heartbeat ticks in window (thread counter) | {hb['ticks']} |",
        f"| other statements on the heartbeat connection | {hb['other_heartbeat_statements'] or 0} |",
        f"| seconds the heartbeat connection spent, by statement | {hb.get('heartbeat_statement_seconds')} |",
        f"| failed heartbeat-connection statements (failed extends ran ms) | {hb.get('heartbeat_statement_errors') or 0} ({hb.get('failed_extend_ms') or '-'}) |",
        f"| statement timeouts used (s) | {hb.get('heartbeat_timeouts_s')} |",
        f"| worker counters at the end | {hb.get('worker_counts_end')} |",
        f"| rows per extend statement (median; min–max) | {hb['rows_per_extend_statement_median']} ({hb['rows_per_extend_statement_min_max']}) |",
        f"| extend statement time, median / max ms | {hb['extend_ms_median']} / {hb['extend_ms_max']} |",
        f"| rows extended per second | {hb['rows_extended_per_s']:,} |",
        f"| row updates seen by PostgreSQL (HOT) | {hb['db_row_updates']:,} ({hb['db_hot_updates']:,}) |",
        f"| transactions in the bench database | {hb['db_transactions']:,} |",
        f"| WAL written (whole server) | {hb['wal_bytes'] / 2**20:.1f} MB ({hb['wal_bytes_per_row']} B/row) |",
        f"| worker CPU (% of one core) | {hb['worker_cpu_pct_of_core']} |",
        f"| PostgreSQL backends' CPU (% of one core) | {hb['pg_cpu_pct_of_core']} |",
        f"| leases lost (journal heartbeat_lost / worker counter) | {hb['heartbeat_lost_events']} / {hb['worker_lease_lost']} |",
        f"| still running with a valid lease at the end | {hb['still_running_with_valid_lease']:,} / {hb['held']:,} |",
        f"| oldest heartbeat age / least lease left at the end, s | {hb['max_heartbeat_age_s']} / {hb['min_lease_left_s']} |",
        f"| worker RSS idle → holding {hb['held']:,} | {hb['rss_idle']['rss_mb']} → {hb['rss_held']['rss_mb']} MB |",
        f"| time to claim all {hb['held']:,} | {hb['all_running_after_s']} s |",
        f"| SIGTERM → exit with {hb['held']:,} held (grace 0), released | {hb['shutdown_s']} s, {hb['released_on_shutdown']:,} |",
        f"| load 1m start→end; other load | {hb['cpu']['load_start'][0]}→{hb['cpu']['load_end'][0]}; {hb['cpu']['other_load_cores']} cores |",
        "",
    ]
    hv = res.get("heartbeat_variants")
    if hv:
        lines += [
            "Same phase with other tenure builds (prototypes of the recommended changes):",
            "",
            "| build | extend statements per H | ticks | rows/s | worker CPU % | PG CPU % | lost |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for v in [hb, *hv.values()]:
            lines.append(
                f"| {v['label']} | {v['extend_statements_per_heartbeat_interval']} | {v['ticks']} "
                f"| {v['rows_extended_per_s']:,} | {v['worker_cpu_pct_of_core']} "
                f"| {v['pg_cpu_pct_of_core']} | {v['heartbeat_lost_events'] + v['worker_lease_lost']} |"
            )
        lines.append("")
    return lines


def evaluate(cfg: Config, res: Results, ev: Evaluation) -> None:
    hb = res.get("heartbeat")
    if not hb:
        return
    per = hb["extend_statements_per_heartbeat_interval"]
    ev.target(
        f"{hb['held']:,} held leases: one heartbeat statement per H per process",
        f"{per} extend statements per {hb['heartbeat_s']:g} s "
        f"({hb['extend_statements']} in {hb['window_s']:.0f} s; "
        f"{hb['ticks']} ticks)",
        0.95 <= per <= 1.05 and not hb.get("heartbeat_statement_errors"),
    )
    lost = hb["heartbeat_lost_events"] + hb["worker_lease_lost"] + hb["rows_lost_in_window"]
    ev.target(
        "no lease lost",
        f"{lost} lost; {hb['still_running_with_valid_lease']:,}/{hb['held']:,} valid at end",
        lost == 0 and hb["still_running_with_valid_lease"] == hb["held"],
    )


PHASE = Phase("heartbeat", run, section, evaluate)
