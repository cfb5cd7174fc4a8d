"""`tenure demo`: real workers, a SIGKILL and three SIGSTOPs, and an honest report.

Starts the embedded PostgreSQL (or uses TENURE_DSN), creates a fresh
``tenure_demo`` database, runs worker processes of the demo app, kills one in
the middle of a call, then makes the three worst moments happen once each: a
worker frozen (SIGSTOP) past its lease wakes in the middle of its call, before
its request leaves, and before its commit. The report counts what the protocol
did about each, by owner (a job under one token), and names nothing it did not
make happen; the line that matters most: duplicates committed must be 0.

Every variant (``--pipeline``, ``--agent``) serves the dashboard while it runs
and honours ``--linger``; flags of another variant are refused. However the
demo ends (its report, an error, Ctrl-C, SIGTERM, SIGHUP), it stops every
process it started: workers, the example case service, the dashboard and the
embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
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
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from ._app import App, fresh_database
from ._dsn import child_environment, dsn_from_environment
from ._errors import ConfigError
from ._job import Job
from .examples.case_service import effects_summary

FROZEN = {  # where a staged freeze stops a worker (see _demo_workers)
    "at_start": "at the start of",
    "before_request": "after its last ownership check, before the request of",
    "before_commit": "with its work done, before the commit of",
}
DEFAULT_JOBS = 24
DEFAULT_RUNS = 6
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
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
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> None:
        """Start the service and read the URL it prints once it listens."""
        command = [
            sys.executable,
            "-m",
            "tenure.examples.case_service",
            "--insecure",  # it listens on loopback, for the demo's own workers only
            "--dsn",
            self.dsn,
            "--port",
            "0",
        ]
        with _ENDING.held():  # started and known to `close`, or neither
            self.proc = subprocess.Popen(
                command,
                env={**os.environ, "RECEIVER_DECISION_LOG": str(self.log)},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                text=True,
            )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            raise ConfigError("the example case service did not start")

    def entries(self) -> list[dict[str, Any]]:
        """Every fence decision logged so far (a line still being written is skipped)."""
        if not self.log.exists():
            return []
        found = []
        for line in self.log.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
        return found

    def decisions(self) -> Counter[str]:
        return Counter(entry["decision"] for entry in self.entries())

    def decided(self, decision: str, token: int) -> bool:
        """Whether a request under ``token`` got ``decision`` (accepted, stale, ...)."""
        return any(e["decision"] == decision and e["token"] == token for e in self.entries())

    def effects(self) -> tuple[int, int]:
        """(effects applied, idempotency keys applied more than once)."""
        return effects_summary(self.dsn)

    def close(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class _Demo:
    """The demo's worker processes, the batch with its SIGKILL, the three staged moments,
    and the report. Nothing starts before `start`, so whoever made it can register
    `close` first: a signal while the workers start leaves none behind."""

    worker_app = "tenure._demo_workers:app"

    def __init__(self, dsn: str, receiver: _Receiver, jobs: int, workers: int) -> None:
        self.dsn = dsn
        self.receiver = receiver
        self.jobs = jobs
        self.workers = workers
        self.env = child_environment(dsn, TENURE_DEMO_RECEIVER=receiver.url)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.started = time.monotonic()
        self.extra_jobs = 0  # the staged moments' own jobs
        self.extra_effects = 0  # and how many of them apply a side effect
        self.ops: App = self.producer()
        self.ops.set_dsn(dsn)
        self._closed = False

    def producer(self) -> App:
        from ._demo_workers import app

        return app

    def start(self) -> None:
        for _ in range(self.workers):
            self.spawn()

    def spawn(self) -> str:
        name = f"worker-{len(self.procs) + 1}"
        command = [
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
        ]
        with _ENDING.held():  # started and registered, or neither
            self.procs[name] = subprocess.Popen(command, env=self.env, stdin=subprocess.DEVNULL)
        return name

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:5.1f}s] {text}", flush=True)

    def running_on(self, name: str) -> list[int]:
        return [j.id for j in self.ops.sync.admin.jobs(state="running") if j.owner == name]

    def poll(
        self, what: str, check: Callable[[], bool], timeout: float, quiet: bool = False
    ) -> bool:
        deadline = time.monotonic() + timeout
        last = 0.0
        while time.monotonic() < deadline:
            if check():
                return True
            if not quiet and time.monotonic() - last >= 1.0:
                last = time.monotonic()
                self.progress()
            time.sleep(0.05)
        self.say(f"gave up waiting for {what}")
        return False

    def progress(self) -> None:
        counts = self.ops.sync.admin.summary()
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
            self.ops.sync.enqueue(tool, payload, idempotency_key=f"demo:{tool}:{i}")
        self.say(f"enqueued {self.jobs} tool calls; {len(self.procs)} workers running")

        held: list[Job] = []

        def holding() -> bool:
            held[:] = self.held()
            return bool(held)

        if self.poll("a worker to hold a call", holding, 15):
            victim = held[0].owner or ""
            self.procs[victim].send_signal(signal.SIGKILL)
            self.say(f"SIGKILL {victim} in the middle of jobs {self.running_on(victim)}")
            self.say(f"started {self.spawn()} to take over once their leases expire")
        self.poll("every job to finish", self.all_done, DEADLINE)
        self.progress()

        self.say("now the three worst moments for a lease, each made to happen once:")
        self.stale_owner()
        self.stale_request()
        self.stale_commit()
        self.poll("every job to finish", self.all_done, DEADLINE)
        return self.report()

    def held(self) -> list[Job]:
        """Calls running on a worker the demo started and has not killed."""
        alive = {name for name, proc in self.procs.items() if proc.poll() is None}
        return [j for j in self.ops.sync.admin.jobs(state="running") if j.owner in alive]

    def frozen(self, tool: str, payload: dict[str, object], where: str) -> Job | None:
        """Enqueue one call whose first attempt freezes its worker (SIGSTOP) at ``where``;
        wait until another worker has taken its lease over; the first attempt's job row
        (its owner and token), or None when that did not happen in time."""
        self.extra_jobs += 1
        self.extra_effects += tool != "fetch_statement"
        key = f"demo:staged:{self.extra_jobs}"
        job = self.ops.sync.enqueue(tool, {**payload, "freeze": where}, idempotency_key=key)
        first: list[Job] = []

        def claimed() -> bool:
            row = self.ops.sync.get(job.id)
            first[:] = [row] if row.state == "running" and row.owner else []
            return bool(first)

        if not self.poll(f"job {job.id} to be claimed", claimed, 15, quiet=True):
            return None
        old = first[0]
        self.say(
            f"{old.owner} froze (SIGSTOP, as a long GC pause would) {FROZEN[where]} job "
            f"{job.id} ({tool}, token {old.token}): no heartbeat, its lease runs out"
        )
        if not self.poll(
            f"job {job.id} to be taken over",
            lambda: self.ops.sync.get(job.id).token != old.token,
            15,
            quiet=True,
        ):
            return None
        new = self.ops.sync.get(job.id)
        self.say(f"{new.owner} took job {job.id} over with token {new.token}")
        return old

    def resume(self, job: Job) -> None:
        proc = self.procs[job.owner or ""]
        proc.send_signal(signal.SIGCONT)
        self.say(f"SIGCONT {job.owner}: it goes on where it froze, under token {job.token}")

    def journaled(self, job: Job, kind: str) -> bool:
        return any(
            e["kind"] == kind and e["token"] == job.token
            for e in self.ops.sync.admin.events(job.id)
        )

    def stale_owner(self) -> None:
        """Frozen at the start of its call: on waking, its lease is known lost (the
        deadline passed; a heartbeat would match zero rows) and the call stops there."""
        old = self.frozen("fetch_statement", {"invoice_id": "inv-900", "seconds": 1.0}, "at_start")
        if old is None:
            return
        self.resume(old)
        if self.poll(
            "the stale owner to stop", lambda: self.journaled(old, "heartbeat_lost"), 15, True
        ):
            self.say(f"{old.owner} found its lease lost and stopped the call: nothing written")

    def stale_request(self) -> None:
        """Frozen after its last ownership check, before its request left: the new owner's
        request is accepted first, then the stale one arrives with the older token."""
        payload = {"payment_id": "pay-900", "seconds": 0.2}
        old = self.frozen("capture_payment", payload, "before_request")
        if old is None:
            return
        new = self.ops.sync.get(old.id)
        if not self.poll(
            "the new owner's request",
            lambda: self.receiver.decided("accepted", new.token),
            15,
            quiet=True,
        ):
            return
        self.say(f"the case service applied {new.owner}'s capture (token {new.token})")
        self.resume(old)
        if self.poll(
            "the stale request", lambda: self.receiver.decided("stale", old.token), 15, True
        ):
            self.say(
                f"its request arrived with token {old.token} < {new.token}: the case service "
                "refused it (409, stale fence); the payment was captured once"
            )

    def stale_commit(self) -> None:
        """Frozen with its work done and its commit not yet sent: the new owner commits
        first; the stale commit matches zero rows and is rejected, never published."""
        old = self.frozen("create_case", {"customer_id": "c-900", "seconds": 0.2}, "before_commit")
        if old is None:
            return
        if not self.poll(
            "the new owner's commit",
            lambda: self.ops.sync.get(old.id).state == "succeeded",
            15,
            quiet=True,
        ):
            return
        new = self.ops.sync.get(old.id)
        if self.receiver.decided("replayed", new.token):
            self.say(
                f"{new.owner}'s request was replayed by the case service (the stale owner's "
                "had been applied), and it committed"
            )
        self.resume(old)
        if self.poll(
            "the stale commit", lambda: self.journaled(old, "result_rejected"), 15, quiet=True
        ):
            self.say(
                f"its commit under token {old.token} matched zero rows: rejected, not published"
            )

    def all_done(self) -> bool:
        counts = self.ops.sync.admin.summary()
        return counts.get("jobs_queued", 0) + counts.get("jobs_running", 0) == 0

    def report(self) -> int:
        counts = self.ops.sync.admin.summary()
        jobs = self.jobs + self.extra_jobs
        protections = [
            ("reclaims after a lost lease", counts.get("reclaims", 0)),
            ("stale owners stopped, their lease lost", counts.get("owners_heartbeat_lost", 0)),
            ("stale commits rejected", counts.get("owners_result_rejected", 0)),
        ]
        lines: list[tuple[str, object]] = [
            ("jobs succeeded", f"{counts.get('jobs_succeeded', 0)} / {jobs}"),
            ("jobs failed", counts.get("jobs_failed", 0)),
            ("attempts used", counts.get("attempts", 0)),
            *protections,
            ("duplicates committed", counts.get("duplicate_commits", 0)),
        ]
        decisions = self.receiver.decisions()
        applied, doubled = self.receiver.effects()
        fenced = [
            ("stale requests rejected by the fence", decisions.get("stale", 0)),
            ("repeated requests replayed, not reapplied", decisions.get("replayed", 0)),
        ]
        lines += [
            ("requests that reached the receiver", sum(decisions.values())),
            ("side effects applied", f"{applied} (one per create_case/capture_payment job)"),
            *fenced,
            ("duplicate side effects applied", doubled),
        ]
        effect_jobs = sum(1 for i in range(self.jobs) if TOOLS[i % 3] != "fetch_statement")
        print("\n== tenure demo report ==")
        print("  (owners: a job under one token; each protection below happened in this run)")
        for label, value in lines:
            print(f"  {label:<44} {value}")
        missing = [label for label, value in (*protections, *fenced) if not value]
        ok = (
            counts.get("duplicate_commits", 0) == 0
            and counts.get("jobs_succeeded") == jobs
            and doubled == 0
            and applied == effect_jobs + self.extra_effects
            and not missing
        )
        if missing:
            print(f"  not shown this run: {', '.join(missing)}")
        print(
            "  verdict: "
            + ("every call committed once, every side effect applied once" if ok else "NOT OK")
        )
        return 0 if ok else 1

    def close(self) -> None:
        """Stop every worker (a frozen one is continued first), SIGKILL after 10 s; once."""
        if self._closed:
            return
        self._closed = True
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


class _Ending:
    """SIGTERM and SIGHUP end the demo as Ctrl-C does: through every cleanup, so every
    process it started is stopped (the default action would end this process alone and
    leave the workers, the case service and PostgreSQL running).

    The first such signal raises SystemExit(128 + signal); from then on they are
    ignored, so the cleanup it starts runs to its end. Inside `held()` (a process
    started and not yet registered for cleanup) the signal waits for the block's end.
    """

    def __init__(self) -> None:
        self._holding = 0
        self._pending: int | None = None
        self._ended = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers belong to the main thread; a test's thread has none
            return
        previous = {number: signal.getsignal(number) for number in ENDING_SIGNALS}
        self._pending, self._ended = None, False
        for number in ENDING_SIGNALS:
            signal.signal(number, self._caught)
        try:
            yield
        finally:
            self._ended = True  # the cleanup has run; nothing is left to interrupt
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _caught(self, number: int, frame: FrameType | None) -> None:
        if self._ended:
            return
        if self._holding:
            self._pending = number
            return
        self._end(number)

    def _end(self, number: int) -> None:
        self._ended = True
        # os.write, not print: the signal may have interrupted a print of the main thread.
        name = signal.Signals(number).name
        os.write(2, f"\n{name}: stopping everything the demo started\n".encode())
        raise SystemExit(128 + number)

    def shield(self) -> None:
        """The cleanup starts: a signal from now on must not cut it short."""
        self._ended = True

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding and self._pending is not None and not self._ended:
                self._end(self._pending)


_ENDING = _Ending()


def demo_command(args: argparse.Namespace) -> int:
    """`tenure demo [--pipeline | --agent]`: each variant honours the flags it lists in
    ``--help`` (``--workers``, ``--linger``, its own ``--jobs`` or ``--runs``) and refuses
    another variant's, rather than ignore them."""
    variant = "--agent" if args.agent else "--pipeline" if args.pipeline else None
    own = {None: "--jobs", "--pipeline": "--runs", "--agent": None}[variant]
    for flag, given in (("--jobs", args.jobs), ("--runs", args.runs)):
        if given is not None and flag != own:
            where = f"with {variant}" if variant else "without --pipeline"
            print(f"tenure: error: demo: {flag} has no meaning {where}", file=sys.stderr)
            return 2
    with _ENDING.installed():
        if args.agent:
            return run_agent_demo(workers=args.workers, linger=args.linger, dsn=args.dsn)
        if args.pipeline:
            runs = DEFAULT_RUNS if args.runs is None else args.runs
            return run_pipeline_demo(
                runs=runs, workers=args.workers, linger=args.linger, dsn=args.dsn
            )
        jobs = DEFAULT_JOBS if args.jobs is None else args.jobs
        return run_demo(jobs=jobs, workers=args.workers, linger=args.linger, dsn=args.dsn)


