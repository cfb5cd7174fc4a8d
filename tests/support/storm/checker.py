"""The checker: reads a chaos run's evidence and says what went wrong, with figures.

Evidence comes from places that do not trust one another:

- the producer's acknowledgements (which keys it was told are queued);
- tenure's tables after the run (each job's final row, the journal of claims,
  expired leases and outcomes, written in the same statements as the changes);
- the receiver's decision log and, when it has one, its table of applied effects;
- the workers' local histories (what each process believed, on its own clocks);
- the nemesis's log of faults (when each started and healed, and whether it fired).

Violations (any one fails the run):

``lost``
    An acknowledged enqueue whose job is missing or not terminal after the drain,
    or a job that succeeded although its effect was never applied.
``double_commit``
    More than one outcome journaled for one job, or a committed result carrying
    another token than the row's (a stale owner's result won).
``stale_accepted``
    The receiver applied an effect under a token lower than one it had already
    applied for the same scope, or answered a request with a replay although a
    higher token had applied that key.
``duplicate_effect``
    One idempotency key applied more than once.
``token``
    A fencing token drawn twice, a token a worker was given that the database has
    no record of, or a restart after which tokens did not keep increasing.
``deadline``
    A worker's conservative deadline for a token reached past the moment the
    database gave the job to the next token (checked for processes whose
    monotonic clock is the machine's), or a fenced request sent after the
    sender's own deadline.
``recovery``
    Jobs orphaned by a fault were taken over later than the bound
    (lease + sweep + 1 s after the fault's reference moment), or the run did not
    settle within the bound plus the drain allowance after the last fault.

A run whose faults never fired (or never touched a job) is ``unknown``, not a pass.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

Row = Mapping[str, Any]

TERMINAL = ("succeeded", "failed", "cancelled")
ACCEPTING = ("accepted", "replayed")


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault, as the nemesis logged it.

    ``reference`` is the moment recovery is measured from: ``start`` when other
    workers can take over at once (a kill, a pause, one worker's partition),
    ``heal`` when nobody can until the fault ends (a database restart).
    ``fired`` says whether the fault demonstrably took effect (the process died,
    the proxy dropped bytes, the postmaster changed); ``target`` is a worker name,
    or ``*`` for every worker. ``grace`` widens the recovery bound for faults that
    legitimately keep a lease alive longer: a link that delivers requests but loses
    the answers lets the holder's unanswered extensions land, so the database keeps
    the lease up to one more lease past the holder's own deadline.
    """

    kind: str
    target: str
    start: float
    heal: float
    reference: str = "start"
    fired: bool = True
    evidence: str = ""
    grace: float = 0.0

    @property
    def reference_time(self) -> float:
        return self.heal if self.reference == "heal" else self.start


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything the checker reads; times are Unix seconds on the machine's clock."""

    acknowledged: Sequence[str]
    jobs: Sequence[Row]
    journal: Sequence[Row]
    decisions: Sequence[Row] = ()
    effects: Sequence[Row] | None = None
    history: Sequence[Row] = ()
    faults: Sequence[Fault] = ()
    restarts: Sequence[float] = ()
    effect_required: bool = True
    lease: float = 2.0
    sweep: float = 0.2
    drain_allowance: float = 0.0
    clock_offset: float | None = None  # wall - monotonic of the machine, if sampled
    expected_faults: Sequence[str] = ()


