"""Model-based test of the lease protocol against the real database and receiver guard.

Hypothesis drives enqueue, claim, heartbeat, commit, side effects at a fenced
receiver, crashes, restarts under the same worker name (a zombie keeps its old
token), rescue and the passage of time, and checks the invariants after every
step: tokens only grow, a stale holder never extends or commits, a rejected
write changes nothing, at most one commit per job, the receiver's high-water
mark never decreases and applies each effect at most once, and no job is lost.

Time passes by moving every running lease back (``lease_until - x``, and every
session's last beat, which session leases follow), which is the same as advancing
the database clock for every lease comparison; the worker never sends a time of
its own.

The mutation tests patch the SQL — the commit without its token predicate, the
receiver without its high-water check — and require the model's checks to catch
it on the fault scenario that exposes it (a zombie under the same worker name;
a stale owner acting after a newer one), replayed step by step through the same
state machine so the check is deterministic.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from tests.integration.store.helpers import new_job

from tenure import StaleFence
from tenure._store import Finish, LeaseConnection, Store
from tenure._store import _connection as store_module
from tenure.fence import SyncFenceGuard, migrate_fence
from tenure.fence import _guard as guard_module
from tenure.fence._schema import QUERIES as fence_queries

LEASE_MS = 10_000
# Few workers and jobs, so that interesting interleavings (reclaims, zombies) are common.
WORKERS = ("w1", "w2")
KEYS = ("job-0", "job-1")


@dataclasses.dataclass
class Incarnation:
    """One process of a worker; after a restart the old one may live on as a zombie."""

    owner: str
    held: dict[int, int] = dataclasses.field(default_factory=dict)  # job id -> token


class World:
    """Connections shared by every example of one test (opened once)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.loop = asyncio.new_event_loop()
        self.store = Store(dsn, max_size=2)
        self.loop.run_until_complete(self.store.open())
        self.lease = LeaseConnection(dsn)
        self.sql = psycopg.connect(dsn, autocommit=True)
        migrate_fence(dsn)
        self.sql.execute(
            "CREATE TABLE IF NOT EXISTS model_effects (key text NOT NULL, token bigint NOT NULL)"
        )
        self.guard = SyncFenceGuard(dsn, insecure=True, lock_timeout=2.0, max_connections=2)
        self.guard.open()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def reset(self) -> None:
        self.sql.execute(
            "TRUNCATE tenure_jobs, tenure_steps, tenure_events, tenure_fence_scopes,"
            " tenure_fence_requests, model_effects, tenure_sessions"
        )

    def close(self) -> None:
        self.guard.close()
        self.lease.close()
        self.sql.close()
        self.run(self.store.close())
        self.loop.close()


