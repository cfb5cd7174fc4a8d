# ruff: noqa: E501  (the report writes long Markdown table rows with math signs)
"""Recovery: SIGKILL the worker that owns a job, time until the tool starts on another worker.

The kill comes right after a confirmed heartbeat, the worst case: a whole lease is left to
run out. The tools report their starts over UDP (``key:attempt time pid``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from typing import Any

from ..config import Config
from ..core import Harness
from ..phase import Evaluation, Phase, Results
from ..procs import Procs
from ..system import log, scalar
from ..systems import worker_cmd


def run(h: Harness) -> None:
    cfg = h.cfg
    trials = [trial(h, i) for i in range(cfg.recovery_trials)]
    h.results["recovery"] = {
        "lease_s": cfg.slow_lease,
        "heartbeat_s": cfg.slow_heartbeat,
        "poll_interval_s": 1.0,
        "trials": trials,
        "max_kill_to_start_s": max(t["kill_to_start_s"] for t in trials),
    }


def wait_for(sock: socket.socket, tag: str, timeout: float) -> tuple[float, int] | None:
    """(time, pid) of the start reported as ``tag``, or None after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = sock.recv(200).decode().split()
        except TimeoutError:
            continue
        if data[0] == tag:
            return float(data[1]), int(data[2])
    return None


def trial(h: Harness, n: int) -> dict[str, Any]:
    cfg = h.cfg
    h.reset("tenure")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(0.05)
        env = {**h.env, "BENCH_UDP_PORT": str(sock.getsockname()[1])}
        cmd = worker_cmd(cfg, "tenure", {"concurrency": 10, "claim_batch": 10})
        key = f"rec{n}"
        log(f"recovery: trial {n + 1}/{cfg.recovery_trials}, lease {cfg.slow_lease}s")
        with Procs(cfg, f"rec-a{n}", [cmd], env) as a:
            a.wait_ready(h.pg_port)
            asyncio.run(enqueue_slow(key))
            first = wait_for(sock, f"{key}:1", 20)
            if first is None:
                raise RuntimeError("recovery: worker A never started the job")
            with Procs(cfg, f"rec-b{n}", [cmd], env) as b:
                b.wait_ready(h.pg_port)
                c = h.db()
                heartbeat_at = "SELECT heartbeat_at FROM tenure_jobs WHERE idempotency_key = %s"
                # Kill right after a confirmed heartbeat: the worst case, a full lease left.
                hb0 = scalar(c, heartbeat_at, (key,))
                deadline = time.monotonic() + cfg.slow_heartbeat * 3 + 5
                while time.monotonic() < deadline:
                    if scalar(c, heartbeat_at, (key,)) != hb0:
                        break
                    time.sleep(0.005)
                t_kill = time.time()
                os.kill(a.pids[0], signal.SIGKILL)
                a.procs[0].wait()
                lease_until = scalar(
                    c,
                    "SELECT extract(epoch FROM lease_until) FROM tenure_jobs "
                    "WHERE idempotency_key = %s",
                    (key,),
                )
                second = wait_for(sock, f"{key}:2", cfg.slow_lease * 3 + 10)
                if second is None:
                    raise RuntimeError("recovery: no other worker started the job")
                result = {
                    "lease_s": cfg.slow_lease,
                    "lease_left_at_kill_s": round(float(lease_until) - t_kill, 3),
                    "kill_to_start_s": round(second[0] - t_kill, 3),
                    "expiry_to_start_s": round(second[0] - float(lease_until), 3),
                    "reclaimed_by_other_pid": second[1] != first[1],
                }
                log(f"  → start on another worker {result['kill_to_start_s']} s after SIGKILL")
    return result


async def enqueue_slow(key: str) -> None:
    from tenure_app import app

    try:
        await app.enqueue("slow", {"k": key, "seconds": 3600}, idempotency_key=key)
    finally:
        await app.aclose()


def section(cfg: Config, res: Results) -> list[str]:
    rec = res.get("recovery")
    if not rec:
        return []
    lines = [
        f"## 4. Recovery after SIGKILL (lease {rec['lease_s']:g} s, heartbeat "
        f"{rec['heartbeat_s']:g} s, poll {rec['poll_interval_s']:g} s)",
        "",
        "Worker A runs the job; worker B idles; A is SIGKILLed right after a confirmed "
        "heartbeat (the worst case: a whole lease left). Time until the tool starts on B.",
        "",
        "| trial | lease left at kill s | kill → start on B s | lease expiry → start s | other worker |",
        "|---:|---:|---:|---:|---|",
    ]
    for i, t in enumerate(rec["trials"], 1):
        lines.append(
            f"| {i} | {t['lease_left_at_kill_s']} | {t['kill_to_start_s']} "
            f"| {t['expiry_to_start_s']} | {t['reclaimed_by_other_pid']} |"
        )
    lines.append("")
    return lines


def evaluate(cfg: Config, res: Results, ev: Evaluation) -> None:
    rec = res.get("recovery")
    if rec:
        worst = rec["max_kill_to_start_s"]
        ev.target(
            "reclaim after SIGKILL ≤ lease + 1 s",
            f"worst {worst} s vs {rec['lease_s'] + 1:g} s",
            worst <= rec["lease_s"] + 1,
        )


PHASE = Phase("recovery", run, section, evaluate)