@dataclass
class Report:
    """The figures of one run and every violation found."""

    acknowledged: int = 0
    jobs: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    lost: list[str] = field(default_factory=list)
    double_commits: list[str] = field(default_factory=list)
    stale_accepted: list[str] = field(default_factory=list)
    duplicate_effects: list[str] = field(default_factory=list)
    token_problems: list[str] = field(default_factory=list)
    deadline_problems: list[str] = field(default_factory=list)
    recovery_problems: list[str] = field(default_factory=list)
    claims: int = 0
    reclaims: int = 0
    reexecutions: int = 0
    effects_applied: int = 0
    replays: int = 0
    fence_rejections: int = 0
    stale_sends: int = 0
    rejected_commits: int = 0
    orphans: int = 0
    unattributed_orphans: int = 0
    orphan_age_max: float = 0.0
    recovery: list[float] = field(default_factory=list)
    recovery_bound: float = 0.0
    settled_after_last_fault: float = 0.0
    coverage: dict[str, dict[str, int]] = field(default_factory=dict)
    uncovered: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        found: list[str] = []
        for name in (
            "lost",
            "double_commits",
            "stale_accepted",
            "duplicate_effects",
            "token_problems",
            "deadline_problems",
            "recovery_problems",
        ):
            found += [f"{name}: {item}" for item in getattr(self, name)]
        return found

    @property
    def verdict(self) -> str:
        if self.violations:
            return "fail"
        if self.uncovered:
            return "unknown"
        return "pass"

    def recovery_figures(self) -> dict[str, float]:
        return {
            "p50": _quantile(self.recovery, 0.50),
            "p99": _quantile(self.recovery, 0.99),
            "max": max(self.recovery, default=0.0),
        }

    def summary(self) -> dict[str, Any]:
        """The figures (not the itemised lists) as one flat, JSON-ready mapping."""
        rec = self.recovery_figures()
        return {
            "verdict": self.verdict,
            "acknowledged": self.acknowledged,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "lost": len(self.lost),
            "double_commits": len(self.double_commits),
            "stale_accepted": len(self.stale_accepted),
            "duplicate_effects": len(self.duplicate_effects),
            "token_problems": len(self.token_problems),
            "deadline_problems": len(self.deadline_problems),
            "recovery_problems": len(self.recovery_problems),
            "claims": self.claims,
            "reclaims": self.reclaims,
            "reexecutions": self.reexecutions,
            "effects_applied": self.effects_applied,
            "replays": self.replays,
            "fence_rejections": self.fence_rejections,
            "stale_sends": self.stale_sends,
            "rejected_commits": self.rejected_commits,
            "orphans": self.orphans,
            "unattributed_orphans": self.unattributed_orphans,
            "orphan_age_max": round(self.orphan_age_max, 3),
            "recovery_p50": round(rec["p50"], 3),
            "recovery_p99": round(rec["p99"], 3),
            "recovery_max": round(rec["max"], 3),
            "recovery_bound": round(self.recovery_bound, 3),
            "settled_after_last_fault": round(self.settled_after_last_fault, 3),
            "coverage": self.coverage,
            "uncovered": self.uncovered,
        }

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["summary"] = self.summary()
        data["violations"] = self.violations
        return data


def _quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def _sample(items: Iterable[Any], limit: int = 20) -> str:
    items = list(items)
    text = ", ".join(map(str, items[:limit]))
    return text + (f" … (+{len(items) - limit})" if len(items) > limit else "")


def check(evidence: Evidence) -> Report:
    """Judge one run. Pure: reads only ``evidence``."""
    report = Report(acknowledged=len(set(evidence.acknowledged)), jobs=len(evidence.jobs))
    report.recovery_bound = evidence.lease + evidence.sweep + 1.0
    by_key = {row["idempotency_key"]: row for row in evidence.jobs}
    by_id = {int(row["id"]): row for row in evidence.jobs}
    events_by_job: dict[int, list[Row]] = defaultdict(list)
    for event in evidence.journal:
        if event.get("job_id") is not None:
            events_by_job[int(event["job_id"])].append(event)
    for row in evidence.jobs:
        state = row["state"]
        if state == "succeeded":
            report.succeeded += 1
        elif state == "failed":
            report.failed += 1
        elif state == "cancelled":
            report.cancelled += 1

    applied = _applied_effects(evidence)
    _check_lost(evidence, report, by_key, applied)
    _check_commits(evidence, report, events_by_job)
    _check_receiver(evidence, report, applied)
    _check_tokens(evidence, report)
    _check_deadlines(evidence, report, by_id)
    _check_recovery(evidence, report)
    _check_coverage(evidence, report)
    return report


# -- lost ------------------------------------------------------------------------------


def _applied_effects(evidence: Evidence) -> dict[str, list[int]]:
    """Key → tokens under which it was applied (the receiver's table if there is one,
    else its ``accepted`` decisions)."""
    applied: dict[str, list[int]] = defaultdict(list)
    if evidence.effects is not None:
        for effect in sorted(evidence.effects, key=lambda e: int(e["id"])):
            applied[str(effect["idempotency_key"])].append(int(effect["token"]))
    else:
        for decision in evidence.decisions:
            if decision.get("decision") == "accepted":
                applied[str(decision["key"])].append(int(decision["token"]))
    return applied


def _effect_key(job_id: int, row: Row) -> str | None:
    result = row.get("result")
    if isinstance(result, str):
        try:
            result = json.loads(result)
        except ValueError:
            result = None
    if isinstance(result, Mapping) and isinstance(result.get("effect_key"), str):
        return str(result["effect_key"])
    return None


