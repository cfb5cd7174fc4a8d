"""Runs end to end with an in-process worker: gates and loops, fan-out and join, failures.

The worker is the real one (claims, heartbeat thread, completer); only its process is
the test's. What a stage receives is what its tool declares from the run's context.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.integration.pipeline.pipeline_support import serving

import tenure
from tenure import Context, Stage, Verdict

POLICY: dict[str, Any] = {"lease": 5, "heartbeat": 1, "jitter": 1, "backoff": 0.01}


def make_app(dsn: str) -> tenure.App:
    app = tenure.App(dsn)
    seen: list[tuple[str, dict[str, Any]]] = []
    app.seen = seen  # type: ignore[attr-defined]

    @app.tool(**POLICY)
    async def develop(ctx: Context, task: str, feedback: dict[str, Any] | None = None) -> Any:
        seen.append(("develop", {"task": task, "feedback": feedback}))
        fixed = feedback is not None and feedback["verdict"] == "reject"
        return {"patch": f"{task}+tests" if fixed else task}

    @app.tool(**POLICY)
    async def qa(ctx: Context, patch: str, round: int) -> Verdict:
        seen.append(("qa", {"patch": patch, "round": round}))
        if not patch.endswith("+tests"):
            return Verdict("reject", reason="no tests", diagnosis=f"{patch} changes untested code")
        return Verdict("approve")

    @app.tool(**POLICY)
    async def secops(ctx: Context, patch: str) -> Verdict:
        return Verdict("approve")

    @app.tool(**POLICY)
    async def part(ctx: Context, stage: str, run_id: int) -> dict[str, Any]:
        return {stage: f"done by run {run_id}"}

    @app.tool(**POLICY)
    async def lint_gate(ctx: Context, round: int) -> Verdict:
        return Verdict("reject" if round == 1 else "approve", reason="style")

    @app.tool(**POLICY)
    async def merge(ctx: Context, **context: Any) -> dict[str, Any]:
        seen.append(("merge", context))
        return {"merged": sorted(k for k in context if k.startswith("part"))}

    @app.tool(**POLICY, max_attempts=1)
    async def broken(ctx: Context) -> None:
        raise tenure.PermanentError("the receiver refused the request")

    @app.tool(**POLICY)
    async def sloppy_gate(ctx: Context) -> dict[str, str]:
        return {"decision": "approve"}  # not a tenure.Verdict

    app.pipeline(
        "review",
        [
            Stage("develop", next="qa"),
            Stage("qa", on={"approve": "secops", "reject": "develop"}),
            Stage("secops", on={"approve": ()}),
        ],
    )
    app.pipeline(
        "fan",
        [
            Stage("start", tool="part", next=("part_b", "part_c")),
            Stage("part_b", tool="part", next="lint"),
            Stage("lint", tool="lint_gate", on={"approve": "merge", "reject": "part_b"}),
            Stage("part_c", tool="part", next="merge"),
            Stage("merge", after=("lint", "part_c")),
        ],
    )
    app.pipeline("fails", [Stage("first", tool="part", next="broken"), Stage("broken")])
    app.pipeline("sloppy", [Stage("gate", tool="sloppy_gate", on={"approve": ()})])
    return app


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[tenure.App]:
    async with serving(make_app(tenure_dsn)) as app:
        yield app


def history(run: tenure.Run) -> list[tuple[str, int, str, str | None]]:
    return [(s.name, s.round, s.state, s.decision) for s in run.stages]


async def test_a_rejected_gate_sends_its_reason_to_the_correction_and_is_asked_again(
    app: tenure.App,
) -> None:
    run = await app.start_run("review", {"task": "PR-7"}, idempotency_key="pr:7")
    assert run.created and [s.name for s in run.current()] == ["develop"]
    done = await app.wait_run(run.id, timeout=30)
    assert history(done) == [
        ("develop", 1, "succeeded", None),
        ("qa", 1, "succeeded", "reject"),
        ("develop", 2, "succeeded", None),
        ("qa", 2, "succeeded", "approve"),
        ("secops", 1, "succeeded", "approve"),
    ]
    assert done.result == {"verdict": "approve"}
    corrections = [args for name, args in app.seen if name == "develop"]  # type: ignore[attr-defined]
    assert corrections[1]["feedback"] == {
        "stage": "qa",
        "verdict": "reject",
        "reason": "no tests",
        "diagnosis": "PR-7 changes untested code",
    }
    keys = [s.job.idempotency_key for s in done.stages if s.job is not None]
    assert keys == [f"run:{run.id}:{n}:{r}" for n, r, _, _ in history(done)]
    again = await app.start_run("review", {"task": "PR-7"}, idempotency_key="pr:7")
    assert again.id == run.id and not again.created
    with pytest.raises(tenure.IdempotencyConflict, match="different input"):
        await app.start_run("review", {"task": "PR-8"}, idempotency_key="pr:7")


async def test_fan_out_and_a_join_that_waits_for_every_branch_of_its_round(
    app: tenure.App,
) -> None:
    run = await app.start_run("fan", {})
    done = await app.wait_run(run.id, timeout=30)
    assert sorted(history(done)) == sorted(
        [
            ("start", 1, "succeeded", None),
            ("part_b", 1, "succeeded", None),
            ("part_c", 1, "succeeded", None),
            ("lint", 1, "succeeded", "reject"),
            ("part_b", 2, "succeeded", None),
            ("lint", 2, "succeeded", "approve"),
            ("merge", 1, "succeeded", None),
        ]
    )
    (merge,) = [s for s in done.stages if s.name == "merge"]
    assert merge.arrived == ("lint", "part_c")
    jobs = {(s.name, s.round): s.job_id for s in done.stages}
    last = max(jobs[("lint", 2)] or 0, jobs[("part_c", 1)] or 0)
    assert merge.job_id is not None and merge.job_id > last  # queued only after both
    dispatched = [e for e in await app.admin.events(merge.job_id) if e["kind"] == "dispatched"]
    assert len(dispatched) == 1 and dispatched[0]["detail"]["run"] == run.id
    (context,) = [args for name, args in app.seen if name == "merge"]  # type: ignore[attr-defined]
    assert context["part_b"] == context["part_c"] == f"done by run {run.id}"
    assert done.result == {"merged": ["part_b", "part_c"]}


async def test_a_failed_stage_fails_the_run_with_the_cause(app: tenure.App) -> None:
    run = await app.start_run("fails", {})
    with pytest.raises(tenure.RunFailed, match="stage_failed") as failed:
        await app.wait_run(run.id, timeout=30)
    ended: tenure.Run = failed.value.run  # type: ignore[assignment]
    assert ended.error is not None
    assert ended.error["stage"] == "broken" and ended.error["cause"] == "permanent"
    assert history(ended)[-1] == ("broken", 1, "failed", None)


async def test_a_gate_without_a_verdict_fails_clearly(app: tenure.App) -> None:
    run = await app.start_run("sloppy", {})
    with pytest.raises(tenure.RunFailed) as failed:
        await app.wait_run(run.id, timeout=30)
    ended: tenure.Run = failed.value.run  # type: ignore[assignment]
    assert ended.error is not None and ended.error["cause"] == "no_verdict"
    (gate,) = ended.stages
    assert gate.job is not None and gate.job.error is not None
    assert gate.job.error["message"] == "gate 'gate' must return a tenure.Verdict"


async def test_input_the_first_stage_cannot_take_is_refused_and_writes_nothing(
    app: tenure.App,
) -> None:
    with pytest.raises(tenure.PayloadError, match=r"needs \['task'\]"):
        await app.start_run("review", {"title": "no task"})
    with pytest.raises(tenure.PolicyError, match="unknown pipeline 'nope'"):
        await app.start_run("nope", {})
    assert await app.admin.jobs() == []
    with pytest.raises(tenure.RunNotFound):
        await app.get_run(1)
