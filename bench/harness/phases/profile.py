"""Profile: py-spy on one tenure worker draining, per log level; the top frames go in the report.

Skipped when py-spy is missing; empty when ptrace is not permitted (containers often forbid it).
"""

from __future__ import annotations

import collections
import contextlib
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ..config import BIN, Config
from ..core import Harness
from ..phase import Phase, Results
from ..procs import Procs
from ..system import log


def run(h: Harness) -> None:
    spy = shutil.which("py-spy", path=str(BIN)) or shutil.which("py-spy")
    if not spy:
        log("profile: py-spy not found; skipped")
        return
    n = min(h.cfg.jobs, 10_000)
    for level in h.cfg.tenure_log_levels:
        out = h.cfg.out / f"profile-tenure-worker-{level.lower()}.txt"
        with contextlib.suppress(FileNotFoundError):
            out.unlink()
        spies: list[subprocess.Popen[bytes]] = []

        def start(
            ws: Procs,
            spy: str = spy,
            out: Path = out,
            spies: list[subprocess.Popen[bytes]] = spies,
        ) -> None:
            spies.append(
                subprocess.Popen(
                    [
                        spy,
                        "record",
                        "--pid",
                        str(ws.pids[0]),
                        "--rate",
                        "250",
                        "--format",
                        "raw",
                        "--output",
                        str(out),
                        "--nonblocking",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

        log(f"profile: py-spy on one tenure worker (log {level}) draining {n} jobs")
        r = h.drain_once("tenure", "tenure", {"log_level": level}, 1, n, profile=start)
        for proc in spies:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
        if not out.exists():
            log("profile: py-spy wrote nothing (ptrace not permitted?)")
            continue
        h.results.setdefault("profile", {})[level] = {
            "jobs_per_s_under_profiler": r["jobs_per_s"],
            "file": str(out),
            **top_frames(out.read_text()),
        }


def top_frames(raw: str, n: int = 15) -> dict[str, Any]:
    """Self and inclusive top frames from py-spy's collapsed ("raw") output."""
    selfc: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        total += k
        frames = [
            f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].split("/")[-1] + ")"
            if " (" in f
            else f
            for f in stack.split(";")
        ]
        frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
        if frames:
            selfc[frames[-1]] += k
        for f in set(frames):
            incl[f] += k

    def fmt(c: collections.Counter[str]) -> list[list[Any]]:
        return [[name, round(100 * v / total, 1)] for name, v in c.most_common(n)] if total else []

    generic = (
        "runpy",
        "runners.py",
        "base_events.py",
        "events.py",
        "__main__.py",
        "_cli.py",
        "threading.py)",
    )
    focus = collections.Counter(
        {k: v for k, v in incl.items() if not any(g in k for g in generic) or "Thread" in k}
    )
    return {
        "samples": total,
        "self_top": fmt(selfc),
        "inclusive_top": fmt(incl),
        "inclusive_focus": fmt(focus),
    }


def section(cfg: Config, res: Results) -> list[str]:
    lines: list[str] = []
    for level, prof in (res.get("profile") or {}).items():
        lines += [
            f"## Profile: one tenure worker draining, log level {level} ({prof['samples']} py-spy "
            f"samples, {prof['jobs_per_s_under_profiler']} jobs/s under the profiler)",
            "",
            "Inclusive: share of samples with the frame on the stack (all threads).",
            "",
            "| self % | frame | | inclusive % | frame (tenure and library frames) |",
            "|---:|---|---|---:|---|",
        ]
        for a, b in zip(prof["self_top"], prof["inclusive_focus"], strict=False):
            lines.append(f"| {a[1]} | `{a[0]}` | | {b[1]} | `{b[0]}` |")
        lines.append("")
    return lines


PHASE = Phase("profile", run, section)
