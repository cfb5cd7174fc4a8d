"""Moving runs on: one transaction per transition, under the run's row lock.

A transition is one transaction: lock the run, read its stages, then write
everything the outcome means in one statement (apply_transition) — the stage
job's fenced commit, the stage's close, the run's new context and state, and
the next stages' jobs. Every write of that
statement passes through the same gate (the fenced commit, or the
compare-and-set of the stage for a verdict from outside), so all of it lands
or none of it does. So the two windows in which a review engine that recorded
a gate's verdict and dispatched the next step separately lost work cannot
exist: before the commit nothing was recorded and the stage's lease brings it
back; after it, the next step is already a queued job.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from .._errors import Conflict, IdempotencyConflict, PayloadError, PolicyError, RunNotFound
from .._payload import MAX_PAYLOAD_BYTES, MAX_RESULT_BYTES, encode, fingerprint
from .._states import has_ended
from .._store import (
    ClaimedJob,
    Finish,
    RunRow,
    RunTransaction,
    StageRow,
    Store,
    Transition,
)
from ._model import Graph, Pipeline, Run, RunStage, Verdict, run_of_key
from ._transitions import Broken, Outcome, decide_outcome, decide_redispatch, decide_start

TRANSITION_TIMEOUT = 10.0
MAX_RESCUE_STEPS = 50  # per run and sweep; a run needing more is taken up again next sweep


def _result_text(value: Any) -> str | None:
    return None if value is None else encode(value, "result", MAX_RESULT_BYTES)


class Transitions:
    """Applies stage outcomes, verdicts, starts and rescues to runs, one transaction each."""

    def __init__(self, store: Store, *, timeout: float = TRANSITION_TIMEOUT) -> None:
        self._store = store
        self._timeout = timeout

    # -- the worker's side -------------------------------------------------------

    @staticmethod
    def owns(job: ClaimedJob) -> bool:
        """Whether the job may be a stage (its key says so); `commit` has the last word."""
        return run_of_key(job.idempotency_key) is not None

    async def commit(self, owner: str, job: ClaimedJob, finish: Finish) -> bool | None:
        """Commit a stage job's outcome together with its transition.

        True: committed. False: refused — the lease is gone; nothing was written.
        None: the job moves no run (not a stage, or a stage already decided, e.g. a
        job an operator retried after its run ended): commit it like any other job.
        A late or duplicate outcome of a decided stage is then refused by the fenced
        commit itself, since whoever decided the stage also ended its job.
        """
        run_id = run_of_key(job.idempotency_key)
        state = finish.state
        if run_id is None or state == "queued" or state == "waiting":
            return None  # a retry or a suspension decides no stage
        result = None if finish.result_json is None else json.loads(finish.result_json)
        outcome = Outcome(state, result, finish.result_json, finish.error)
        async with self._store.transaction(self._timeout) as tx:
            run = await tx.lock_run(run_id)
            rows = [] if run is None else await tx.stages(run_id)
            row = next((r for r in rows if r.job_id == job.id), None)
            if run is None or row is None or row.state != "open":
                return None
            plan = decide_outcome(Graph.from_json(run.graph), run, rows, row, outcome)
            _, applied = await tx.apply(
                replace(plan, mode="commit", owner=owner, token=finish.token)
            )
        return applied

    # -- producers and gates -----------------------------------------------------

    async def start(self, pipeline: Pipeline, input: Any, key: str) -> tuple[int, bool]:
        """Start a run (its first stages are queued in the same transaction).

        Returns (run id, created). A repeated key returns the existing run; the same
        key with another pipeline or input raises IdempotencyConflict.
        """
        input = {} if input is None else input
        if not isinstance(input, dict):
            raise PayloadError("a run's input must be a JSON object (a dict)")
        text = encode(input, "run input", MAX_PAYLOAD_BYTES)
        digest = fingerprint(pipeline.name + "\n" + text)
        try:
            decide_start(pipeline.graph, 0, input)  # refuse input the first stages cannot take
        except Broken as exc:
            raise PayloadError(str(exc)) from None
        async with self._store.transaction(self._timeout) as tx:
            run_id = await tx.insert_run(
                pipeline=pipeline.name,
                key=key,
                input_json=text,
                input_hash=digest,
                graph=pipeline.graph.to_json(),
            )
            if run_id is not None:
                await tx.apply(decide_start(pipeline.graph, run_id, input))
                return run_id, True
        found = await self._store.run_by_key(key)
        if found is None:
            raise RunNotFound(f"run with idempotency key {key!r} vanished during start")
        if found.pipeline != pipeline.name or found.input_hash != digest:
            raise IdempotencyConflict(
                f"idempotency key {key!r} already names run {found.id} ({found.pipeline}) "
                "with a different " + ("pipeline" if found.pipeline != pipeline.name else "input")
            )
        return found.id, False

    async def record_verdict(self, run_id: int, stage: str, token: int, verdict: Verdict) -> None:
        """Record a gate's verdict that arrives from outside a worker (compare-and-set).

        Accepted only while the gate's stage is open and its job runs under ``token``
        with a live lease, or waits at a waitpoint under ``token`` (a gate that asked a
        person and holds nothing meanwhile); anything else is a Conflict, and writes
        nothing. Accepted, the gate's open waitpoint closes with it.
        """
        if not isinstance(verdict, Verdict):
            raise PolicyError(
                f"record_verdict takes a tenure.Verdict, got {type(verdict).__name__}"
            )
        result = verdict.as_result()
        async with self._store.transaction(self._timeout) as tx:
            run = await tx.lock_run(run_id)
            if run is None:
                raise RunNotFound(f"no run {run_id}")
            graph = Graph.from_json(run.graph)
            spec = graph.stages.get(stage)
            if spec is None or spec.on is None:
                raise PolicyError(f"stage {stage!r} of pipeline {run.pipeline!r} is not a gate")
            if verdict.decision not in spec.on:
                raise PolicyError(
                    f"gate {stage!r} knows the decisions {sorted(spec.on)}, "
                    f"not {verdict.decision!r}"
                )
            rows = await tx.stages(run_id)
            row = next((r for r in _open(rows, stage) if r.job_token == token), None)
            if run.state != "running" or row is None:
                raise Conflict(_not_owner(run, rows, stage, token))
            outcome = Outcome("succeeded", result, encode(result, "verdict"))
            plan = decide_outcome(graph, run, rows, row, outcome)
            _, applied = await tx.apply(replace(plan, mode="commit", token=token))
            if not applied:
                raise Conflict(
                    f"token {token} no longer holds stage {stage!r} of run {run_id}: "
                    "its lease ended or the job was reclaimed"
                )

    # -- reading -----------------------------------------------------------------

    async def get(self, run_id: int) -> Run:
        row = await self._store.get_run(run_id)
        if row is None:
            raise RunNotFound(f"no run {run_id}")
        stages = await self._store.run_stages(run_id)
        ids = [s.job_id for s in stages if s.job_id is not None]
        jobs = {job.id: job for job in await self._store.jobs_by_ids(ids)} if ids else {}
        return _run(row, stages, jobs)

    # -- rescue ------------------------------------------------------------------

    async def rescue(
        self, *, leases: int, runs: int, resend_after: float
    ) -> tuple[list[int], int, Counter[str]]:
        """One rescue batch: fail exhausted leases, then repair runs, one transaction each.

        Returns (jobs failed, runs looked at, what was done to them). Rows are taken
        with SKIP LOCKED and acted on only while their state still calls for it, so a
        second rescuer at the same moment takes other rows, and one coming later finds
        nothing left to do: no row is rescued twice. Short transactions keep the locks
        of running jobs (a failed run stops its other stages) from stalling heartbeats.
        """
        async with self._store.transaction(self._timeout) as tx:
            failed = await tx.fail_exhausted_leases(leases)
            due = await tx.runs_to_rescue(runs, round(resend_after * 1000))
        counts: Counter[str] = Counter()
        for run_id in due:
            async with self._store.transaction(self._timeout) as tx:
                counts += await self._rescue_run(tx, run_id, resend_after)
        return failed, len(due), counts

    async def _rescue_run(
        self, tx: RunTransaction, run_id: int, resend_after: float
    ) -> Counter[str]:
        counts: Counter[str] = Counter()
        for attempt in range(MAX_RESCUE_STEPS):
            # The first read takes the lock (or leaves the run to whoever holds it); the
            # next ones are fresh pictures after each repair.
            run = await tx.lock_run(run_id, skip_locked=attempt == 0)
            if run is None:
                break
            rows = await tx.stages(run_id)
            repair = _rescue_step(run, rows, timedelta(seconds=resend_after))
            if repair is None:
                break
            action, what = repair
            if isinstance(what, int):
                done = await tx.retry_job(what)
            else:
                done = (await tx.apply(what))[1]
            if not done:
                break
            counts[action] += 1
        return counts


def _open(rows: Sequence[StageRow], stage: str) -> list[StageRow]:
    return [r for r in rows if r.name == stage and r.kind == "stage" and r.state == "open"]


def _not_owner(run: RunRow, rows: Sequence[StageRow], stage: str, token: int) -> str:
    if run.state != "running":
        return f"run {run.id} is {run.state}; a verdict for stage {stage!r} comes too late"
    current = _open(rows, stage)
    if not current:
        now = ", ".join(sorted({r.name for r in rows if r.kind == "stage" and r.state == "open"}))
        return (
            f"stage {stage!r} of run {run.id} is not open (current: {now or 'none'}); "
            f"the verdict of token {token} comes too late"
        )
    holders = ", ".join(str(r.job_token) for r in current)
    return f"token {token} does not hold stage {stage!r} of run {run.id} (held by token {holders})"


def _rescue_step(
    run: RunRow, rows: Sequence[StageRow], resend_after: timedelta
) -> tuple[str, Transition | int] | None:
    """The next repair a locked run needs, or None. Decided from state, never from age
    (except that a failed delivery rests ``resend_after`` before it is sent again)."""
    graph = Graph.from_json(run.graph)
    for row in rows:
        if row.state != "open":
            continue
        if not row.job_exists:
            return "redispatched", decide_redispatch(graph, row)
        if row.kind == "outbox" and row.job_state == "failed":
            assert row.job_finished_at is not None and row.job_id is not None
            if row.db_now - row.job_finished_at >= resend_after:
                return "resent", row.job_id
            continue
        if has_ended(row.job_state):
            outcome = Outcome(
                row.job_state, row.job_result, _result_text(row.job_result), row.job_error
            )
            plan = decide_outcome(graph, run, rows, row, outcome)
            return "adopted", replace(plan, mode="adopt", expect_state=row.job_state)
    if run.state == "running" and not any(r.kind == "stage" and r.state == "open" for r in rows):
        error = {"code": "no_current_stage", "message": "the run had no open stage left"}
        if not any(r.kind == "stage" for r in rows):
            try:
                return "redispatched", decide_start(graph, run.id, run.context)
            except Broken as exc:
                error = {"code": exc.code, "message": str(exc)}
        return "ended", Transition(run.id, run_state="failed", run_error=error, stop_open=True)
    return None


# What Run and RunStage show of their rows as they are.
_RUN_FIELDS = (
    "id pipeline state idempotency_key created_at updated_at finished_at error input result"
).split()
_STAGE_FIELDS = "id name round kind state decision job_id created_at decided_at".split()


def _run(row: RunRow, stages: Sequence[StageRow], jobs: dict[int, Any]) -> Run:
    return Run(
        **{name: getattr(row, name) for name in _RUN_FIELDS},
        stages=tuple(
            RunStage(
                **{name: getattr(s, name) for name in _STAGE_FIELDS},
                arrived=tuple(s.arrived),
                job=None if s.job_id is None else jobs.get(s.job_id),
            )
            for s in stages
        ),
    )
