"""`tenure demo`: real workers, a SIGKILL and a SIGSTOP, and an honest report.

Starts the embedded PostgreSQL (or uses TENURE_DSN), creates a fresh
``tenure_demo`` database, runs worker processes of the demo app, kills one in
the middle of a call, pauses another past its lease, and reports what the
protocol did about it. The last line is the one that matters: duplicates
committed must be 0.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ._app import App
from ._dsn import child_environment, dsn_from_environment
from ._errors import ConfigError
from ._job import Job
from ._store import fresh_database, migrate
from .examples.case_service import effects_summary

DEMO_DB = "tenure_demo"
RECEIVER_DB = "tenure_demo_cases"
DEADLINE = 50.0
PIPELINE_DEMO_DB = "tenure_demo_pipeline"
TRACKER_DB = "tenure_demo_tracker"
TOOLS = ("fetch_statement", "create_case", "capture_payment")


class _Receiver:
    """The example case service as a real HTTP server on loopback, with its decision log."""

    def __init__(self, dsn: str, log: Path) -> None:
        self.dsn = dsn
        self.log = log
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tenure.examples.case_service",
                "--insecure",  # it listens on loopback, for the demo's own workers only
                "--dsn",
                dsn,
                "--port",
                "0",
            ],
            env={**os.environ, "RECEIVER_DECISION_LOG": str(log)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.close()
            raise ConfigError("the example case service did not start")

    def decisions(self) -> Counter[str]:
        if not self.log.exists():
            return Counter()
        lines = self.log.read_text(encoding="utf-8").splitlines()
        return Counter(json.loads(line)["decision"] for line in lines if line)

    def effects(self) -> tuple[int, int]:
        """(effects applied, idempotency keys applied more than once)."""
        return effects_summary(self.dsn)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class _Demo:
    worker_app = "tenure._demo_app:app"

    def __init__(self, dsn: str, receiver: _Receiver, jobs: int, workers: int) -> None:
        self.dsn = dsn
        self.receiver = receiver
        self.jobs = jobs
        self.env = child_environment(dsn, TENURE_DEMO_RECEIVER=receiver.url)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.started = time.monotonic()
        self.notes: list[str] = []
        for _ in range(workers):
            self.spawn()
        self.ops: App = self.producer()
        self.ops.set_dsn(dsn)

    def producer(self) -> App:
        from ._demo_app import app

        return app

    def spawn(self) -> str:
        name = f"worker-{len(self.procs) + 1}"
        self.procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tenure",
                "--log-level",
                "WARNING",
                "worker",
                self.worker_app,
                "--concurrency",
                "4",
                "--grace",
                "2",
                "--name",
                name,
            ],
            env=self.env,
            stdin=subprocess.DEVNULL,
        )
        return name

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:5.1f}s] {text}", flush=True)

    def running_on(self, name: str) -> list[int]:
        return [j.id for j in self.ops.list_jobs_sync(state="running") if j.owner == name]

    def poll(self, what: str, check: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        last = 0.0
        while time.monotonic() < deadline:
            if check():
                return True
            if time.monotonic() - last >= 1.0:
                last = time.monotonic()
                self.progress()
            time.sleep(0.05)
        self.say(f"gave up waiting for {what}")
        return False

    def progress(self) -> None:
        counts = self.ops.summary_sync()
        self.say(
            "queued {q:>3}  running {r:>3}  succeeded {s:>3}  failed {f:>3}  reclaims {rc}".format(
                q=counts.get("jobs_queued", 0),
                r=counts.get("jobs_running", 0),
                s=counts.get("jobs_succeeded", 0),
                f=counts.get("jobs_failed", 0),
                rc=counts.get("reclaims", 0),
            )
        )

    def run(self) -> int:
        rng = random.Random(7)  # noqa: S311 - a reproducible demo, not a secret
        for i in range(self.jobs):
            tool = TOOLS[i % 3]
            seconds = rng.uniform(1.0, 2.5)
            payload: dict[str, object] = {
                "fetch_statement": {"invoice_id": f"inv-{1000 + i}", "seconds": seconds},
                "create_case": {"customer_id": f"c-{1000 + i}", "seconds": seconds},
                "capture_payment": {"payment_id": f"pay-{i}", "seconds": seconds},
            }[tool]
            self.ops.enqueue_sync(tool, payload, idempotency_key=f"demo:{tool}:{i}")
        self.say(f"enqueued {self.jobs} tool calls; {len(self.procs)} workers running")

        victim = "worker-1"
        if self.poll(f"{victim} to hold a call", lambda: bool(self.running_on(victim)), 15):
            held = self.running_on(victim)
            self.procs[victim].send_signal(signal.SIGKILL)
            self.say(f"SIGKILL {victim} in the middle of jobs {held}")
            self.say(f"started {self.spawn()} to take over")

        sleeper = "worker-2"
        if self.poll(f"{sleeper} to hold a call", lambda: bool(self.running_on(sleeper)), 15):
            held = self.running_on(sleeper)
            self.procs[sleeper].send_signal(signal.SIGSTOP)
            self.say(f"SIGSTOP {sleeper} while it holds jobs {held} (lease 2.0 s)")
            self.poll(
                "its jobs to be reclaimed",
                lambda: all(self.ops.get_sync(j).owner != sleeper for j in held),
                15,
            )
            self.procs[sleeper].send_signal(signal.SIGCONT)
            self.say(f"SIGCONT {sleeper}: its heartbeats and commits are now stale")

        self.poll("every job to finish", self.all_done, DEADLINE)
        self.progress()
        return self.report()

    def all_done(self) -> bool:
        counts = self.ops.summary_sync()
        return counts.get("jobs_queued", 0) + counts.get("jobs_running", 0) == 0

    def report(self) -> int:
        counts = self.ops.summary_sync()
        lines = [
            ("jobs succeeded", f"{counts.get('jobs_succeeded', 0)} / {self.jobs}"),
            ("jobs failed", counts.get("jobs_failed", 0)),
            ("attempts used", counts.get("attempts", 0)),
            ("reclaims after a lost lease", counts.get("reclaims", 0)),
            ("stale owners stopped by zero-row heartbeat", counts.get("events_heartbeat_lost", 0)),
            ("stale commits rejected", counts.get("events_result_rejected", 0)),
            ("duplicates committed", counts.get("duplicate_commits", 0)),
        ]
        decisions = self.receiver.decisions()
        applied, doubled = self.receiver.effects()
        lines += [
            ("requests that reached the receiver", sum(decisions.values())),
            ("side effects applied", f"{applied} (one per create_case/capture_payment job)"),
            ("stale requests rejected by the fence", decisions.get("stale", 0)),
            ("repeated requests replayed, not reapplied", decisions.get("replayed", 0)),
            ("duplicate side effects applied", doubled),
        ]
        effect_jobs = sum(1 for i in range(self.jobs) if TOOLS[i % 3] != "fetch_statement")
        print("\n== tenure demo report ==")
        for label, value in lines:
            print(f"  {label:<44} {value}")
        ok = (
            counts.get("duplicate_commits", 0) == 0
            and counts.get("jobs_succeeded") == self.jobs
            and doubled == 0
            and applied == effect_jobs
        )
        print(
            "  verdict: "
            + ("every call committed once, every side effect applied once" if ok else "NOT OK")
        )
        return 0 if ok else 1

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.ops.close()


def run_demo(
    *, jobs: int = 24, workers: int = 3, linger: float = 0.0, dsn: str | None = None
) -> int:
    if not 1 <= jobs <= 1000 or not 2 <= workers <= 16:
        print("tenure: error: demo needs 1-1000 jobs and 2-16 workers", file=sys.stderr)
        return 2
    from ._observe._dashboard import serve_dashboard

    with contextlib.ExitStack() as cleanup:
        dsn, receiver, _ = _setting(cleanup, dsn, DEMO_DB, RECEIVER_DB, "receiver")
        dashboard = serve_dashboard(dsn, poll_interval=0.5)  # loopback, free port, read-only
        cleanup.callback(dashboard.stop)
        print(f"dashboard (live while the demo runs): {dashboard.url}", flush=True)
        demo = _Demo(dsn, receiver, jobs, workers)
        try:
            return demo.run()
        finally:
            demo.close()
            if linger > 0:  # let a human look at the dashboard after the report
                print(f"dashboard stays up for {linger:g} s at {dashboard.url}", flush=True)
                time.sleep(linger)
    return 1  # unreachable; mypy cannot see that ExitStack does not swallow


def run_pipeline_demo(*, runs: int = 6, workers: int = 3, dsn: str | None = None) -> int:
    """`tenure demo --pipeline`: the review pipeline (tenure.examples.review) under SIGKILL.

    The pipeline and the demo live in tenure.examples.review(_demo); this sets up
    their database and tracker (the example case service) and cleans up after.
    """
    if not 1 <= runs <= 200 or not 2 <= workers <= 16:
        print("tenure: error: the pipeline demo needs 1-200 runs and 2-16 workers", file=sys.stderr)
        return 2
    from .examples.review_demo import ReviewDemo

    with contextlib.ExitStack() as cleanup:
        dsn, tracker, _ = _setting(cleanup, dsn, PIPELINE_DEMO_DB, TRACKER_DB, "tracker")
        demo = ReviewDemo(dsn, tracker, runs, workers)
        cleanup.callback(demo.close)
        return demo.run()
    return 1  # unreachable; mypy cannot see that ExitStack does not swallow


def _setting(
    cleanup: contextlib.ExitStack,
    server_dsn: str | None,
    database: str,
    receiver_database: str,
    role: str,
) -> tuple[str, _Receiver, Path]:
    """A fresh migrated ``database`` (on the given server, else TENURE_DSN's, else an
    embedded one), the example case service on a fresh ``receiver_database``, and a
    scratch directory; all cleaned up with ``cleanup``."""
    server_dsn = server_dsn or dsn_from_environment()
    if not server_dsn:
        from ._embedded import EmbeddedPostgres

        embedded = EmbeddedPostgres()
        cleanup.callback(embedded.stop)
        server_dsn = embedded.start()
        print(f"embedded PostgreSQL started ({server_dsn})", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="tenure-demo-"))
    cleanup.callback(shutil.rmtree, scratch, ignore_errors=True)
    dsn = fresh_database(server_dsn, database)
    migrate(dsn)
    receiver = _Receiver(fresh_database(server_dsn, receiver_database), scratch / "decisions.jsonl")
    cleanup.callback(receiver.close)
    print(f"{role} (example case service) listening at {receiver.url}", flush=True)
    return dsn, receiver, scratch


def run_agent_demo(*, workers: int = 3, dsn: str | None = None) -> int:
    """`tenure demo --agent`: the durable pydantic-ai agent of tenure.examples.agent, its
    run's worker SIGKILLed in the middle of the run and its tool's in the middle of the
    call; needs the pydantic-ai extra."""
    if not 2 <= workers <= 16:
        print("tenure: error: the agent demo needs 2-16 workers", file=sys.stderr)
        return 2
    if importlib.util.find_spec("pydantic_ai") is None:
        print(
            "tenure: error: demo --agent needs: pip install 'tenure[pydantic-ai]'", file=sys.stderr
        )
        return 2
    with contextlib.ExitStack() as cleanup:
        dsn, receiver, scratch = _setting(cleanup, dsn, DEMO_DB, RECEIVER_DB, "receiver")
        demo = _AgentDemo(dsn, receiver, scratch / "model-calls.txt", workers)
        cleanup.callback(demo.close)
        return demo.run()
    return 1  # unreachable; mypy cannot see that ExitStack does not swallow


class _AgentDemo(_Demo):
    """The demo's workers and receiver, running the durable agent twice: once left alone,
    once with its run's worker SIGKILLed in the middle of the run (a function tool under
    way) and the worker of its tool's child job SIGKILLed in the middle of the call."""

    worker_app = "tenure._demo_agent_app:app"
    PROMPT = "Customer c-4711 reports an invoice discrepancy."

    def __init__(self, dsn: str, receiver: _Receiver, answers: Path, workers: int) -> None:
        self.answers_file = answers
        super().__init__(dsn, receiver, 0, workers)
        self.killed: list[str] = []

    def producer(self) -> App:
        from ._demo_agent_app import app

        return app

    def spawn(self) -> str:
        self.env["TENURE_DEMO_NOTES"] = str(self.answers_file)  # the model notes its answers
        return super().spawn()

    def model_answers(self, job: Job) -> int:
        if not self.answers_file.exists():
            return 0
        lines = self.answers_file.read_text(encoding="utf-8").splitlines()
        return sum(1 for line in lines if line.split()[1:2] == [str(job.id)])

    def model_steps(self, job: Job) -> int:
        return sum(
            1
            for e in self.ops.events_sync(job.id)
            if e["kind"] == "step_recorded" and e["detail"].get("kind") == "model"
        )

    def children(self, job: Job) -> list[Job]:
        return [
            j
            for j in self.ops.list_jobs_sync(tool="create_case")
            if j.idempotency_key.startswith(f"tool-job:{job.id}:")
        ]

    def reading(self, job: Job) -> bool:
        """The run holds its lease with its first model step done: read_invoice is under way."""
        now = self.ops.get_sync(job.id)
        steps = {e["detail"].get("step") for e in self.ops.events_sync(job.id)}
        return now.state == "running" and "model.1" in steps and "tool.1.0" not in steps

    def kill(self, owner: str | None, what: str) -> None:
        if owner in self.procs and self.procs[owner].poll() is None:
            self.procs[owner].send_signal(signal.SIGKILL)
            self.killed.append(owner)
            self.say(f"SIGKILL {owner} {what}")
            self.say(f"started {self.spawn()}")

    def run(self) -> int:
        self.say("run 1 (left alone): the agent is asked about an invoice")
        alone = self.ops.enqueue_sync(
            "agent:desk", {"prompt": self.PROMPT}, idempotency_key="demo:alone"
        )
        self.poll("run 1 to end", lambda: self.ops.get_sync(alone.id).done, DEADLINE)
        self.say("run 2: the same question; its workers will be killed")
        run = self.ops.enqueue_sync(
            "agent:desk", {"prompt": self.PROMPT}, idempotency_key="demo:interrupted"
        )
        if self.poll("run 2 to be reading the invoice", lambda: self.reading(run), 20):
            owner = self.ops.get_sync(run.id).owner
            self.kill(owner, f"in the middle of run 2 (job {run.id}, read_invoice under way)")

        def running() -> list[Job]:
            return [c for c in self.children(run) if c.state == "running"]

        if self.poll("run 2's create_case to be under way", lambda: bool(running()), DEADLINE):
            child = running()[0]
            self.kill(child.owner, f"in the middle of create_case (job {child.id})")
        self.poll("run 2 to end", lambda: self.ops.get_sync(run.id).done, DEADLINE)
        return self.report_runs(self.ops.get_sync(alone.id), self.ops.get_sync(run.id))

    def report_runs(self, alone: Job, run: Job) -> int:
        children = self.children(run)
        applied, doubled = self.receiver.effects()
        answers, steps = self.model_answers(run), self.model_steps(run)
        jobs = ", ".join(f"{c.state}, attempt {c.attempt}" for c in children)
        lines = [
            ("run 1 (left alone) answered", alone.result),
            ("run 2 (workers killed) answered", run.result),
            ("workers SIGKILLed during run 2", ", ".join(self.killed) or "none"),
            ("run 2: model calls / model steps", f"{answers} / {steps}"),
            ("run 2: create_case jobs", f"{len(children)} ({jobs})"),
            ("cases the receiver opened (2 runs)", applied),
            ("duplicate side effects applied", doubled),
        ]
        print("\n== tenure demo --agent report ==")
        for label, value in lines:
            print(f"  {label:<38} {value}")
        ok = (
            alone.state == run.state == "succeeded"
            and run.result == alone.result
            and answers == steps == 3
            and len(children) == 1
            and children[0].state == "succeeded"
            and applied == 2
            and doubled == 0
            and len(self.killed) == 2
        )
        print(
            "  verdict: "
            + (
                "model calls = steps, one effect per tool call, the same answer as the run "
                "left alone"
                if ok
                else "NOT OK"
            )
        )
        return 0 if ok else 1
