"""Prometheus metrics: what this process saw (events) and what the database holds (on scrape).

`Metrics` is an event handler (see ``tenure._log.attach``) and, for what every job
does (its claim, its call), an interceptor (`MetricsInterceptor`, tenure._intercept) in
every chain of the process: it turns the telemetry contract into counters and histograms
in a private
`CollectorRegistry` — never prometheus-client's global one, so two apps in one
process, or a test, never share numbers by accident. `DatabaseGauges` computes
queue depth, oldest queued age and the state of held leases from the database
when scraped, in bounded statements, plus (for the dashboard) journal rows
counted incrementally since the exporter started.

Every series is labelled by tool and by the tool's user-supplied ``model`` and
``provider`` (``app.tool(labels=...)``). Cardinality is bounded by `ToolLabels`:
past a cap, new tool names or label values are reported as ``other`` — one
series whose value sums (or, for a min/max gauge, bounds) all of them.

Known series exist from the start: `Metrics.prime` creates every counter at zero
for the tools a worker runs, so ``rate()`` and ``absent()`` alerts work before
the first incident instead of seeing nothing until then.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .._errors import StoreError
from .._intercept import Interceptor, add_process
from .._log import Event
from .._store import Finish
from ._events import EVENTS, JOURNAL_KINDS

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from .._registry import ToolSpec
    from .._store import (
        ClaimedJob,
        JournalCount,
        QueueDepth,
        RunningSummary,
        Store,
        WaitingSummary,
    )

R = TypeVar("R")

LABEL_KEYS = ("model", "provider")
TOOL_LABELS = ("tool", *LABEL_KEYS)
OTHER = "other"
TOOL_CAP = 200
VALUE_CAP = 50
LOSS_REASONS = frozenset({"zero_rows", "deadline_passed", "executor_unobservable", "db_error"})
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
LEASE_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 300)
# A fenced commit takes a fraction of a millisecond on an idle server and is given up
# after 10 s (the completer's COMMIT_TIMEOUT).
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
QUEUE_CAP = 100_000
WORKER_STATUSES = ("alive", "silent", "stopped")
# How long a scrape waits for the database: half of Prometheus's default scrape_timeout
# (10 s), so a database that does not answer is reported as tenure_database_up 0.
REFRESH_DEADLINE = 5.0
# Kinds no worker process emits as events (a derived name, a receiver's, rows only a
# statement writes); every other kind of the catalogue starts at zero in tenure_events_total.
NOT_EMITTED = frozenset(
    {
        "job_reclaimed",
        "stale_fence_rejected",
        "succeeded",
        "failed",
        "retried",
        "released",
        "cancelled",
        "retry_requested",
        "dispatched",
    }
)
Labels = tuple[str, ...]
# What every job does, counted by `MetricsInterceptor` where it happens rather than from its
# event: with metrics on, a busy worker still skips building these DEBUG events.
INTERCEPTED = frozenset({"job_claimed", "call_finished", "call_abandoned"})
# Kinds counted from another event: each heartbeat_batch says how many leases one beat
# confirmed, so 100,000 held leases cost the metrics one event per tool and beat.
FROM_BATCH = frozenset({"heartbeat_ok"})


class ToolLabels:
    """Maps a tool name to its (tool, model, provider) label values, with bounded cardinality.

    Registered tools keep their names while fewer than ``tool_cap`` names have been
    seen; every label key keeps at most ``value_cap`` distinct values. Anything past a
    cap becomes ``other``, so a misbehaving producer cannot explode the series count.
    """

    def __init__(self, *, tool_cap: int = TOOL_CAP, value_cap: int = VALUE_CAP) -> None:
        self._tool_cap = tool_cap
        self._value_cap = value_cap
        self._lock = threading.Lock()
        self._tools: dict[str, tuple[str, str, str]] = {}
        self._values: dict[str, set[str]] = {key: set() for key in LABEL_KEYS}

    def _bounded(self, key: str, value: str) -> str:
        seen = self._values[key]
        if value and value not in seen:
            if len(seen) >= self._value_cap:
                return OTHER
            seen.add(value)
        return value

    def register(self, tool: str, labels: Mapping[str, str]) -> None:
        """Declare a tool's labels (from its registration); the first declaration wins."""
        with self._lock:
            if tool in self._tools or len(self._tools) >= self._tool_cap:
                return
            model, provider = (self._bounded(key, labels.get(key, "")) for key in LABEL_KEYS)
            self._tools[tool] = (tool, model, provider)

    def register_specs(self, specs: Iterable[ToolSpec]) -> None:
        for spec in specs:
            self.register(spec.name, dict(spec.labels))

    def known(self) -> list[tuple[str, str, str]]:
        """The label values of every tool with a series of its own, in first-seen order."""
        with self._lock:
            return list(self._tools.values())

    def __call__(self, tool: str | None) -> tuple[str, str, str]:
        if tool is None:
            return ("", "", "")
        found = self._tools.get(tool)
        if found is not None:
            return found
        with self._lock:
            if tool not in self._tools and len(self._tools) < self._tool_cap:
                self._tools[tool] = (tool, "", "")
            return self._tools.get(tool, (OTHER, "", ""))


