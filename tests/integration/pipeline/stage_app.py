"""Stage tools for the pipeline tests, counted at a table, with crash hooks at exact points.

Worker processes load ``tests.integration.pipeline.stage_app:app`` (``TENURE_DSN`` names tenure's
schema); a test builds its own producer with ``build_app(dsn)``.

Every stage tool records each attempt in ``pipeline_attempts`` (the raw count) and its
effect in ``pipeline_effects`` under ``ctx.idempotency_key("effect")`` with ON CONFLICT
DO NOTHING: the effect is applied once however often the stage runs, and one row per
(run, stage, round) proves no stage was dispatched twice. The tables live in the schema
named by ``PIPELINE_TEST_DSN`` (the worker scrubs ``TENURE_DSN`` from its environment).

Crash hooks: with ``PIPELINE_CRASH_DIR`` set, a file ``{point}-{run}-{stage}`` there makes
the process SIGKILL itself once (whoever removes the file dies) at that point:

- ``during``: the stage's tool has started (and recorded its attempt);
- ``before_commit``: the tool returned; nothing of its outcome is written;
- ``in_transaction``: the transition statement ran; its transaction is not committed;
- ``after_commit``: the transition committed; the worker has not heard back yet.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import signal
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool

import tenure._store as _store
from tenure import App, Context, Stage, Verdict
from tenure._pipeline import _engine
from tenure._pipeline._model import run_of_key

LEASE = 1.5
HEARTBEAT = 0.3
JITTER = 0.5
ATTEMPTS = 20  # kills burn attempts; a stage must outlive several of them
# L > R·H + J: 1.5 > 2·0.3 + 0.5, so a dead owner is replaced within about two seconds.
POLICY: dict[str, Any] = {"lease": LEASE, "heartbeat": HEARTBEAT, "jitter": JITTER}
POLICY |= {"backoff": 0.05, "max_backoff": 0.5, "time_limit": 30.0, "max_attempts": ATTEMPTS}

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS pipeline_effects (
    seq       bigserial PRIMARY KEY,
    key       text        NOT NULL UNIQUE,
    run_id    bigint      NOT NULL,
    stage     text        NOT NULL,
    round     integer     NOT NULL,
    job_id    bigint      NOT NULL,
    token     bigint      NOT NULL,
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS pipeline_attempts (
    seq       bigserial PRIMARY KEY,
    run_id    bigint      NOT NULL,
    stage     text        NOT NULL,
    round     integer     NOT NULL,
    job_id    bigint      NOT NULL,
    token     bigint      NOT NULL,
    attempt   integer     NOT NULL,
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

RECORD_ATTEMPT = """
INSERT INTO pipeline_attempts (run_id, stage, round, job_id, token, attempt)
VALUES (%(run)s, %(stage)s, %(round)s, %(job)s, %(token)s, %(attempt)s)
"""

APPLY_EFFECT = """
INSERT INTO pipeline_effects (key, run_id, stage, round, job_id, token)
VALUES (%(key)s, %(run)s, %(stage)s, %(round)s, %(job)s, %(token)s)
ON CONFLICT (key) DO NOTHING
"""


def crash_if(point: str, run_id: int | str, stage: str) -> None:
    """SIGKILL this process if the test asked for it at this point (once)."""
    folder = os.environ.get("PIPELINE_CRASH_DIR")
    if not folder:
        return
    try:
        os.remove(Path(folder) / f"{point}-{run_id}-{stage}")
    except FileNotFoundError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


def _stage_of(job: _store.ClaimedJob) -> tuple[int, str]:
    run_id = run_of_key(job.idempotency_key)
    assert run_id is not None
    return run_id, job.idempotency_key.split(":")[2]


def _install_hooks() -> None:
    """Wrap the engine's commit and the transition statement with the crash points."""
    commit = _engine.Transitions.commit
    apply = _store.RunTransaction.apply

    @functools.wraps(commit)
    async def hooked_commit(
        self: _engine.Transitions, owner: str, job: _store.ClaimedJob, finish: _store.Finish
    ) -> bool | None:
        run_id, stage = _stage_of(job)
        crash_if("before_commit", run_id, stage)
        accepted = await commit(self, owner, job, finish)
        crash_if("after_commit", run_id, stage)
        return accepted

    @functools.wraps(apply)
    async def hooked_apply(self: _store.RunTransaction, t: _store.Transition) -> tuple[bool, bool]:
        answer = await apply(self, t)
        if t.stage_name is not None:
            crash_if("in_transaction", t.run_id, t.stage_name)
        return answer

    _engine.Transitions.commit = hooked_commit  # type: ignore[method-assign]
    _store.RunTransaction.apply = hooked_apply  # type: ignore[method-assign]


