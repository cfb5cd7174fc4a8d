"""Planning vs execution: a model's plan is checked step by step, then run as a pipeline.

Nothing in a plan is trusted: an unknown tool, arguments the tool does not take, a time
limit above the tool's cap, or a key/lease the plan tries to choose is refused — every
problem of every step at once — and nothing is queued.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.integration.pipeline.pipeline_support import Tables, serving

import tenure
from tenure import Context


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[tenure.App]:
    app = tenure.App(tenure_dsn)

    @app.tool(lease=5, heartbeat=1, jitter=1, time_limit=60, max_attempts=3)
    async def search(ctx: Context, query: str, limit: int = 10) -> dict[str, Any]:
        return {"query": query, "hits": limit}

    @app.tool(lease=5, heartbeat=1, jitter=1, time_limit=120, max_attempts=2)
    async def summarize(ctx: Context, text: str) -> str:
        return text.upper()

    yield app
    await app.aclose()


MODEL_PLAN: list[dict[str, Any]] = [
    {"tool": "search", "arguments": {"query": "lease fencing"}, "time_limit": 30},
    {"tool": "summarize", "arguments": {"text": "two steps"}},
]


async def test_a_valid_plan_runs_in_order_with_keys_and_policies_chosen_by_tenure(
    app: tenure.App,
) -> None:
    run = await app.dispatch_plan(MODEL_PLAN, idempotency_key="agent:42:plan:1")
    async with serving(app):
        done = await app.wait_run(run.id, timeout=30)
    assert [(s.name, s.state) for s in done.stages] == [
        ("step-1", "succeeded"),
        ("step-2", "succeeded"),
    ]
    first, second = (s.job for s in done.stages)
    assert first is not None and second is not None
    assert first.payload == {"query": "lease fencing"} and first.result["hits"] == 10
    assert first.idempotency_key == f"run:{run.id}:step-1:1" and first.max_attempts == 3
    assert second.max_attempts == 2 and done.result == "TWO STEPS"
    assert second.id > first.id  # step 2 was queued by step 1's commit, not before
    assert done.input == {"plan": MODEL_PLAN}  # what the model proposed stays with the run
    again = await app.dispatch_plan(MODEL_PLAN, idempotency_key="agent:42:plan:1")
    assert again.id == run.id and not again.created


async def test_a_plan_with_an_unknown_tool_or_an_over_cap_time_limit_queues_nothing(
    app: tenure.App, tables: Tables
) -> None:
    plan: list[Any] = [
        {"tool": "search", "arguments": {"query": "ok"}},
        {"tool": "delete_everything", "arguments": {}},
        {"tool": "summarize", "arguments": {"text": "x"}, "time_limit": 3600},
        {"tool": "search", "arguments": {"query": "x", "shell": "rm -rf /"}},
        {"tool": "search", "arguments": {"query": "x"}, "idempotency_key": "mine", "lease": 1},
        "search everything",
        {"tool": "search", "arguments": {"query": 42}},  # the right name, the wrong type
    ]
    before = tables.snapshot()
    with pytest.raises(tenure.PlanRejected) as rejected:
        await app.dispatch_plan(plan)
    problems = rejected.value.problems
    assert len(problems) == 6
    assert problems[0].startswith("step 2: unknown tool 'delete_everything'")
    assert "registered: search, summarize" in problems[0]
    assert problems[1] == ("step 3 (summarize): time_limit 3600 s exceeds the tool's cap of 120 s")
    assert problems[2] == "step 4 (search): shell: Extra inputs are not permitted (got 'rm -rf /')"
    assert problems[3].startswith("step 5: idempotency_key, lease cannot come from a plan")
    assert problems[4] == "step 6: must be an object with 'tool' and 'arguments'"
    assert problems[5] == "step 7 (search): query: Input should be a valid string (got 42)"
    assert isinstance(rejected.value, tenure.PolicyError)
    assert tables.snapshot() == before
    with pytest.raises(tenure.PlanRejected, match="a plan must be a list of steps"):
        await app.dispatch_plan("search then summarize")  # type: ignore[arg-type]
    with pytest.raises(tenure.PlanRejected, match="1-100 steps"):
        await app.dispatch_plan([])
    assert tables.snapshot() == before
