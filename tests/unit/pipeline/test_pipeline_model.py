"""Declaring pipelines and planning transitions, without a database.

A pipeline is checked once, when it is declared, with messages that say what to fix;
a transition is planned by pure functions from the run's locked picture.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

import tenure
from tenure import Context, Stage, Verdict
from tenure._pipeline._model import Graph, run_of_key
from tenure._pipeline._transitions import Outcome, decide_outcome
from tenure._states import StageState
from tenure._store import RunRow, StageRow

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def make_app() -> tenure.App:
    app = tenure.App("dbname=unused")  # never connects: declarations only

    @app.tool()
    async def work(ctx: Context, task: str, round: int, note: str = "") -> None: ...

    @app.tool()
    async def judge(ctx: Context, **context: Any) -> Verdict:
        return Verdict("approve")

    @app.tool()
    def positional(ctx: Context, value: int, /) -> None: ...

    return app


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([Stage("a b", tool="work")], "stage name must match"),
        ([Stage("a", tool="work"), Stage("a", tool="work")], "declared twice"),
        ([Stage("a", tool="nope")], "uses tool 'nope', which is not registered"),
        ([Stage("a", tool="work", next="b")], "leads to unknown stage 'b'"),
        ([Stage("a", tool="judge", next="a", on={"ok": ()})], "both next and on"),
        ([Stage("a", tool="judge", on={"Approve!": ()})], "decision 'Approve!' must match"),
        ([Stage("a", tool="judge", on={})], "maps no decision"),
        ([Stage("a", tool="positional")], "positional-only"),
        (
            [
                Stage("a", tool="work", next=("b", "j")),
                Stage("b", tool="work"),
                Stage("j", tool="work", after=("b",)),
            ],
            "join 'j' is reached from ['a'], which it does not wait for",
        ),
        (
            [
                Stage("a", tool="work", next="j"),
                Stage("b", tool="work"),
                Stage("j", tool="work", after=("a", "b")),
            ],
            "join 'j' waits for ['b'], which never lead to it",
        ),
        ([Stage("a", tool="work", arguments={"nope": 1})], "does not fit tool 'work'"),
    ],
)
def test_a_pipeline_that_cannot_work_is_refused_when_declared(
    stages: list[Stage], message: str
) -> None:
    with pytest.raises(tenure.PolicyError) as refused:
        make_app().pipeline("p", stages)
    assert message in str(refused.value)


def test_verdicts_are_values_and_checked() -> None:
    assert Verdict("reject", reason="r").as_result() == {"verdict": "reject", "reason": "r"}
    assert Verdict.from_result({"verdict": "approve"}) == Verdict("approve")
    assert Verdict.from_result({"verdict": "approve", "extra": 1}) is None
    assert Verdict.from_result("approve") is None
    with pytest.raises(tenure.PolicyError, match="decision must match"):
        Verdict("")
    assert run_of_key("run:12:qa:3") == 12
    assert run_of_key("runner:12") is None and run_of_key("run:x:qa:1") is None


def picture(
    graph: Graph, rows: list[tuple[str, int, StageState, list[str]]]
) -> tuple[RunRow, list[StageRow]]:
    run = RunRow(
        1, "p", "running", "k", {}, "h", graph.to_json(), {"task": "T"}, None, None, NOW, NOW, None
    )
    stage_rows = [
        StageRow(
            id=i,
            run_id=1,
            name=name,
            round=round_,
            kind="stage",
            state=state,
            arrived=arrived,
            tool=graph.stages[name].tool,
            job_key=None,
            payload={},
            payload_hash=None,
            max_attempts=5,
            job_id=100 + i,
            decision=None,
            created_at=NOW,
            decided_at=None,
            job_exists=True,
            job_state="running",
            job_token=1,
            job_result=None,
            job_error=None,
            job_finished_at=None,
            db_now=NOW,
        )
        for i, (name, round_, state, arrived) in enumerate(rows, 1)
    ]
    return run, stage_rows


def test_a_join_waits_then_opens_with_the_merged_context() -> None:
    app = make_app()
    graph = app.pipeline(
        "p",
        [
            Stage("a", tool="work", next=("b", "c")),
            Stage("b", tool="work", next="j"),
            Stage("c", tool="work", next="j"),
            Stage("j", tool="judge", after=("b", "c"), on={"approve": ()}),
        ],
    ).graph
    run, rows = picture(
        graph, [("a", 1, "succeeded", []), ("b", 1, "open", []), ("c", 1, "open", [])]
    )
    first = decide_outcome(graph, run, rows, rows[1], Outcome("succeeded", {"b_out": 1}, "{}"))
    (waiting,) = first.new
    assert (waiting.name, waiting.round, waiting.state, waiting.arrived) == (
        "j",
        1,
        "waiting",
        ("b",),
    )
    assert first.run_state is None  # c is still open

    run, rows = picture(
        graph,
        [
            ("a", 1, "succeeded", []),
            ("b", 1, "succeeded", []),
            ("c", 1, "open", []),
            ("j", 1, "waiting", ["b"]),
        ],
    )
    second = decide_outcome(graph, run, rows, rows[2], Outcome("succeeded", {"c_out": 2}, "{}"))
    (opened,) = second.new
    assert (opened.name, opened.round, opened.state, opened.arrived) == ("j", 1, "open", ("b", "c"))
    assert opened.payload_json is not None and '"c_out":2' in opened.payload_json


def test_a_missing_argument_fails_the_stage_and_the_run_with_a_clear_reason() -> None:
    app = make_app()
    graph = app.pipeline(
        "p", [Stage("a", tool="judge", on={"approve": "b"}), Stage("b", tool="work")]
    ).graph
    run, rows = picture(graph, [("a", 1, "open", [])])
    run = RunRow(*[getattr(run, f) if f != "context" else {} for f in RunRow.__dataclass_fields__])
    plan = decide_outcome(
        graph, run, rows, rows[0], Outcome("succeeded", {"verdict": "approve"}, "{}")
    )
    assert plan.job_state == "failed" and plan.new == ()
    assert plan.error is not None and plan.error["code"] == "missing_argument"
    assert "stage 'b' needs ['task']" in plan.error["message"]
    assert plan.run_state == "failed" and plan.stop_open