@contextlib.contextmanager
def _cleanup() -> Iterator[contextlib.ExitStack]:
    """An ExitStack that stops what the demo started, in reverse, however the demo ends;
    once it unwinds, a signal can no longer cut it short."""
    with contextlib.ExitStack() as stack:
        try:
            yield stack
        finally:
            _ENDING.shield()


def _dashboard(cleanup: contextlib.ExitStack, dsn: str, page: str = "") -> str:
    """The dashboard on a free loopback port, read-only, for as long as the demo runs;
    its URL (at ``page``)."""
    from ._dashboard._dashboard import serve_dashboard

    dashboard = serve_dashboard(dsn, poll_interval=0.5)
    cleanup.callback(dashboard.stop)
    url = dashboard.url + page
    print(f"dashboard (live while the demo runs): {url}", flush=True)
    return url


def _linger(url: str, seconds: float) -> None:
    if seconds > 0:  # let a human look at the dashboard after the report
        print(f"dashboard stays up for {seconds:g} s at {url} (Ctrl-C ends it)", flush=True)
        time.sleep(seconds)


def run_demo(
    *, jobs: int = DEFAULT_JOBS, workers: int = 3, linger: float = 0.0, dsn: str | None = None
) -> int:
    if not 1 <= jobs <= 1000 or not 2 <= workers <= 16:
        print("tenure: error: demo needs 1-1000 jobs and 2-16 workers", file=sys.stderr)
        return 2
    with _cleanup() as cleanup:
        dsn, receiver, _ = _setting(cleanup, dsn, DEMO_DB, RECEIVER_DB, "receiver")
        url = _dashboard(cleanup, dsn)
        demo = _Demo(dsn, receiver, jobs, workers)
        cleanup.callback(demo.close)
        demo.start()
        code = demo.run()
        demo.close()  # the workers go; the dashboard, the receiver and the database stay
        _linger(url, linger)
        return code
    return 1  # unreachable; mypy cannot see that ExitStack does not swallow