class Metrics:
    """Counters and histograms fed by events; call it as a handler, render with `text()`."""

    def __init__(self, labels: ToolLabels | None = None) -> None:
        self.labels = labels or ToolLabels()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.events = Counter(
            "tenure_events", "Telemetry events this process emitted, by kind", ["kind"], registry=r
        )
        self.claimed = Counter(
            "tenure_jobs_claimed", "Jobs this process claimed", TOOL_LABELS, registry=r
        )
        self.reclaimed = Counter(
            "tenure_jobs_reclaimed",
            "Claims that took a job over from an expired lease",
            TOOL_LABELS,
            registry=r,
        )
        self.expired = Counter(
            "tenure_leases_expired",
            "Expired leases this process found when reclaiming (the rescuer's are in the "
            "dashboard's tenure_journal_events_total)",
            TOOL_LABELS,
            registry=r,
        )
        self.heartbeat_failures = Counter(
            "tenure_heartbeat_failures",
            "Leases this process could not extend, by reason (once per job and transition)",
            [*TOOL_LABELS, "reason"],
            registry=r,
        )
        self.rejected = Counter(
            "tenure_results_rejected",
            "Fenced commits that matched zero rows (results never published)",
            TOOL_LABELS,
            registry=r,
        )
        self.requests = Counter(
            "tenure_tool_requests",
            "Fenced side-effect requests sent by tools (FencedAuth)",
            TOOL_LABELS,
            registry=r,
        )
        self.tool_duration = Histogram(
            "tenure_tool_duration_seconds",
            "How long tool calls ran, by outcome (abandoned: stopped without a commit)",
            [*TOOL_LABELS, "outcome"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.heartbeat_age = Histogram(
            "tenure_heartbeat_age_seconds",
            "The longest time since a confirmation that a heartbeat renewed, one observation "
            "per tool and beat",
            TOOL_LABELS,
            buckets=LEASE_BUCKETS,
            registry=r,
        )
        self.lease_remaining = Histogram(
            "tenure_lease_remaining_seconds",
            "The least confirmed lease left when a heartbeat was sent, one observation per "
            "tool and beat (how close the closest lease came to expiry)",
            TOOL_LABELS,
            buckets=LEASE_BUCKETS,
            registry=r,
        )
        self.commit_duration = Histogram(
            "tenure_commit_duration_seconds",
            "How long a fenced commit statement took to answer (one batch of outcomes, "
            "any tools; pool wait included)",
            buckets=COMMIT_BUCKETS,
            registry=r,
        )
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._by_kind: dict[str, Callable[[Event, tuple[str, str, str]], None]] = {
            "job_claimed": self._claimed,
            "lease_expired": lambda e, t: self._child(self.expired, *t).inc(),
            "heartbeat_batch": self._heartbeat,
            "heartbeat_withheld": lambda e, t: self._failure(t, "executor_unobservable"),
            "heartbeat_lost": lambda e, t: self._failure(t, str(e.fields.get("reason"))),
            "ownership_unknown": lambda e, t: self._failure(t, "db_error"),
            "result_rejected": lambda e, t: self._child(self.rejected, *t).inc(),
            "tool_request_started": lambda e, t: self._child(self.requests, *t).inc(),
            "call_finished": lambda e, t: self._duration(e, t, str(e.fields.get("outcome"))),
            "call_abandoned": lambda e, t: self._duration(e, t, "abandoned"),
            "commit_answered": lambda e, t: self._commit(e),
        }

    def _child(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)``, cached: prometheus-client's lookup is slow for a
        handler that sees every heartbeat of every held lease (label caps bound the cache)."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def prime(self, tools: Iterable[str]) -> None:
        """Create every counter at zero for ``tools`` (and every event kind a worker emits),
        so a scrape shows them before the first claim, loss or rejection."""
        for kind in EVENTS:
            if kind not in NOT_EMITTED:
                self._child(self.events, kind)
        per_tool = (self.claimed, self.reclaimed, self.expired, self.rejected, self.requests)
        for tool in tools:
            labels = self.labels(tool)
            for counter in per_tool:
                self._child(counter, *labels)
            for reason in sorted(LOSS_REASONS):
                self._child(self.heartbeat_failures, *labels, reason)

    def __call__(self, event: Event) -> None:
        if event.kind in FROM_BATCH:
            return  # counted from its heartbeat_batch, which says how many there were
        self._child(self.events, event.kind if event.kind in EVENTS else OTHER).inc()
        handle = self._by_kind.get(event.kind)
        if handle is not None:
            handle(event, self.labels(event.tool))

    def _claimed(self, event: Event, tool: tuple[str, str, str]) -> None:
        self._child(self.claimed, *tool).inc()
        if "previous_token" in event.fields:
            self._child(self.reclaimed, *tool).inc()

    def _heartbeat(self, event: Event, tool: tuple[str, str, str]) -> None:
        leases = event.fields.get("leases")
        if isinstance(leases, int) and leases > 0:
            self._child(self.events, "heartbeat_ok").inc(leases)
        age = event.fields.get("heartbeat_age")
        left = event.fields.get("lease_left")
        if isinstance(age, int | float):
            self._child(self.heartbeat_age, *tool).observe(age)
        if isinstance(left, int | float):
            self._child(self.lease_remaining, *tool).observe(left)

    def _failure(self, tool: tuple[str, str, str], reason: str) -> None:
        self._child(
            self.heartbeat_failures, *tool, reason if reason in LOSS_REASONS else OTHER
        ).inc()

    def _commit(self, event: Event) -> None:
        seconds = event.fields.get("duration")
        if isinstance(seconds, int | float):
            self.commit_duration.observe(seconds)

    def _duration(self, event: Event, tool: tuple[str, str, str], outcome: str) -> None:
        seconds = event.fields.get("duration")
        if isinstance(seconds, int | float):
            self._child(self.tool_duration, *tool, outcome).observe(seconds)


class MetricsInterceptor(Interceptor):
    """Claims and tool calls into `Metrics`, from the chain around them: the same series
    (and ``tenure_events_total`` kinds) their events would feed."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def claimed(self, job: ClaimedJob, worker: str) -> None:
        m = self._metrics
        tool = m.labels(job.tool)
        m._child(m.events, "job_claimed").inc()
        m._child(m.claimed, *tool).inc()
        if job.previous_token is not None:
            m._child(m.reclaimed, *tool).inc()

    async def call(self, job: ClaimedJob, worker: str, proceed: Callable[[], Awaitable[R]]) -> R:
        started = time.monotonic()
        outcome = await proceed()
        m = self._metrics
        finished = isinstance(outcome, Finish)
        m._child(m.events, "call_finished" if finished else "call_abandoned").inc()
        state = outcome.state if isinstance(outcome, Finish) else "abandoned"
        m._child(m.tool_duration, *m.labels(job.tool), state).observe(time.monotonic() - started)
        return outcome


_process_metrics: Metrics | None = None
_process_lock = threading.Lock()


def process_metrics() -> Metrics:
    """This process's Metrics, created on first use: attached to the event stream (the
    catalogue's kinds, but those its interceptor counts) and to every chain."""
    global _process_metrics
    with _process_lock:
        if _process_metrics is None:
            from .._log import attach

            _process_metrics = Metrics()
            attach(_process_metrics, kinds=(EVENTS.keys() - INTERCEPTED - FROM_BATCH))
            add_process(MetricsInterceptor(_process_metrics))
        return _process_metrics


class DatabaseGauges(Collector):
    """Gauges read from the database on scrape; ``refresh`` first, then ``collect``.

    Every statement is bounded (queued rows read at most ``cap``, held leases at most
    ``cap``, journal rows counted at most ``cap`` per scrape), and a failed refresh
    reports ``tenure_database_up 0`` instead of stale numbers.
    """

    def __init__(
        self,
        labels: ToolLabels,
        *,
        journal_counts: bool = False,
        cap: int = QUEUE_CAP,
        deadline: float = REFRESH_DEADLINE,
    ) -> None:
        self._labels = labels
        self._journal_counts = journal_counts
        self._cap = cap
        self._deadline = deadline
        self._reading: asyncio.Future[None] | None = None
        self._lock = threading.Lock()
        self._queue: list[QueueDepth] = []
        self._running: list[RunningSummary] = []
        self._waiting: list[WaitingSummary] = []
        self._workers: dict[str, int] = {}
        self._journal: dict[tuple[str, str], int] = {}
        self._after: int | None = None
        self._up = False
        self._seconds = 0.0

    async def refresh(self, store: Store) -> None:
        """Read the database, giving up after ``deadline`` seconds.

        Without the deadline a scrape waits as long as the pool does for a connection
        (30 s) or, on a partitioned network, for ever: Prometheus times the scrape out
        and sees no tenure series at all, so nothing says the database is the problem.
        A read cut off is cancelled in the background (psycopg asks the server to stop
        it, which can take seconds more); until it is gone, scrapes wait for it rather
        than start another, and each says ``tenure_database_up 0``.
        """
        started = time.monotonic()
        reading = self._reading
        if reading is None or reading.done():
            reading = self._reading = asyncio.ensure_future(self._read(store, started))
        done, _ = await asyncio.wait({reading}, timeout=self._deadline)
        if done and not reading.cancelled():
            reading.result()  # a bug (not a database error) fails the scrape, as it should
            return
        reading.cancel()
        self._down(started)

    def _down(self, started: float) -> None:
        with self._lock:
            self._up, self._queue, self._running, self._waiting = False, [], [], []
            self._workers = {}
            self._seconds = time.monotonic() - started

    async def _read(self, store: Store, started: float) -> None:
        try:
            queue = await store.queue_depth(self._cap)
            running = await store.running_summary(self._cap)
            waiting = await store.waiting_summary(self._cap)
            statuses = await store.count_workers()
            fresh: list[JournalCount] = []
            if self._journal_counts:
                if self._after is None:
                    self._after = await store.journal_head()
                else:
                    fresh = await store.journal_counts_since(self._after, self._cap)
        except StoreError:
            self._down(started)
            return
        with self._lock:
            self._up, self._queue, self._running, self._waiting = True, queue, running, waiting
            self._workers = {status: statuses.get(status, 0) for status in WORKER_STATUSES}
            for row in fresh:
                key = (str(row["kind"]), str(row["tool"] or ""))
                self._journal[key] = self._journal.get(key, 0) + int(row["n"])
                self._after = max(self._after or 0, int(row["last_id"]))
            self._seconds = time.monotonic() - started

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            queue, running, journal = list(self._queue), list(self._running), dict(self._journal)
            waiting, workers = list(self._waiting), dict(self._workers)
            up, seconds = self._up, self._seconds
        yield GaugeMetricFamily(
            "tenure_database_up", "1 if the last scrape could read the database", value=int(up)
        )
        yield GaugeMetricFamily(
            "tenure_database_scrape_seconds", "Time the database gauges took", value=seconds
        )
        depth = GaugeMetricFamily("tenure_queue_depth", "Queued jobs", labels=TOOL_LABELS)
        oldest = GaugeMetricFamily(
            "tenure_queue_oldest_age_seconds",
            "Age of the oldest queued job that is due",
            labels=TOOL_LABELS,
        )
        capped = any(bool(row["capped"]) for row in queue)
        known = self._labels.known()
        depths = _fold(queue, self._labels, "depth", sum, known)
        ages = _fold(
            [r for r in queue if r["oldest_age"] is not None], self._labels, "oldest_age", max
        )
        for tool, n in depths.items():
            depth.add_metric(tool, n)
        for tool, age in ages.items():
            oldest.add_metric(tool, max(0.0, age))
        yield depth
        yield oldest
        yield GaugeMetricFamily(
            "tenure_queue_depth_capped",
            f"1 if {self._cap}+ jobs are queued (tenure_queue_depth is then a lower bound)",
            value=int(capped),
        )
        yield from self._held(running)
        yield from self._waits(waiting)
        registry = GaugeMetricFamily(
            "tenure_workers",
            "Registered worker processes by status (alive, silent: unseen for three "
            "keep-alive periods, stopped)",
            labels=["status"],
        )
        for status, n in workers.items():
            registry.add_metric([status], n)
        yield registry
        if self._journal_counts:
            counter = CounterMetricFamily(
                "tenure_journal_events",
                "Journal rows written since this exporter started, by kind",
                labels=["kind", *TOOL_LABELS],
            )
            counts: dict[Labels, float] = {
                (kind, *tool): 0.0 for tool in known for kind in sorted(JOURNAL_KINDS)
            }
            for (kind, name), n in sorted(journal.items()):
                row: Labels = (kind, *self._labels(name or None))
                counts[row] = counts.get(row, 0.0) + n
            for values, total in counts.items():
                counter.add_metric(list(values), total)
            yield counter

    def _waits(self, waiting: list[WaitingSummary]) -> Iterable[Metric]:
        count = GaugeMetricFamily(
            "tenure_waiting_jobs",
            "Jobs waiting at an open waitpoint (no lease, no slot)",
            labels=TOOL_LABELS,
        )
        oldest = GaugeMetricFamily(
            "tenure_waitpoint_oldest_age_seconds",
            "How long the oldest open waitpoint has waited",
            labels=TOOL_LABELS,
        )
        soonest = GaugeMetricFamily(
            "tenure_waitpoint_deadline_min_seconds",
            "Time left before the soonest open waitpoint's deadline (negative: past, "
            "awaiting the rescuer)",
            labels=TOOL_LABELS,
        )
        for tool, n in _fold(waiting, self._labels, "waiting", sum, self._labels.known()).items():
            count.add_metric(tool, n)
        for tool, age in _fold(waiting, self._labels, "oldest_age", max).items():
            oldest.add_metric(tool, max(0.0, age))
        for tool, left in _fold(waiting, self._labels, "deadline_min", min).items():
            soonest.add_metric(tool, left)
        yield count
        yield oldest
        yield soonest

    def _held(self, running: list[RunningSummary]) -> Iterable[Metric]:
        count = GaugeMetricFamily("tenure_running_jobs", "Held leases", labels=TOOL_LABELS)
        least = GaugeMetricFamily(
            "tenure_running_lease_remaining_min_seconds",
            "The least lease left among held leases (negative: expired, awaiting reclaim)",
            labels=TOOL_LABELS,
        )
        oldest = GaugeMetricFamily(
            "tenure_running_heartbeat_age_max_seconds",
            "The oldest last heartbeat among held leases",
            labels=TOOL_LABELS,
        )
        folded = [
            (count, _fold(running, self._labels, "running", sum, self._labels.known())),
            (least, _fold(running, self._labels, "lease_remaining_min", min)),
            (oldest, _fold(running, self._labels, "heartbeat_age_max", max)),
        ]
        for family, values in folded:
            for tool, number in values.items():
                family.add_metric(tool, number)
        yield count
        yield least
        yield oldest


def _fold(
    rows: Iterable[Mapping[str, Any]],
    labels: ToolLabels,
    column: str,
    combine: Callable[[Iterable[float]], float],
    zeros: Iterable[Labels] = (),
) -> dict[Labels, float]:
    """One value per label set: rows of tools past the cap share ``other``, so they are
    combined (summed, or the min/max kept) rather than written as duplicate series.
    ``zeros`` are label sets present at 0 when no row names them."""
    grouped: dict[Labels, list[float]] = {tool: [] for tool in zeros}
    for row in rows:
        grouped.setdefault(labels(str(row["tool"])), []).append(float(row[column]))
    return {tool: combine(values) if values else 0.0 for tool, values in grouped.items()}


def render(registries: Iterable[CollectorRegistry]) -> bytes:
    """Prometheus text exposition of several registries (their metric names never overlap)."""
    return b"".join(generate_latest(r) for r in registries)
