"""`tenure doctor`: the checks an operator runs before trusting a deployment.

Which server this is (an embedded server of the doctor's own, started because no
DSN was given, is a warning: workers elsewhere never see it); connectivity and
server version; the schema version against the migrations
this code ships; the difference between the database's clock and this host's
(tenure never compares leases with a worker's clock, but people compare log
lines and dashboards with it); every registered policy against the interval
rule ``L > R·H + J``; and the indexes the hot statements need — checked by
asking the planner, with EXPLAIN, how it would run the very statements workers
send (a missing or poisoned index shows up there, not in a list of names).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._embedded import servers_in_use, usage_notice
from .._errors import PolicyError, StoreError, one_line
from .._policy import LeasePolicy
from .._store import Store, known_migrations

if TYPE_CHECKING:
    from .._registry import ToolRegistry

Status = Literal["ok", "warn", "fail", "skip"]

CLOCK_SAMPLES = 5
CLOCK_WARN = 1.0
SMALL_TABLE = 1000
PROBE_ROWS = 100
REQUIRED_INDEXES = (
    "tenure_jobs_pkey",
    "tenure_jobs_queued",
    "tenure_jobs_tenant_queued",
    "tenure_jobs_lease_until",
    "tenure_jobs_created",
    "tenure_events_job",
    "tenure_events_at",
    "tenure_events_notable",
)
# Statement → the indexes its plan must use (and tenure_jobs must never be scanned whole).
INTENDED_PLANS = {
    "claim": ("tenure_jobs_queued", "tenure_jobs_row_leases"),
    "extend_leases": ("tenure_jobs_pkey",),
    "finish_many": ("tenure_jobs_pkey",),
    "prune_jobs": ("tenure_jobs_prune",),
}


@dataclass(frozen=True, slots=True)
class Check:
    """One finding of the doctor: ``ok``, ``warn``, ``fail`` or ``skip``, and why."""

    name: str
    status: Status
    detail: str


def check_embedded() -> list[Check]:
    """Warn, naming its data dir, when no DSN was given and this process uses an embedded
    server (its own, or the one another process of this user runs)."""
    servers = servers_in_use()
    if not servers:
        return [Check("server", "ok", "the one a DSN names (--dsn, TENURE_DSN or TENURE_DSN_FILE)")]
    return [Check("server", "warn", usage_notice(server)) for server in servers]


async def check_server(store: Store) -> list[Check]:
    info = await store.server_info()
    status: Status = "ok" if info["version_num"] >= 140000 else "fail"
    return [Check("connectivity", status, f"PostgreSQL {info['version']}, {info['database']}")]


async def check_schema(store: Store) -> list[Check]:
    known = known_migrations()
    rows = await store.applied_migrations()
    if rows is None:
        return [Check("schema", "fail", "not migrated: run `tenure migrate`")]
    applied = {r["version"] for r in rows}
    pending = sorted(set(known) - applied)
    unknown = sorted(applied - set(known))
    if pending:
        names = ", ".join(f"{v:04d}_{known[v]}" for v in pending)
        return [Check("schema", "fail", f"pending migrations: {names}; run `tenure migrate`")]
    if unknown:
        versions = ", ".join(f"{v:04d}" for v in unknown)
        return [
            Check("schema", "warn", f"migrations {versions} are newer than this tenure: upgrade it")
        ]
    return [Check("schema", "ok", f"version {max(applied):04d} ({len(applied)} migrations)")]


async def check_clock(store: Store) -> list[Check]:
    """Offset of the database's clock from this host's, from the least delayed of a few probes."""
    best: tuple[float, float] | None = None
    for _ in range(CLOCK_SAMPLES):
        sent = time.time()
        db_now = (await store.server_info())["db_now"].timestamp()
        received = time.time()
        rtt = received - sent
        if best is None or rtt < best[1]:
            best = (db_now - (sent + received) / 2, rtt)
    assert best is not None
    offset, rtt = best
    detail = f"database - this host = {offset:+.3f} s (± {rtt / 2:.3f} s)"
    if abs(offset) > CLOCK_WARN:
        detail += "; leases do not care (one clock: the database's), but logs will disagree"
        return [Check("clock", "warn", detail)]
    return [Check("clock", "ok", detail)]


def check_policies(registry: ToolRegistry | None) -> list[Check]:
    if registry is None:
        return [Check("policies", "skip", "give MODULE:APP to check its tools' policies")]
    if not registry.tools:
        return [Check("policies", "warn", "the app registers no tools")]
    checks = []
    for name, spec in sorted(registry.tools.items()):
        lease = spec.policy.lease
        budget = lease.missed_beats * lease.heartbeat + lease.jitter
        rule = (
            f"L {lease.lease:g} > R·H + J = {lease.missed_beats}·{lease.heartbeat:g} + "
            f"{lease.jitter:g} = {budget:g} s"
        )
        try:  # registration validated it; checking again catches a policy built around that
            LeasePolicy(
                lease.lease, lease.heartbeat, lease.jitter, lease.missed_beats, lease.safety_margin
            )
        except PolicyError as exc:
            checks.append(Check(f"policy {name}", "fail", str(exc)))
            continue
        slack = lease.lease - budget
        checks.append(Check(f"policy {name}", "ok", f"{rule} (slack {slack:g} s)"))
    return checks


def _walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _walk(child)


def query_plan_scans(plan: Any) -> tuple[set[str], set[str]]:
    """(indexes used, tables read by a sequential scan) in an EXPLAIN (FORMAT JSON) plan."""
    indexes: set[str] = set()
    scanned: set[str] = set()
    for node in _walk(plan[0]["Plan"]):
        if "Index Name" in node:
            indexes.add(node["Index Name"])
        if node.get("Node Type") == "Seq Scan":
            scanned.add(node.get("Relation Name", "?"))
    return indexes, scanned


def _probe_params(registry: ToolRegistry | None) -> dict[str, dict[str, Any]]:
    """Parameters for explaining each hot statement (nothing is executed)."""
    tools = sorted(registry.tools) if registry is not None and registry.tools else ["tenure-doctor"]
    ids = list(range(1, PROBE_ROWS + 1))
    n = len(ids)
    return {
        "claim": {
            "owner": "tenure-doctor",
            "tools": tools,
            "lease_ms": [60_000] * len(tools),
            "limit": PROBE_ROWS,
        },
        "extend_leases": {
            "owner": "tenure-doctor",
            "ids": ids,
            "tokens": ids,
            "lease_ms": [60_000] * n,
            "kept": [],
            "freeze_unnamed": True,
        },
        "finish_many": {
            "owner": "tenure-doctor",
            "ids": ids,
            "tokens": ids,
            "states": ["succeeded"] * n,
            "results": [None] * n,
            "errors": [None] * n,
            "delays_ms": [0] * n,
            "attempt_refunds": [0] * n,
            "progress": [None] * n,
        },
        "prune_jobs": {"tools": tools, "limit": PROBE_ROWS},
    }


async def check_indexes(store: Store, registry: ToolRegistry | None) -> list[Check]:
    rows = await store.table_indexes()
    if not rows:
        return [Check("indexes", "fail", "tenure's tables are missing: run `tenure migrate`")]
    present = {r["index_name"] for r in rows}
    table_rows = max((r["table_rows"] for r in rows if r["table_name"] == "tenure_jobs"), default=0)
    size = "never analyzed" if table_rows < 0 else f"~{table_rows:.0f} rows"
    missing = [name for name in REQUIRED_INDEXES if name not in present]
    checks = [
        Check("indexes", "fail", f"missing: {', '.join(missing)}")
        if missing
        else Check("indexes", "ok", f"{len(REQUIRED_INDEXES)} required indexes present")
    ]
    params = _probe_params(registry)
    for statement, intended in INTENDED_PLANS.items():
        try:
            used, scanned = query_plan_scans(await store.explain(statement, params[statement]))
        except StoreError as exc:
            error = f"{type(exc).__name__}: {one_line(exc)}"
            checks.append(Check(f"query plan {statement}", "fail", error))
            continue
        lacking = [name for name in intended if name not in used]
        if not lacking and "tenure_jobs" not in scanned:
            checks.append(Check(f"query plan {statement}", "ok", f"uses {', '.join(intended)}"))
            continue
        found = ", ".join(sorted(used)) or "no index"
        detail = f"expected {', '.join(intended)}; the planner chose {found}" + (
            " and a sequential scan of tenure_jobs" if "tenure_jobs" in scanned else ""
        )
        if table_rows < SMALL_TABLE:
            detail += (
                f" (tenure_jobs: {size}; plans change with size and statistics, "
                "check again under load)"
            )
            checks.append(Check(f"query plan {statement}", "warn", detail))
        else:
            checks.append(Check(f"query plan {statement}", "fail", detail))
    return checks


def doctor_steps(
    store: Store, registry: ToolRegistry | None
) -> Iterable[tuple[str, Callable[[], Awaitable[list[Check]]]]]:
    """The checks in order, as (label, coroutine factory) for a progress bar to step through."""

    async def policies() -> list[Check]:
        return check_policies(registry)

    async def embedded() -> list[Check]:
        return check_embedded()

    return [
        ("server", embedded),
        ("connectivity", lambda: check_server(store)),
        ("schema", lambda: check_schema(store)),
        ("clock", lambda: check_clock(store)),
        ("policies", policies),
        ("indexes and query plans", lambda: check_indexes(store, registry)),
    ]