def _check_lost(
    evidence: Evidence, report: Report, by_key: Mapping[str, Row], applied: Mapping[str, Any]
) -> None:
    missing = [k for k in dict.fromkeys(evidence.acknowledged) if k not in by_key]
    unfinished = [
        f"{k} (job {by_key[k]['id']} {by_key[k]['state']})"
        for k in dict.fromkeys(evidence.acknowledged)
        if k in by_key and by_key[k]["state"] not in TERMINAL
    ]
    report.lost += [f"acknowledged key {k} has no job" for k in missing]
    report.lost += [f"acknowledged key {k} never ended" for k in unfinished]
    if not evidence.effect_required:
        return
    for row in evidence.jobs:
        if row["state"] != "succeeded":
            continue
        key = _effect_key(int(row["id"]), row)
        if key is None:
            report.lost.append(f"job {row['id']} succeeded without naming its effect")
        elif key not in applied:
            report.lost.append(f"job {row['id']} succeeded but its effect {key} was never applied")


# -- commits ---------------------------------------------------------------------------


def _check_commits(
    evidence: Evidence, report: Report, events_by_job: Mapping[int, Sequence[Row]]
) -> None:
    for job_id, events in events_by_job.items():
        outcomes = [e for e in events if e["kind"] in TERMINAL]
        if len(outcomes) > 1:
            report.double_commits.append(
                f"job {job_id}: {len(outcomes)} outcomes "
                + _sample(f"{e['kind']}@{e.get('token')}" for e in outcomes)
            )
    for row in evidence.jobs:
        if row["state"] != "succeeded":
            continue
        result = row.get("result")
        if isinstance(result, str):
            result = json.loads(result)
        if isinstance(result, Mapping) and "token" in result:
            if int(result["token"]) != int(row["token"]):
                report.double_commits.append(
                    f"job {row['id']}: result of token {result['token']} committed "
                    f"under token {row['token']}"
                )
    claimed = [e for e in evidence.journal if e["kind"] == "job_claimed"]
    report.claims = len(claimed)
    report.reclaims = sum(
        1 for e in claimed if (e.get("detail") or {}).get("previous_token") is not None
    )
    report.reexecutions = max(0, report.claims - len({e["job_id"] for e in claimed}))
    report.rejected_commits = sum(1 for e in evidence.journal if e["kind"] == "result_rejected")


# -- the receiver ----------------------------------------------------------------------


def _check_receiver(evidence: Evidence, report: Report, applied: Mapping[str, list[int]]) -> None:
    for key, tokens in applied.items():
        report.effects_applied += len(tokens)
        if len(tokens) > 1:
            report.duplicate_effects.append(f"{key} applied {len(tokens)} times (tokens {tokens})")
    # Effects of one scope are applied under the scope's row lock, so the receiver's
    # insertion order is the order they were decided in: tokens may never go down.
    if evidence.effects is not None:
        highest: dict[str, int] = {}
        for effect in sorted(evidence.effects, key=lambda e: int(e["id"])):
            scope, token = str(effect["scope"]), int(effect["token"])
            if token < highest.get(scope, -1):
                report.stale_accepted.append(
                    f"{effect['idempotency_key']} applied under token {token} after "
                    f"token {highest[scope]} of {scope}"
                )
            highest[scope] = max(highest.get(scope, -1), token)
    # A replay answers a request as if it had succeeded; to a token lower than the one
    # that applied the key it is a stale owner told "done" instead of "stale".
    first_token = {key: tokens[0] for key, tokens in applied.items() if tokens}
    accepted_at: dict[str, int] = {}
    for decision in evidence.decisions:
        outcome = decision.get("decision")
        key = str(decision.get("key"))
        token = int(decision.get("token") or 0)
        if outcome == "replayed":
            report.replays += 1
            if key in first_token and token < first_token[key]:
                report.stale_accepted.append(
                    f"{key} replayed to token {token} although token {first_token[key]} applied it"
                )
        elif outcome == "stale":
            report.fence_rejections += 1
        elif outcome == "accepted" and evidence.effects is None:
            scope = str(decision.get("scope"))
            if token < accepted_at.get(scope, -1):
                report.stale_accepted.append(
                    f"{key} accepted under token {token} after token {accepted_at[scope]}"
                )
            accepted_at[scope] = max(accepted_at.get(scope, -1), token)
    # Requests from a superseded token that reached the receiver: the fence's work.
    superseded = _superseded_tokens(evidence.journal)
    report.stale_sends = sum(
        1 for d in evidence.decisions if int(d.get("token") or 0) in superseded
    )


def _superseded_tokens(journal: Sequence[Row]) -> set[int]:
    return {
        int(detail["previous_token"])
        for e in journal
        if e["kind"] == "job_claimed"
        and (detail := e.get("detail") or {}).get("previous_token") is not None
    }


# -- tokens ----------------------------------------------------------------------------