def run_pipeline_demo(
    *, runs: int = DEFAULT_RUNS, workers: int = 3, linger: float = 0.0, dsn: str | None = None
) -> int:
    """`tenure demo --pipeline`: the review pipeline (tenure.examples.review) under SIGKILL.

    The pipeline and the demo live in tenure.examples.review(_demo); this sets up
    their database, tracker (the example case service) and dashboard, and cleans up after.
    """
    if not 1 <= runs <= 200 or not 2 <= workers <= 16:
        print("tenure: error: the pipeline demo needs 1-200 runs and 2-16 workers", file=sys.stderr)
        return 2
    from .examples.review_sigkill import ReviewDemo

    with _cleanup() as cleanup:
        dsn, tracker, _ = _setting(cleanup, dsn, PIPELINE_DEMO_DB, TRACKER_DB, "tracker")
        url = _dashboard(cleanup, dsn, "/pipelines")
        demo = ReviewDemo(dsn, tracker, runs, workers, spawning=_ENDING.held)
        cleanup.callback(demo.close)
        code = demo.run()
        demo.close()
        _linger(url, linger)
        return code
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
        cleanup.callback(embedded.stop)  # a server another process runs is only let go
        server_dsn = embedded.use()  # a worker's running embedded server, else a new one
        started = "in use" if embedded.borrowed is not None else "started"
        print(f"embedded PostgreSQL {started} ({server_dsn})", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="tenure-demo-"))
    cleanup.callback(shutil.rmtree, scratch, ignore_errors=True)
    dsn = fresh_database(server_dsn, database)
    ops = App(dsn, migrate=False)
    try:
        ops.sync.admin.migrate()
    finally:
        ops.close()
    receiver = _Receiver(fresh_database(server_dsn, receiver_database), scratch / "decisions.jsonl")
    cleanup.callback(receiver.close)
    receiver.start()
    print(f"{role} (example case service) listening at {receiver.url}", flush=True)
    return dsn, receiver, scratch


