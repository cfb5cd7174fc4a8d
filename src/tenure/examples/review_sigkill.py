"""`tenure demo --pipeline`: the review pipeline under SIGKILL in the two windows that lose work.

Worker processes run `tenure.examples.review:app`; the demo starts review runs,
kills a worker right after it committed a QA verdict (``dispatch_pending``: the
verdict recorded, the next step not yet dispatched) and another while it holds a
gate (``in_progress``: no verdict recorded yet),
sends the killed gate's verdict late (it must be refused), and reports what
happened. Nothing here decides anything the library does not: the report reads
tenure's own tables through the App.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from tenure import App, Conflict, Job, Run, Verdict
from tenure.examples.review import review


class Tracker(Protocol):
    """The receiver that records gate statuses (the example case service)."""

    url: str

    def effects(self) -> tuple[int, int]: ...


WORKER = ("-m", "tenure", "--log-level", "WARNING", "worker", "tenure.examples.review:app")
DEADLINE = 90.0


class ReviewDemo:
    """Worker processes, the two kills, the late verdict, and the report."""

    def __init__(
        self,
        dsn: str,
        tracker: Tracker,
        runs: int,
        workers: int,
        *,
        spawning: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        """Nothing starts until `run`, so ``close`` can be registered first; each worker
        is started inside ``spawning()`` (`tenure demo` holds its signals there, so a
        worker is never started without being known to ``close``)."""
        self.app = App(dsn)
        self.workers = workers
        self.spawning = spawning
        self.tracker = tracker
        self.runs = runs
        # The worker processes use this DSN (a DSN file would be a second one: drop it).
        self.env = {k: v for k, v in os.environ.items() if k != "TENURE_DSN_FILE"}
        self.env["TENURE_DSN"] = dsn
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.started = time.monotonic()
        self.late_verdict = "not tried"
        self.signed = 0

    def spawn(self) -> str:
        name = f"worker-{len(self.procs) + 1}"
        command = [sys.executable, *WORKER, "--concurrency", "4", "--grace", "2", "--name", name]
        with self.spawning():
            self.procs[name] = subprocess.Popen(command, env=self.env, stdin=subprocess.DEVNULL)
        return name

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:5.1f}s] {text}", flush=True)

    def until(self, what: str, check: Callable[[], object], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return True
            time.sleep(0.02)
        self.say(f"gave up waiting for {what}")
        return False

    def kill(self, owner: str | None) -> None:
        proc = self.procs.get(owner or "")
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.say(f"SIGKILL {owner}; started {self.spawn()} in its place")

    def jobs(self, state: str, tool: str) -> list[Job]:
        return self.app.sync.admin.jobs(state=state, tool=tool, limit=1000)

    def run(self) -> int:
        for _ in range(self.workers - len(self.procs)):
            self.spawn()
        ids = [
            self.app.sync.start_run(
                review,
                {"task": f"PR-{100 + i}", "seconds": 1.0, "tracker": self.tracker.url},
                idempotency_key=f"review:PR-{100 + i}",
            ).id
            for i in range(self.runs)
        ]
        self.say(
            f"started {len(ids)} review runs (develop → QA → correct → QA → SecOps → sign-off)"
        )

        # dispatch_pending: the worker dies right after QA's verdict committed.
        if self.until("a QA verdict", lambda: self.jobs("succeeded", "qa"), 30):
            verdict = self.jobs("succeeded", "qa")[0]
            self.kill(verdict.owner)
            run = self.app.sync.get_run(int(verdict.idempotency_key.split(":")[1]))
            after = [s for s in run.stages if s.job_id and s.job_id > verdict.id]
            self.say(
                f"QA's verdict for run {run.id} had committed together with its next step: "
                + ", ".join(
                    f"{s.name} (job {s.job_id}, {s.job.state if s.job else '-'})" for s in after
                )
            )

        # in_progress: the worker dies while it holds a gate; its verdict then comes too late.
        if self.until("a gate at work", self.gate_at_work, 30):
            held = self.gate_at_work()[0]
            self.kill(held.owner)
            run_id = int(held.idempotency_key.split(":")[1])
            self.until(
                "the gate to be taken over",
                lambda: self.app.sync.get(held.id).token != held.token,
                15,
            )
            try:
                self.app.sync.record_verdict(run_id, "qa", held.token, Verdict("approve"))
                self.late_verdict = "ACCEPTED (wrong)"
            except Conflict as exc:
                self.late_verdict = "refused with Conflict (409), nothing written"
                self.say(f"the killed gate's late verdict: Conflict: {exc}")

        self.sign_off(ids)
        self.until("every run to end", lambda: all(self.ended(i) for i in ids), DEADLINE)
        return self.report([self.app.sync.get_run(i) for i in ids])

    def sign_off(self, ids: list[int]) -> None:
        """Play the maintainer: each run's last gate waits at a waitpoint for a person."""
        if not self.until(
            "every run to wait for its sign-off",
            lambda: len(self.jobs("waiting", "signoff")) == len(ids),
            DEADLINE,
        ):
            return
        waiting = self.jobs("waiting", "signoff")
        running = self.jobs("running", "signoff")
        self.say(
            f"{len(waiting)} runs wait for a maintainer's sign-off: {len(running)} sign-off "
            "calls running, no lease held, no worker slot taken"
        )
        for job in waiting:
            run_id = int(job.idempotency_key.split(":")[1])
            self.app.sync.record_verdict(run_id, "signoff", job.token, Verdict("approve"))
            self.signed += 1
        self.say(f"the maintainer signed {self.signed} runs off (record_verdict, token-checked)")

    def gate_at_work(self) -> list[Job]:
        """QA jobs running on a worker that is still alive."""
        alive = {name for name, proc in self.procs.items() if proc.poll() is None}
        return [job for job in self.jobs("running", "qa") if job.owner in alive]

    def ended(self, run_id: int) -> bool:
        """The run is over and every gate status it decided was recorded at the tracker."""
        run = self.app.sync.get_run(run_id)
        return run.done and all(s.state != "open" for s in run.stages)

    def report(self, runs: list[Run]) -> int:
        stages = [s for run in runs for s in run.stages if s.kind == "stage"]
        outbox = [s for run in runs for s in run.stages if s.kind == "outbox"]
        verdicts = Counter(f"{s.name} {s.decision}" for s in stages if s.decision)
        delivered = sum(n for key, n in verdicts.items() if not key.startswith("signoff "))
        reruns = sum(s.job.attempt - 1 for s in stages if s.job is not None)
        summary = self.app.sync.admin.summary()
        recorded = sum(1 for s in outbox if s.state == "succeeded")
        applied, doubled = self.tracker.effects()
        lines = [
            ("runs succeeded", f"{sum(r.state == 'succeeded' for r in runs)} / {len(runs)}"),
            ("stage executions", len(stages)),
            ("verdicts", ", ".join(f"{k}: {v}" for k, v in sorted(verdicts.items()))),
            ("stage attempts repeated after a crash", reruns),
            ("gate statuses recorded at the tracker", f"{applied} for {len(outbox)} gate outcomes"),
            ("gate statuses recorded twice", doubled),
            ("late verdict of the killed gate", self.late_verdict),
            ("sign-offs given while the gate held nothing", self.signed),
            ("duplicates committed", summary.get("duplicate_commits", 0)),
        ]
        print("\n== tenure pipeline demo report ==")
        for label, value in lines:
            print(f"  {label:<44} {value}")
        ok = (
            all(r.state == "succeeded" for r in runs)
            and recorded == applied == len(outbox) == delivered
            and self.signed == len(runs)
            and doubled == 0
            and summary.get("duplicate_commits", 0) == 0
            and not self.late_verdict.startswith("ACCEPTED")
        )
        print("  verdict: " + ("no verdict lost, no step dispatched twice" if ok else "NOT OK"))
        return 0 if ok else 1

    def close(self) -> None:
        """SIGTERM every worker (their graceful stop), SIGKILL what is left after 10 s.
        Safe to call twice."""
        alive = [p for p in self.procs.values() if p.poll() is None]
        for proc in alive:
            proc.terminate()
        deadline = time.monotonic() + 10
        while any(p.poll() is None for p in alive) and time.monotonic() < deadline:
            time.sleep(0.05)
        for proc in alive:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.app.close()
