"""Deciding a transition: pure functions from a run's locked picture to what to write.

Nothing here touches the database. The engine reads the run under its row lock,
asks `decide_outcome` what the stage's outcome means (the run's new context, the
stages to open, joins to wait at, outbox intents, whether the run ended), and
hands the answer to one statement. Planning the same outcome twice gives the
same rows and keys, which is what makes a repeated attempt harmless.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._errors import PayloadError
from .._payload import MAX_PAYLOAD_BYTES, encode, fingerprint
from .._states import EndState, RunState, StageKind
from .._store import NewStage, RunRow, StageRow, Transition
from ._model import FACTS, OUTBOX_FACTS, Graph, StageSpec, ToolInfo, Verdict


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a stage's job ended: ``succeeded`` (with its result), ``failed`` or ``cancelled``."""

    state: EndState
    result: Any = None
    result_json: str | None = None
    error: dict[str, Any] | None = None


class Broken(Exception):
    """A stage outcome the pipeline cannot follow (a contract failure, not a crash)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _pick(info: ToolInfo, offered: Mapping[str, Any], stage: str) -> dict[str, Any]:
    """The entries of ``offered`` the tool declares; Broken if a required one is missing."""
    missing = [name for name in info.required if name not in offered]
    if missing:
        raise Broken(
            "missing_argument",
            f"stage {stage!r} needs {missing}, which neither the run's input nor an "
            "earlier stage provided",
        )
    if info.params is None:
        return dict(offered)
    return {k: v for k, v in offered.items() if k in info.params}


def _new_stage(
    graph: Graph, name: str, round_: int, tool: str, payload: Mapping[str, Any], kind: StageKind
) -> NewStage:
    try:
        text = encode(dict(payload), f"payload of stage {name!r}", MAX_PAYLOAD_BYTES)
    except PayloadError as exc:
        raise Broken("bad_payload", str(exc)) from None
    return NewStage(
        name=name,
        round=round_,
        kind=kind,
        tool=tool,
        payload_json=text,
        payload_hash=fingerprint(tool + "\n" + text),
        max_attempts=graph.tools[tool].max_attempts,
        priority=graph.tools[tool].priority,
    )


def open_stage(
    graph: Graph, name: str, round_: int, context: Mapping[str, Any], run_id: int
) -> NewStage:
    """A stage execution ready to run, with the payload its tool declares."""
    spec = graph.stages[name]
    if spec.arguments is not None:
        return _new_stage(graph, name, round_, spec.tool, spec.arguments, "stage")
    facts = dict(zip(FACTS, (run_id, name, round_), strict=True))
    payload = _pick(graph.tools[spec.tool], {**context, **facts}, name)
    return _new_stage(graph, name, round_, spec.tool, payload, "stage")


def _next_round(rows: Sequence[StageRow], name: str) -> int:
    return max((r.round for r in rows if r.name == name), default=0) + 1


def _merge(context: Mapping[str, Any], stage: str, result: Any) -> dict[str, Any]:
    """A dict result is merged into the context; any other value is kept under the stage."""
    merged = dict(context)
    if isinstance(result, dict):
        merged.update(result)
    elif result is not None:
        merged[stage] = result
    return merged


def _follow(
    spec: StageSpec, row: StageRow, context: dict[str, Any], result: Any
) -> tuple[tuple[str, ...], dict[str, Any], str | None]:
    """Where the outcome leads, the run's new context, and the gate's decision."""
    if spec.on is None:
        return spec.next, _merge(context, row.name, result), None
    verdict = Verdict.from_result(result)
    if verdict is None:
        raise Broken("no_verdict", f"gate {row.name!r} must return a tenure.Verdict")
    if verdict.decision not in spec.on:
        raise Broken(
            "unknown_decision",
            f"gate {row.name!r} decided {verdict.decision!r}; its pipeline knows {sorted(spec.on)}",
        )
    feedback = {"stage": row.name, **verdict.as_result()}
    return spec.on[verdict.decision], {**context, "feedback": feedback}, verdict.decision


def _arrive(
    graph: Graph,
    rows: Sequence[StageRow],
    target: str,
    came_from: str,
    context: dict[str, Any],
    run_id: int,
) -> NewStage:
    """The join's row after ``came_from`` arrived: still waiting, or open to run."""
    after = graph.stages[target].after
    waiting = next((r for r in rows if r.name == target and r.state == "waiting"), None)
    arrived = {*(waiting.arrived if waiting else ()), came_from}
    round_ = waiting.round if waiting else _next_round(rows, target)
    if set(after) <= arrived:
        return replace(open_stage(graph, target, round_, context, run_id), arrived=tuple(after))
    return NewStage(target, round_, state="waiting", arrived=tuple(sorted(arrived)))


