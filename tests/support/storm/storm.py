"""Storms: many jobs, several workers, one nemesis, then the checker's verdict.

A storm starts the example receiver and N workers (each optionally behind its
own proxy and under ``faketime``), feeds jobs at a steady pace while a nemesis
breaks things for a fixed window, heals everything, waits for the queue to
drain, and judges the evidence with `check`. The same engine runs the quick
storms of the test suite and the long soaks of ``bench/soak``.

Nemeses (each records the faults it injected, with the evidence that they fired):

`crash`      SIGKILL a random worker every ``interval`` seconds, start a replacement;
`pause`      SIGSTOP a random worker for 0.5-3 leases, then SIGCONT;
`network`    cycle the workers' database links through reset, blackhole, lost
             responses and a delay beyond a third of the lease;
`restarts`   restart the run's own PostgreSQL (``immediate`` and ``fast``);
`skew`       nothing at run time: the workers were started under ``faketime``;
             it pauses the skewed workers now and then, so that their leases
             are lost and judged under their own clocks.
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tenure._chaos._harness import wait_for
from tenure._chaos._history import read_history
from tenure._errors import StoreError

from .checker import Evidence, Fault, Report, check
from .harness import (
    ReceiverProcess,
    StormSupervisor,
    all_terminal,
    clock_offset,
    faketime_env,
    read_effects,
    read_tenure,
    unfinished,
    uptime_offset,
)

TOOL = "storm_call"
DEFAULT_APP = "tests.apps.storm_app:app"


class Restartable(Protocol):
    """A PostgreSQL server the storm owns (tenure's EmbeddedPostgres fits)."""

    @property
    def pid(self) -> int | None: ...

    def restart(self, mode: Any = "fast") -> None: ...


@dataclass
class StormPlan:
    """What one storm does. Durations in seconds; ``lease`` must be the app's."""

    name: str
    nemesis: str
    jobs: int = 400
    workers: int = 4
    concurrency: int = 8
    enqueue_seconds: float = 12.0
    fault_seconds: float = 14.0
    work: tuple[float, float] = (0.05, 0.4)
    long_share: float = 0.05
    long_work: float = 4.0
    lease: float = 3.0
    poll_interval: float = 0.2
    proxies: bool = False
    single_enqueue: bool = False
    crash_interval: float = 2.0
    pause_every: float = 2.5
    pause_leases: tuple[float, float] = (0.5, 3.0)
    restart_modes: tuple[str, ...] = ("immediate", "immediate", "fast", "immediate")
    skews: dict[str, tuple[str, bool]] = field(default_factory=dict)
    drain_timeout: float = 120.0
    seed: int = 7

    @property
    def sweep(self) -> float:
        return self.poll_interval


@dataclass
class StormResult:
    plan: StormPlan
    report: Report
    timings: dict[str, float]
    enqueue_errors: int
    artifact: Path | None = None

    def figures(self) -> dict[str, Any]:
        return {"storm": self.plan.name, **self.report.summary(), **self.timings}

    def table(self) -> str:
        """A short table of the storm's figures, for stdout."""
        s = self.report.summary()
        cov = ", ".join(
            f"{k} {v['effective']}/{v['fired']}/{v['injected']}" for k, v in s["coverage"].items()
        )
        rows = [
            ("storm", self.plan.name),
            ("verdict", s["verdict"]),
            (
                "jobs acknowledged / succeeded / failed",
                f"{s['acknowledged']} / {s['succeeded']} / {s['failed']}",
            ),
            ("lost / double commits", f"{s['lost']} / {s['double_commits']}"),
            (
                "stale accepted / duplicate effects",
                f"{s['stale_accepted']} / {s['duplicate_effects']}",
            ),
            ("token / deadline problems", f"{s['token_problems']} / {s['deadline_problems']}"),
            (
                "claims / reclaims / re-executions",
                f"{s['claims']} / {s['reclaims']} / {s['reexecutions']}",
            ),
            (
                "replays / fence rejections / stale sends",
                f"{s['replays']} / {s['fence_rejections']} / {s['stale_sends']}",
            ),
            (
                "orphans (not from a fault) / max orphan age",
                f"{s['orphans']} ({s['unattributed_orphans']}) / {s['orphan_age_max']:.2f} s",
            ),
            (
                "recovery p50 / p99 / max (bound)",
                f"{s['recovery_p50']:.2f} / "
                f"{s['recovery_p99']:.2f} / {s['recovery_max']:.2f} s ({s['recovery_bound']:.2f})",
            ),
            ("settled after last fault", f"{s['settled_after_last_fault']:.2f} s"),
            ("coverage effective/fired/injected", cov or "-"),
            ("duration", f"{self.timings.get('total', 0):.1f} s"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)


class StormRun:
    """The live state a nemesis works on."""

    def __init__(
        self,
        plan: StormPlan,
        supervisor: StormSupervisor,
        server: Restartable | None,
        stop: threading.Event,
    ) -> None:
        self.plan = plan
        self.supervisor = supervisor
        self.server = server
        self.stop = stop
        self.rng = random.Random(plan.seed)
        self.faults: list[Fault] = []
        self.restarts: list[float] = []
        self._spawned = 0

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` of the schedule (False once the storm is told to stop)."""
        return not self.stop.wait(max(0.0, seconds))

    def spawn(self, base: str = "w") -> str:
        self._spawned += 1
        name = f"{base}{self._spawned}"
        skew = self.plan.skews.get(name)
        self.supervisor.spawn(name, env=faketime_env(*skew) if skew else None)
        return name

    def healthy(self) -> list[str]:
        """Workers that run, are not stopped, and have started (claimed or may claim)."""
        return [
            w.name
            for w in self.supervisor.running()
            if not w.paused and self.supervisor.is_started(w.name)
        ]


# -- nemeses -----------------------------------------------------------------------------


def crash(run: StormRun, until: float) -> None:
    """SIGKILL a random worker every ``crash_interval`` s; a replacement starts at once."""
    while time.time() + run.plan.crash_interval <= until and run.sleep(run.plan.crash_interval):
        healthy = run.healthy()
        if len(healthy) < 2:
            continue  # the replacements are still starting: nobody would take over
        victim = run.rng.choice(healthy)
        at = time.time()
        fired, evidence = run.supervisor.kill(victim)
        run.faults.append(Fault("kill", victim, at, at, "start", fired, evidence))
        run.spawn()


def pause(run: StormRun, until: float, targets: Sequence[str] | None = None) -> None:
    """SIGSTOP a random worker for 0.5-3 leases (never the last two running), then SIGCONT."""
    resumes: list[tuple[float, str, float, bool, str]] = []
    next_pause = time.time() + run.plan.pause_every
    low, high = run.plan.pause_leases
    while True:
        now = time.time()
        for item in [r for r in resumes if r[0] <= now]:
            resumes.remove(item)
            _due, name, start, fired, evidence = item
            run.supervisor.resume(name)
            run.faults.append(Fault("pause", name, start, time.time(), "start", fired, evidence))
        if now >= until and not resumes:
            return
        if now >= next_pause and now < until:
            pool = [n for n in run.healthy() if targets is None or n in targets]
            if len(run.healthy()) > 2 and pool:
                name = run.rng.choice(pool)
                length = run.rng.uniform(low, high) * run.plan.lease
                length = min(length, max(0.5, until - now))
                fired, evidence = run.supervisor.pause(name)
                resumes.append((time.time() + length, name, now, fired, evidence))
            next_pause = now + run.plan.pause_every
        wake = min([r[0] for r in resumes] + [next_pause if now < until else until + 3600])
        if not run.sleep(min(wake - time.time(), 0.5)):
            for _, name, start, fired, evidence in resumes:
                run.supervisor.resume(name)
                run.faults.append(
                    Fault("pause", name, start, time.time(), "start", fired, evidence)
                )
            return


NETWORK_MODES = ("reset", "blackhole", "drop_responses", "delay")


def network(run: StormRun, until: float) -> None:
    """One worker's database link at a time: reset, blackhole, lost responses, delay.

    Blackhole and lost responses last 1.2 leases (so the victim's leases expire);
    the delay is 0.4 lease per chunk (beyond a third of the lease) for 1.5 leases.
    """
    lease = run.plan.lease
    holds = {"reset": 0.3, "blackhole": 1.2 * lease, "drop_responses": 1.2 * lease}
    index = 0
    while run.sleep(0.5):
        mode = NETWORK_MODES[index % len(NETWORK_MODES)]
        hold = holds.get(mode, 1.5 * lease)
        if time.time() + hold > until:
            return
        names = run.healthy()
        name = names[index % len(names)]
        proxy = run.supervisor.workers[name].proxy
        assert proxy is not None, "the network storm needs proxies"
        before = (proxy.bytes_dropped, proxy.resets, proxy.bytes_forwarded)
        delay = 0.4 * lease if mode == "delay" else 0.0
        start = time.time()
        proxy.set_mode(mode, delay=delay)
        run.sleep(hold)
        after = (proxy.bytes_dropped, proxy.resets, proxy.bytes_forwarded)
        proxy.set_mode("pass")
        fired = {
            "reset": after[1] > before[1],
            "blackhole": after[0] > before[0],
            "drop_responses": after[0] > before[0],
            "delay": after[2] > before[2],
        }[mode]
        evidence = f"dropped={after[0] - before[0]} resets={after[1] - before[1]}"
        # Unanswered extensions that landed keep the lease for up to one more lease;
        # delayed ones land up to two delays late.
        grace = {"drop_responses": lease, "delay": 2 * delay}.get(mode, 0.0)
        run.faults.append(Fault(mode, name, start, time.time(), "start", fired, evidence, grace))
        index += 1


def restarts(run: StormRun, until: float) -> None:
    """Restart the storm's own PostgreSQL, evenly spread over the window."""
    server = run.server
    assert server is not None, "the restart storm needs a server it owns"
    modes = run.plan.restart_modes
    gap = (until - time.time()) / (len(modes) + 1)
    for mode in modes:
        if not run.sleep(gap):
            return
        old = server.pid
        start = time.time()
        run.restarts.append(start)
        server.restart(mode)
        fired = server.pid is not None and server.pid != old
        run.faults.append(
            Fault(f"pg_restart_{mode}", "*", start, time.time(), "heal", fired, f"pid {old}->")
        )


def skew(run: StormRun, until: float) -> None:
    """Pause the skewed workers now and then (the skew itself was set at spawn)."""
    pause(run, until, targets=list(run.plan.skews))


NEMESES: dict[str, Callable[[StormRun, float], None]] = {
    "crash": crash,
    "pause": pause,
    "network": network,
    "restarts": restarts,
    "skew": skew,
}

EXPECTED: dict[str, tuple[str, ...]] = {
    "crash": ("kill",),
    "pause": ("pause",),
    "network": NETWORK_MODES,
    "restarts": ("pg_restart_immediate", "pg_restart_fast"),
    "skew": ("pause",),
}


# -- the producer --------------------------------------------------------------------------


class Enqueuer(threading.Thread):
    """Feeds ``jobs`` calls at a steady pace; remembers which keys were acknowledged."""

    def __init__(self, plan: StormPlan, dsn: str, app_factory: Callable[[str], Any]) -> None:
        super().__init__(name="storm-enqueuer", daemon=True)
        self.plan = plan
        self.dsn = dsn
        self.app_factory = app_factory
        self.acknowledged: list[str] = []
        self.errors = 0
        self.rng = random.Random(plan.seed + 1)
        self.failure: BaseException | None = None

    def payload(self, n: int) -> dict[str, Any]:
        if self.rng.random() < self.plan.long_share:
            work = self.plan.long_work
        else:
            work = self.rng.uniform(*self.plan.work)
        return {"n": n, "work": round(work, 3)}

    def run(self) -> None:
        app = self.app_factory(self.dsn)
        try:
            self._feed(app)
        except BaseException as exc:  # reported by the storm
            self.failure = exc
        finally:
            app.close()

    def _feed(self, app: Any) -> None:
        plan = self.plan
        batch = 1 if plan.single_enqueue else 10
        rounds = max(1, plan.jobs // batch)
        gap = plan.enqueue_seconds / rounds
        start = time.monotonic()
        n = 0
        for index in range(rounds):
            wait = start + index * gap - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            keys = [f"{plan.name}:{n + i}" for i in range(batch)]
            payloads = [self.payload(n + i) for i in range(batch)]
            n += batch
            self._submit(app, keys, payloads)

    def _submit(self, app: Any, keys: list[str], payloads: list[dict[str, Any]]) -> None:
        """Enqueue until acknowledged; the same keys on every retry (never a fresh one)."""
        give_up = time.monotonic() + 60.0
        while True:
            try:
                if len(keys) == 1:
                    app.sync.enqueue(TOOL, payloads[0], idempotency_key=keys[0])
                else:
                    app.sync.enqueue_many(TOOL, payloads, idempotency_keys=keys)
            except (StoreError, OSError, TimeoutError):  # tenure's errors, never psycopg's
                self.errors += 1
                if time.monotonic() > give_up:
                    return  # never acknowledged: the checker does not expect these
                time.sleep(0.05)
                continue
            self.acknowledged += keys
            return


# -- the run -------------------------------------------------------------------------------


def run_storm(
    plan: StormPlan,
    *,
    tenure_dsn: str,
    receiver_dsn: str,
    workdir: Path,
    app: str = DEFAULT_APP,
    app_factory: Callable[[str], Any] | None = None,
    server: Restartable | None = None,
    cwd: Path | None = None,
    artifacts: Path | None = None,
) -> StormResult:
    """Run ``plan`` and judge it; the result carries the report and the figures."""
    if app_factory is None:
        from importlib import import_module

        module = import_module(app.partition(":")[0])
        app_factory = module.build_app
    nemesis = NEMESES[plan.nemesis]
    timings: dict[str, float] = {}
    began = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    receiver = ReceiverProcess(receiver_dsn, workdir / "receiver", cwd=cwd).start()
    supervisor = StormSupervisor(
        tenure_dsn,
        workdir,
        app,
        concurrency=plan.concurrency,
        poll_interval=plan.poll_interval,
        proxies=plan.proxies,
        env={"STORM_RECEIVER_URL": receiver.url},
        cwd=cwd,
    )
    stop = threading.Event()
    run = StormRun(plan, supervisor, server, stop)
    enqueuer = Enqueuer(plan, tenure_dsn, app_factory)
    remaining_at_heal = 0
    window_start = time.time()
    try:
        for _ in range(plan.workers):
            run.spawn()
        supervisor.wait_started()
        timings["startup"] = time.monotonic() - began
        window_start = time.time()
        enqueuer.start()
        nemesis(run, window_start + plan.fault_seconds)
        for handle in supervisor.workers.values():
            if handle.paused:
                supervisor.resume(handle.name)
            if handle.proxy is not None and handle.alive:
                handle.proxy.set_mode("pass")
        timings["faults"] = time.time() - window_start
        enqueuer.join(plan.enqueue_seconds + 120)
        remaining_at_heal = unfinished(tenure_dsn)
        drain_began = time.monotonic()
        wanted = set(enqueuer.acknowledged)
        try:
            wait_for(
                lambda: all_terminal(tenure_dsn, wanted),
                plan.drain_timeout,
                f"storm {plan.name}: jobs still unfinished",
                interval=0.25,
            )
            timings["drain"] = time.monotonic() - drain_began
        except TimeoutError:
            timings["drain"] = -1.0  # the checker reports the unfinished jobs as lost
    finally:
        stop.set()
        supervisor.close()
        receiver.stop()
    if enqueuer.failure is not None:
        raise RuntimeError(f"the enqueuer failed: {enqueuer.failure!r}") from enqueuer.failure
    jobs, journal = read_tenure(tenure_dsn)
    history = read_history(supervisor.history_dir)
    faults = run.faults + _skew_faults(plan, history, journal, window_start)
    rate = _throughput(journal)
    evidence = Evidence(
        acknowledged=enqueuer.acknowledged,
        jobs=jobs,
        journal=journal,
        decisions=receiver.decisions(),
        effects=read_effects(receiver_dsn),
        history=history,
        faults=faults,
        restarts=run.restarts,
        lease=plan.lease,
        sweep=plan.sweep,
        # Twice the backlog at the run's own rate, plus 4 s: on a loaded 2-core machine
        # the run once settled 0.7 s past "1.5x + 2 s" with nothing wrong. A real stall
        # (a job left for a later lease, a worker that stopped claiming) takes longer.
        drain_allowance=remaining_at_heal / max(rate, 1.0) * 2.0 + 4.0,
        clock_offset=clock_offset(),
        expected_faults=EXPECTED[plan.nemesis]
        + tuple(f"clock_{_label(s)}" for s, _ in plan.skews.values()),
    )
    report = check(evidence)
    timings["total"] = time.monotonic() - began
    timings = {k: round(v, 3) for k, v in timings.items()}
    result = StormResult(plan, report, timings, enqueuer.errors)
    if artifacts is not None:
        artifacts.mkdir(parents=True, exist_ok=True)
        result.artifact = artifacts / f"{plan.name}.json"
        data = {
            "plan": asdict(plan),
            "timings": timings,
            "enqueue_errors": enqueuer.errors,
            "report": report.to_json(),
            "faults": [asdict(f) for f in faults],
        }
        result.artifact.write_text(json.dumps(data, indent=2, default=str))
    return result


def _throughput(journal: Sequence[Any]) -> float:
    """Outcomes per second over the run (for the drain allowance)."""
    ends = sorted(float(e["at"]) for e in journal if e["kind"] in ("succeeded", "failed"))
    if len(ends) < 2 or ends[-1] <= ends[0]:
        return 1.0
    return (len(ends) - 1) / (ends[-1] - ends[0])


def _label(spec: str) -> str:
    return spec.replace("+", "plus").replace("-", "minus").replace(" ", "_").replace(".", "_")


def _skew_faults(
    plan: StormPlan, history: Sequence[Any], journal: Sequence[Any], start: float
) -> list[Fault]:
    """One ``clock_*`` fault per skewed worker, fired if its clock really was skewed:
    its wall clock at each claim, against the database's record of that claim."""
    claimed_at = {int(e["token"]): float(e["at"]) for e in journal if e["kind"] == "job_claimed"}
    up_offset = uptime_offset()
    faults = []
    for name, (spec, real_monotonic) in plan.skews.items():
        samples = sorted(
            (claimed_at[int(e["token"])], float(e["wall"]) - claimed_at[int(e["token"])])
            for e in history
            if e.get("ev") == "job_claimed"
            and e.get("worker") == name
            and int(e.get("token") or -1) in claimed_at
        )
        fired, evidence = _skew_fired(spec, samples)
        clocks = [e for e in history if e.get("ev") == "clock" and e.get("worker") == name]
        if clocks and clocks[0].get("uptime") is not None:
            real = float(clocks[0]["uptime"]) + up_offset
            evidence += f"; at start {float(clocks[0]['wall']) - real:+.2f} s"
        evidence += f"; monotonic {'real' if real_monotonic else 'faked'}"
        faults.append(
            Fault(f"clock_{_label(spec)}", name, start, time.time(), "start", fired, evidence)
        )
    return faults


def _skew_fired(spec: str, samples: Sequence[tuple[float, float]]) -> tuple[bool, str]:
    if len(samples) < 2:
        return False, f"{len(samples)} claims to measure the skew on"
    offsets = [s for _, s in samples]
    if "x" in spec:
        rate = float(spec.split("x")[1])
        (t0, s0), (t1, s1) = samples[0], samples[-1]
        measured = 1 + (s1 - s0) / (t1 - t0) if t1 > t0 else 1.0
        return abs(measured - rate) < 0.15, f"rate {measured:.3f} (wanted {rate})"
    wanted = float(spec.rstrip("s"))
    median = statistics.median(offsets)
    return abs(median - wanted) < 2.0, f"offset {median:+.2f} s (wanted {wanted:+g})"