def _check_tokens(evidence: Evidence, report: Report) -> None:
    claims = [e for e in evidence.journal if e["kind"] == "job_claimed"]
    counts = Counter(int(e["token"]) for e in claims)
    twice = sorted(t for t, n in counts.items() if n > 1)
    if twice:
        report.token_problems.append(f"tokens drawn more than once: {_sample(twice)}")
    known = set(counts)
    told = {
        int(e["token"])
        for e in evidence.history
        if e.get("ev") == "job_claimed" and e.get("token") is not None
    }
    unknown = sorted(told - known)
    if unknown and claims:
        report.token_problems.append(
            f"tokens workers were given that the database never recorded: {_sample(unknown)}"
        )
    for restart in evidence.restarts:
        before = [int(e["token"]) for e in claims if float(e["at"]) < restart]
        after = [int(e["token"]) for e in claims if float(e["at"]) >= restart]
        if before and after and min(after) <= max(before):
            report.token_problems.append(
                f"after the restart at {restart:.3f} a token {min(after)} was drawn, not above "
                f"{max(before)} from before it"
            )


# -- deadlines -------------------------------------------------------------------------


def _real_monotonic(clock: Row | None) -> bool:
    """Whether a process's monotonic clock is the machine's (not faked)."""
    if clock is None:
        return True
    spec = clock.get("faketime")
    return not spec or bool(clock.get("real_monotonic"))


def _check_deadlines(evidence: Evidence, report: Report, by_id: Mapping[int, Row]) -> None:
    clocks = {
        (e.get("worker"), e.get("pid")): e for e in evidence.history if e.get("ev") == "clock"
    }
    deadline: dict[int, float] = {}
    process_of: dict[int, tuple[Any, Any]] = {}
    for e in evidence.history:
        ev = e.get("ev")
        token = e.get("token")
        if token is None:
            continue
        token = int(token)
        if ev in ("job_claimed", "heartbeat_ok") and e.get("deadline_monotonic") is not None:
            deadline[token] = max(deadline.get(token, -math.inf), float(e["deadline_monotonic"]))
            process_of[token] = (e.get("worker"), e.get("pid"))
        elif ev == "tool_request_started":
            # The send's own clock reading must be before the sender's deadline then.
            known = deadline.get(token)
            if known is not None and float(e["mono"]) > known + 0.001:
                report.deadline_problems.append(
                    f"token {token} sent {e.get('key')} {float(e['mono']) - known:.3f} s past "
                    "its own deadline"
                )
    _check_grants_kept(evidence, report)
    if evidence.clock_offset is None:
        return
    # The next owner's claim (database clock) against the previous owner's belief.
    for e in evidence.journal:
        if e["kind"] != "job_claimed":
            continue
        previous = (e.get("detail") or {}).get("previous_token")
        if previous is None or int(previous) not in deadline:
            continue
        if not _real_monotonic(clocks.get(process_of[int(previous)])):
            continue
        believed = deadline[int(previous)] + evidence.clock_offset
        if believed > float(e["at"]) + 0.05:
            report.deadline_problems.append(
                f"job {e['job_id']}: token {previous}'s holder believed it owned the job until "
                f"{believed - float(e['at']):.3f} s after token {e['token']} took it"
            )


def _check_grants_kept(evidence: Evidence, report: Report) -> None:
    """No lease may be declared lost (its deadline passed, or zero rows) before half of it
    ran out on the database's clock: a worker whose lease clock started before its claim
    was sent (while it waited for a connection after an outage) threw such grants away."""
    granted = {
        int(e["token"]): float(e["at"]) for e in evidence.journal if e["kind"] == "job_claimed"
    }
    for e in evidence.journal:
        if e["kind"] != "heartbeat_lost" or e.get("code") not in ("deadline_passed", "zero_rows"):
            continue
        at = granted.get(int(e["token"]))
        if at is not None and float(e["at"]) - at < evidence.lease / 2:
            report.deadline_problems.append(
                f"job {e['job_id']}: token {e['token']}'s lease was declared lost "
                f"({e.get('code')}) {float(e['at']) - at:.3f} s after it was granted"
            )


# -- recovery --------------------------------------------------------------------------