def _end(
    base: Transition, state: RunState, error: dict[str, Any] | None, result: str | None = None
) -> Transition:
    return replace(
        base,
        run_state=state,
        run_error=error,
        run_result_json=result,
        stop_open=state != "succeeded",
    )


def _advance(
    graph: Graph,
    run: RunRow,
    rows: Sequence[StageRow],
    row: StageRow,
    outcome: Outcome,
    base: Transition,
) -> Transition:
    spec = graph.stages[row.name]
    targets, context, decision = _follow(spec, row, dict(run.context), outcome.result)
    try:
        context_json = encode(context, "the run's context", MAX_PAYLOAD_BYTES)
    except PayloadError as exc:
        raise Broken("context_too_large", str(exc)) from None
    facts = dict(
        zip(OUTBOX_FACTS, (run.id, row.name, row.round, decision, list(targets)), strict=True)
    )
    new: list[NewStage] = []
    for tool in spec.outbox:
        name = f"{row.name}>{tool}"
        payload = _pick(graph.tools[tool], {**context, **facts}, name)
        new.append(_new_stage(graph, name, row.round, tool, payload, "outbox"))
    for target in targets:
        if graph.stages[target].after:
            new.append(_arrive(graph, rows, target, row.name, context, run.id))
        else:
            new.append(open_stage(graph, target, _next_round(rows, target), context, run.id))
    step = replace(
        base, stage_state="succeeded", decision=decision, context_json=context_json, new=tuple(new)
    )
    touched = {(n.name, n.round) for n in new}
    still_open = any(
        r.kind == "stage" and r.state == "open" and r.id != row.id for r in rows
    ) or any(n.kind == "stage" and n.state == "open" for n in new)
    if still_open:
        return step
    waiting = sorted(
        {r.name for r in rows if r.state == "waiting" and (r.name, r.round) not in touched}
        | {n.name for n in new if n.state == "waiting"}
    )
    if waiting:
        return _end(
            step,
            "failed",
            {
                "code": "join_incomplete",
                "message": f"no stage is left to complete the join(s) {waiting}",
            },
        )
    return _end(step, "succeeded", None, outcome.result_json)


def decide_outcome(
    graph: Graph, run: RunRow, rows: Sequence[StageRow], row: StageRow, outcome: Outcome
) -> Transition:
    """What the outcome of ``row``'s job writes. ``row`` is open; ``run`` is locked."""
    base = Transition(
        run_id=run.id,
        stage_id=row.id,
        stage_name=row.name,
        job_id=row.job_id,
        job_state=outcome.state,
        result_json=outcome.result_json,
        error=outcome.error,
    )
    if row.kind == "outbox":
        # A failed delivery stays open (undelivered): the rescuer sends it again later.
        return replace(base, stage_state=None if outcome.state == "failed" else outcome.state)
    if run.state != "running":
        return replace(base, stage_state="cancelled")
    if outcome.state == "succeeded":
        try:
            return _advance(graph, run, rows, row, outcome, base)
        except Broken as exc:
            base = replace(
                base,
                job_state="failed",
                result_json=None,
                error={"code": exc.code, "message": str(exc)},
            )
            outcome = Outcome("failed", error=base.error)
    error = {
        "code": f"stage_{outcome.state}",
        "stage": row.name,
        "round": row.round,
        "job": row.job_id,
        "cause": (outcome.error or {}).get("code", outcome.state),
    }
    run_state: RunState = "cancelled" if outcome.state == "cancelled" else "failed"
    return _end(replace(base, stage_state=outcome.state), run_state, error)


def decide_start(graph: Graph, run_id: int, context: Mapping[str, Any]) -> Transition:
    """The first stages of a new run (Broken if the input cannot feed them)."""
    return Transition(
        run_id=run_id,
        new=tuple(open_stage(graph, name, 1, context, run_id) for name in graph.start),
    )


def decide_redispatch(graph: Graph, row: StageRow) -> Transition:
    """Dispatch an open stage whose job vanished, exactly as it was first dispatched."""
    assert row.tool is not None and row.payload_hash is not None and row.max_attempts is not None
    info = graph.tools.get(row.tool)
    again = NewStage(
        name=row.name,
        round=row.round,
        kind=row.kind,
        arrived=tuple(row.arrived),
        tool=row.tool,
        payload_json=encode(row.payload),
        payload_hash=row.payload_hash,
        max_attempts=row.max_attempts,
        priority=0 if info is None else info.priority,
    )
    return Transition(run_id=row.run_id, new=(again,))