class LeaseModel(RuleBasedStateMachine):
    world: World

    def __init__(self) -> None:
        super().__init__()
        self.world.reset()
        self.alive = {name: Incarnation(name) for name in WORKERS}
        self.zombies: list[Incarnation] = []
        self.enqueued: set[str] = set()
        self.last_token = self._max_token()
        self.committed: dict[int, int] = {}
        self.marks: dict[str, int] = {}

    # -- helpers ---------------------------------------------------------------

    def _max_token(self) -> int:
        row = self.world.sql.execute(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM tenure_fence_token"
        ).fetchone()
        return int(row[0]) if row else 0

    def _row(self, job_id: int) -> tuple[Any, ...]:
        row = self.world.sql.execute(
            "SELECT state, owner, token, attempt, lease_until, result, error"
            " FROM tenure_jobs WHERE id = %s",
            (job_id,),
        ).fetchone()
        assert row is not None, f"job {job_id} vanished"
        return tuple(row)

    def _actors(self) -> list[Incarnation]:
        return [*self.alive.values(), *self.zombies]

    def _holding(self, pick: int) -> tuple[Incarnation, int, int] | None:
        pairs = [(a, j, t) for a in self._actors() for j, t in sorted(a.held.items())]
        return pairs[pick % len(pairs)] if pairs else None

    # -- rules -----------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS))
    def enqueue(self, key: str) -> None:
        self.world.run(self.world.store.enqueue(new_job(key, attempts=3)))
        self.enqueued.add(key)

    @rule(worker=st.sampled_from(WORKERS), limit=st.integers(1, 3))
    def claim(self, worker: str, limit: int) -> None:
        me = self.alive[worker]
        for job in self.world.run(self.world.store.claim(worker, {"t": LEASE_MS}, limit)):
            assert job.token > self.last_token, "fencing tokens must only grow"
            self.last_token = job.token
            me.held[job.id] = job.token

    @rule(worker=st.sampled_from(WORKERS))
    def lease_expires_then_claim(self, worker: str) -> None:
        """The common fault: a holder goes silent past its lease, someone else claims."""
        self.time_passes(LEASE_MS // 1000 + 1)
        self.claim(worker, 1)

    @rule(pick=st.integers(0, 50))
    def heartbeat(self, pick: int) -> None:
        chosen = self._holding(pick)
        if chosen is None:
            return
        actor, _, _ = chosen
        before = {job_id: self._row(job_id) for job_id in actor.held}
        answers = self.world.lease.extend(
            actor.owner, [(j, t, LEASE_MS) for j, t in actor.held.items()], 5.0
        )
        for answer in answers:
            state, owner, token, *_ = before[answer.job_id]
            mine = actor.held[answer.job_id]
            if answer.lease_until is not None:
                assert (state, owner, token) == ("running", actor.owner, mine), (
                    "a heartbeat extended a lease its sender does not hold"
                )
            else:
                del actor.held[answer.job_id]  # zero rows: lost, never retried

    @rule(pick=st.integers(0, 50), succeed=st.booleans())
    def commit(self, pick: int, succeed: bool) -> None:
        chosen = self._holding(pick)
        if chosen is None:
            return
        actor, job_id, token = chosen
        before = self._row(job_id)
        outcome = (
            Finish(job_id, token, "succeeded", result_json=f'{{"token": {token}}}')
            if succeed
            else Finish(job_id, token, "queued", error={"code": "retryable"}, delay_ms=0)
        )
        verdict = self.world.run(self.world.store.finish_many(actor.owner, [outcome]))
        del actor.held[job_id]
        if verdict[job_id]:
            assert before[0] == "running" and before[1:3] == (actor.owner, token), (
                f"commit by token {token} accepted while the row was {before[:3]}"
            )
            if succeed:
                assert job_id not in self.committed, "a job was committed twice"
                self.committed[job_id] = token
        else:
            assert self._row(job_id) == before, "a rejected commit changed the row"

    @rule(pick=st.integers(0, 50))
    def send_effect(self, pick: int) -> None:
        chosen = self._holding(pick)
        if chosen is None:
            return
        _, job_id, token = chosen
        scope, key = f"tool-job:{job_id}", f"tool-job:{job_id}:effect"
        try:
            with self.world.guard.fenced(
                scope=scope, token=token, key=key, fingerprint="same-body"
            ) as slot:
                if slot.replay is None:
                    assert slot.conn is not None
                    slot.conn.execute(
                        "INSERT INTO model_effects (key, token) VALUES (%s, %s)", (key, token)
                    )
                    slot.complete(200, b"{}", {})
        except StaleFence as exc:
            assert exc.highest > token
            return
        assert token >= self.marks.get(scope, 0), "the receiver accepted a stale token"
        self.marks[scope] = token

    @rule(worker=st.sampled_from(WORKERS))
    def crash(self, worker: str) -> None:
        self.alive[worker] = Incarnation(worker)  # the process and its memory are gone

    @rule(worker=st.sampled_from(WORKERS))
    def restart_leaving_a_zombie(self, worker: str) -> None:
        """The old process lives on (paused, partitioned) under the same owner name."""
        if self.alive[worker].held:
            self.zombies.append(self.alive[worker])
        self.alive[worker] = Incarnation(worker)

    @precondition(lambda self: bool(self.zombies))
    @rule(index=st.integers(0, 10))
    def zombie_dies(self, index: int) -> None:
        self.zombies.pop(index % len(self.zombies))

    @rule(seconds=st.sampled_from([1, 5, 11, 30]))
    def time_passes(self, seconds: int) -> None:
        self.world.sql.execute(
            "UPDATE tenure_jobs SET lease_until = lease_until - make_interval(secs => %s)"
            " WHERE state = 'running'",
            (seconds,),
        )
        # Leases that follow a worker's session (migration 0023) move with its last beat.
        self.world.sql.execute(
            "UPDATE tenure_sessions SET beat_at = beat_at - make_interval(secs => %s)",
            (seconds,),
        )

    @rule()
    def rescue(self) -> None:
        for job_id in self.world.run(self.world.store.fail_exhausted_leases(100)):
            assert self._row(job_id)[0] == "failed"

    # -- invariants ------------------------------------------------------------

    @invariant()
    def one_commit_per_job(self) -> None:
        twice = self.world.sql.execute(
            "SELECT job_id FROM tenure_events WHERE kind = 'succeeded'"
            " GROUP BY job_id HAVING count(*) > 1"
        ).fetchall()
        assert twice == []

    @invariant()
    def effects_once_and_marks_never_decrease(self) -> None:
        doubled = self.world.sql.execute(
            "SELECT key FROM model_effects GROUP BY key HAVING count(*) > 1"
        ).fetchall()
        assert doubled == [], "a side effect was applied twice"
        for scope, highest in self.world.sql.execute(
            "SELECT scope, highest_token FROM tenure_fence_scopes"
        ).fetchall():
            assert highest >= self.marks.get(scope, 0), "the receiver's mark went down"

    @invariant()
    def no_job_is_lost(self) -> None:
        rows = self.world.sql.execute(
            "SELECT idempotency_key, state, owner, lease_until, attempt, max_attempts"
            " FROM tenure_jobs"
        ).fetchall()
        assert {row[0] for row in rows} == self.enqueued
        for _key, state, owner, lease_until, attempt, max_attempts in rows:
            assert state in ("queued", "running", "succeeded", "failed")
            if state == "running":
                assert owner is not None and lease_until is not None
                assert attempt <= max_attempts


MODEL_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.fixture
def world(tenure_dsn: str) -> Iterator[World]:
    world = World(tenure_dsn)
    try:
        yield world
    finally:
        world.close()


def _run(world: World, machine_settings: settings = MODEL_SETTINGS) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    LeaseModel.world = world
    run_state_machine_as_test(LeaseModel, settings=machine_settings)


def test_lease_protocol_model(world: World) -> None:
    _run(world)


def _mutated(queries: Any, name: str, old: str, new: str) -> dict[str, Any]:
    patched = dict(queries)
    assert old in patched[name], f"the mutation no longer applies to {name}"
    patched[name] = patched[name].replace(old, new)
    return patched


def _zombie_commits(world: World) -> None:
    """A restarted worker's zombie (same owner name, old token) commits after a reclaim."""
    LeaseModel.world = world
    model = LeaseModel()
    model.enqueue("job-0")
    model.claim("w1", 1)
    model.restart_leaving_a_zombie("w1")
    model.lease_expires_then_claim("w1")
    zombie_pick = len(model.alive["w1"].held)  # the zombie's holding comes after w1's
    model.commit(zombie_pick, succeed=True)
    model.one_commit_per_job()


def _stale_effect_after_a_newer_one(world: World) -> None:
    """W1's lease lapses, W2 reclaims and acts at the receiver, then W1 acts late."""
    LeaseModel.world = world
    model = LeaseModel()
    model.enqueue("job-0")
    model.claim("w1", 1)
    model.lease_expires_then_claim("w2")
    model.send_effect(len(model.alive["w1"].held))  # w2's holding (after w1's)
    model.send_effect(0)  # w1's stale holding
    model.effects_once_and_marks_never_decrease()


def test_the_fault_scenarios_pass_on_the_real_protocol(world: World) -> None:
    _zombie_commits(world)
    _stale_effect_after_a_newer_one(world)


def test_model_catches_a_commit_without_its_token_predicate(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        store_module,
        "QUERIES",
        _mutated(store_module.QUERIES, "finish_many", "AND j.token = o.token", ""),
    )
    with pytest.raises(AssertionError, match="accepted while the row was"):
        _zombie_commits(world)


def test_model_catches_a_receiver_without_its_high_water_mark(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        guard_module,
        "QUERIES",
        _mutated(
            fence_queries,
            "raise_mark",
            "greatest(s.highest_token, excluded.highest_token)",
            "excluded.highest_token",
        ),
    )
    with pytest.raises(AssertionError, match="stale token"):
        _stale_effect_after_a_newer_one(world)