def run_agent_demo(*, workers: int = 3, linger: float = 0.0, dsn: str | None = None) -> int:
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
    with _cleanup() as cleanup:
        dsn, receiver, scratch = _setting(cleanup, dsn, DEMO_DB, RECEIVER_DB, "receiver")
        url = _dashboard(cleanup, dsn)
        demo = _AgentDemo(dsn, receiver, scratch / "model-calls.txt", workers)
        cleanup.callback(demo.close)
        demo.start()
        code = demo.run()
        demo.close()
        _linger(url, linger)
        return code
    return 1  # unreachable; mypy cannot see that ExitStack does not swallow


class _AgentDemo(_Demo):
    """The demo's workers and receiver, running the durable agent twice: once left alone,
    once with its run's worker SIGKILLed in the middle of the run (a function tool under
    way) and the worker of its tool's child job SIGKILLed in the middle of the call."""

    worker_app = "tenure._demo_agent_workers:app"
    PROMPT = "Customer c-4711 reports an invoice discrepancy."

    def __init__(self, dsn: str, receiver: _Receiver, answers: Path, workers: int) -> None:
        self.answers_file = answers
        super().__init__(dsn, receiver, 0, workers)
        self.killed: list[str] = []

    def producer(self) -> App:
        from ._demo_agent_workers import app

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
            for e in self.ops.sync.admin.events(job.id)
            if e["kind"] == "step_recorded" and e["detail"].get("kind") == "model"
        )

    def children(self, job: Job) -> list[Job]:
        return [
            j
            for j in self.ops.sync.admin.jobs(tool="create_case")
            if j.idempotency_key.startswith(f"tool-job:{job.id}:")
        ]

    def reading(self, job: Job) -> bool:
        """The run holds its lease with its first model step done: read_invoice is under way."""
        now = self.ops.sync.get(job.id)
        steps = {e["detail"].get("step") for e in self.ops.sync.admin.events(job.id)}
        return now.state == "running" and "model.1" in steps and "tool.1.0" not in steps

    def kill(self, owner: str | None, what: str) -> None:
        if owner in self.procs and self.procs[owner].poll() is None:
            self.procs[owner].send_signal(signal.SIGKILL)
            self.killed.append(owner)
            self.say(f"SIGKILL {owner} {what}")
            self.say(f"started {self.spawn()}")

    def run(self) -> int:
        self.say("run 1 (left alone): the agent is asked about an invoice")
        alone = self.ops.sync.enqueue(
            "agent:desk", {"prompt": self.PROMPT}, idempotency_key="demo:alone"
        )
        self.poll("run 1 to end", lambda: self.ops.sync.get(alone.id).done, DEADLINE)
        self.say("run 2: the same question; its workers will be killed")
        run = self.ops.sync.enqueue(
            "agent:desk", {"prompt": self.PROMPT}, idempotency_key="demo:interrupted"
        )
        if self.poll("run 2 to be reading the invoice", lambda: self.reading(run), 20):
            owner = self.ops.sync.get(run.id).owner
            self.kill(owner, f"in the middle of run 2 (job {run.id}, read_invoice under way)")

        def running() -> list[Job]:
            return [c for c in self.children(run) if c.state == "running"]

        if self.poll("run 2's create_case to be under way", lambda: bool(running()), DEADLINE):
            child = running()[0]
            self.kill(child.owner, f"in the middle of create_case (job {child.id})")
        self.poll("run 2 to end", lambda: self.ops.sync.get(run.id).done, DEADLINE)
        return self.report_runs(self.ops.sync.get(alone.id), self.ops.sync.get(run.id))

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