def _check_recovery(evidence: Evidence, report: Report) -> None:
    expired = [e for e in evidence.journal if e["kind"] == "lease_expired"]
    report.orphans = len(expired)
    for e in expired:
        age = evidence.lease + float(e.get("duration_ms") or 0) / 1000.0
        report.orphan_age_max = max(report.orphan_age_max, age)
    faults = sorted(evidence.faults, key=lambda f: f.start)
    attributed: set[int] = set()
    for index, fault in enumerate(faults):
        later = [
            f.start
            for f in faults[index + 1 :]
            if "*" in (f.target, fault.target) or f.target == fault.target
        ]
        window_end = min(later, default=math.inf)
        # A job was orphaned by this fault if its holder's last extension landed around
        # the fault's start (at most a lease before it, or ``grace`` after it) and it was
        # taken over after the fault began: what happened to it later is another story.
        orphans = [
            e
            for e in expired
            if fault.start <= float(e["at"]) < window_end
            and (fault.target == "*" or e.get("worker") == fault.target)
            and fault.start - evidence.lease
            <= _last_extension(e, evidence.lease)
            <= fault.start + fault.grace + 0.25
        ]
        if not orphans:
            continue
        attributed.update(id(e) for e in orphans)
        taken = max(float(e["at"]) for e in orphans) - fault.reference_time
        taken = max(taken, 0.0)
        report.recovery.append(taken)
        bound = report.recovery_bound + fault.grace
        if taken > bound:
            report.recovery_problems.append(
                f"{fault.kind} on {fault.target} at {fault.start:.3f}: orphans taken over after "
                f"{taken:.3f} s (bound {bound:.3f} s)"
            )
    report.unattributed_orphans = sum(1 for e in expired if id(e) not in attributed)
    ends = [
        float(e["at"])
        for e in evidence.journal
        if e["kind"] in TERMINAL and e.get("at") is not None
    ]
    if faults and ends:
        last_heal = max(f.heal for f in faults)
        report.settled_after_last_fault = max(0.0, max(ends) - last_heal)
        allowed = report.recovery_bound + evidence.drain_allowance
        if report.settled_after_last_fault > allowed:
            report.recovery_problems.append(
                f"the run settled {report.settled_after_last_fault:.3f} s after its last fault "
                f"(bound {report.recovery_bound:.3f} s + drain {evidence.drain_allowance:.3f} s)"
            )


def _last_extension(expired: Row, lease: float) -> float:
    """When the expired lease was last extended: its end minus one lease (its end is
    ``duration_ms`` before the take-over)."""
    return float(expired["at"]) - float(expired.get("duration_ms") or 0) / 1000.0 - lease


# -- coverage --------------------------------------------------------------------------


def _check_coverage(evidence: Evidence, report: Report) -> None:
    expired = [e for e in evidence.journal if e["kind"] == "lease_expired"]
    claims = [e for e in evidence.journal if e["kind"] == "job_claimed"]
    trouble: dict[Any, list[float]] = defaultdict(list)
    for e in evidence.history:
        if e.get("ev") in NOTICED:
            trouble[e.get("worker")].append(float(e["wall"]))
    coverage: dict[str, dict[str, int]] = {}
    for fault in evidence.faults:
        entry = coverage.setdefault(fault.kind, {"injected": 0, "fired": 0, "effective": 0})
        entry["injected"] += 1
        if not fault.fired:
            continue
        entry["fired"] += 1
        if _effective(fault, evidence.lease, expired, claims, trouble):
            entry["effective"] += 1
    report.coverage = coverage
    for kind in dict.fromkeys([*evidence.expected_faults, *coverage]):
        entry = coverage.get(kind, {"injected": 0, "fired": 0, "effective": 0})
        if entry["fired"] == 0:
            report.uncovered.append(f"{kind}: never fired ({entry['injected']} injected)")
        elif entry["effective"] == 0:
            report.uncovered.append(f"{kind}: fired {entry['fired']} times but touched no job")


# What a worker logs when a fault reaches it.
NOTICED = frozenset(
    {"ownership_unknown", "heartbeat_lost", "claim_failed", "commit_uncertain", "result_rejected"}
)


def _effective(
    fault: Fault,
    lease: float,
    expired: Sequence[Row],
    claims: Sequence[Row],
    trouble: Mapping[Any, Sequence[float]],
) -> bool:
    """Did the fault touch a job?

    A clock fault touched one if the skewed worker claimed any job (its leases were
    then judged under its own clock). Any other fault, if a job it orphaned was
    taken over, or a worker it hit noticed it (an unknown or lost lease, a failed
    claim, an uncertain or rejected commit) between its start and a while after
    it healed.
    """
    if fault.kind.startswith("clock"):
        return any(e.get("worker") == fault.target for e in claims)
    end = fault.heal + 2 * lease + 5.0
    for e in expired:
        if fault.start <= float(e["at"]) <= end and fault.target in ("*", e.get("worker")):
            return True
    targets = list(trouble) if fault.target == "*" else [fault.target]
    return any(fault.start - 1.0 <= t <= end for worker in targets for t in trouble.get(worker, ()))