_effects: list[AsyncConnectionPool] = []  # one pool per worker process, opened on first use


async def _effects_pool() -> AsyncConnectionPool:
    if not _effects:
        pool = AsyncConnectionPool(
            os.environ["PIPELINE_TEST_DSN"],
            min_size=1,
            max_size=4,
            open=False,
            kwargs={"autocommit": True},
        )
        await pool.open()
        _effects.append(pool)
    return _effects[0]


async def _act(ctx: Context, run_id: int, stage: str, round: int, pause: float) -> None:
    """One stage's work: count the attempt, maybe crash, work a while, apply the effect."""
    facts = {"run": run_id, "stage": stage, "round": round, "job": ctx.job_id, "token": ctx.token}
    pool = await _effects_pool()
    async with pool.connection() as conn:
        await conn.execute(RECORD_ATTEMPT, {**facts, "attempt": ctx.attempt})
    crash_if("during", run_id, stage)
    await asyncio.sleep(pause * random.uniform(0.5, 1.5))
    ctx.ensure_owned()  # the effect is the irreversible step
    async with pool.connection() as conn:
        await conn.execute(APPLY_EFFECT, {**facts, "key": ctx.idempotency_key("effect")})


def build_app(dsn: str | None = None) -> App:
    """The stage tools and the two pipelines the tests run."""
    app = App(dsn)
    tool = functools.partial(app.tool, **POLICY)

    @tool()
    async def work(
        ctx: Context, run_id: int, stage: str, round: int, pause: float = 0.0
    ) -> dict[str, Any]:
        """A plain stage: its result lands in the run's context under its name."""
        await _act(ctx, run_id, stage, round, pause)
        return {stage: {"round": round, "token": ctx.token}}

    @tool()
    async def gate(
        ctx: Context,
        run_id: int,
        stage: str,
        round: int,
        pause: float = 0.0,
        rejects: dict[str, int] | None = None,
    ) -> Verdict:
        """A gate: rejects its first ``rejects[stage]`` rounds with a reason, then approves."""
        await _act(ctx, run_id, stage, round, pause)
        if round <= (rejects or {}).get(stage, 0):
            return Verdict("reject", reason=f"round {round} lacks tests", diagnosis="add tests")
        return Verdict("approve")

    # The review pipeline: developer agent → QA gate (may reject → correction → QA
    # again) → SecOps gate.
    app.pipeline(
        "review",
        [
            Stage("develop", tool="work", next="qa"),
            Stage("qa", tool="gate", on={"approve": "secops", "reject": "correct"}),
            Stage("correct", tool="work", next="qa"),
            Stage("secops", tool="gate", on={"approve": (), "reject": "correct"}),
        ],
    )
    # Five stages in a row, the middle one a gate: five stage executions per run.
    app.pipeline(
        "chain",
        [
            Stage("s1", tool="work", next="s2"),
            Stage("s2", tool="work", next="s3"),
            Stage("s3", tool="gate", on={"approve": "s4", "reject": ()}),
            Stage("s4", tool="work", next="s5"),
            Stage("s5", tool="work"),
        ],
    )
    return app


if os.environ.get("PIPELINE_CRASH_DIR"):
    _install_hooks()
app = build_app()
