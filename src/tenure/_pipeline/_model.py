"""What a pipeline is: stages, verdicts, and the graph a run keeps a copy of.

A pipeline is declared in code (`App.pipeline`) and validated there, once,
against the registered tools. Each run stores the graph as data, so a worker
moves a run on from the run's own row: a deploy that changes the pipeline
never strands the runs already in flight, and a worker that serves only some
of the tools can still dispatch the rest.
"""

from __future__ import annotations

import inspect
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._errors import PayloadError, PolicyError
from .._job import Job
from .._registry import ToolSpec
from .._states import TERMINAL_STATES, RunState, StageKind, StageState

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DECISION = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
PIPELINE_NAME_MAX = 200
MAX_STAGES = 200
MAX_NOTE = 20_000
MAX_KEY_LENGTH = 500
KEY_PREFIX = "run:"
# Names every stage tool may declare to learn where it runs; outbox tools also get the
# decision and the stages it led to.
FACTS = ("run_id", "stage", "round")
OUTBOX_FACTS = (*FACTS, "decision", "next_stages")


def run_of_key(key: str) -> int | None:
    """The run a job belongs to, read from its key (``run:{run}:{stage}:{round}``).

    Only a hint for routing: the stage table decides whether the job really is a stage.
    """
    if not key.startswith(KEY_PREFIX):
        return None
    run = key.split(":", 2)[1]
    return int(run) if run.isdigit() else None


def run_key(key: str | None) -> str:
    """A run's idempotency key: the caller's, checked, or a fresh one."""
    if key is None:
        return f"run-auto:{uuid.uuid4()}"
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isprintable():
        raise PayloadError(f"idempotency_key must be 1-{MAX_KEY_LENGTH} printable characters")
    return key


def _names(value: str | Sequence[str], what: str) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    for name in names:
        if not isinstance(name, str):
            raise PolicyError(f"{what} must name stages, got {name!r}")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class Verdict:
    """A gate's decision: the value a gate stage returns (or `App.record_verdict` records).

    ``decision`` picks the next stage(s) through the gate's ``on`` map, e.g.
    ``Verdict("approve")`` or ``Verdict("reject", reason="...", diagnosis="...")``.
    Reason and diagnosis reach the following stages as ``feedback``, so the
    correction stage learns what to fix without asking the gate again.
    """

    decision: str
    reason: str | None = None
    diagnosis: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.decision, str) or not DECISION.match(self.decision):
            raise PolicyError(
                f"a verdict's decision must match {DECISION.pattern}, got {self.decision!r}"
            )
        for name in ("reason", "diagnosis"):
            note = getattr(self, name)
            if note is not None and (not isinstance(note, str) or len(note) > MAX_NOTE):
                raise PolicyError(f"a verdict's {name} must be text of at most {MAX_NOTE} chars")

    def as_result(self) -> dict[str, Any]:
        """The JSON a gate's job stores as its result."""
        result: dict[str, Any] = {"verdict": self.decision}
        if self.reason is not None:
            result["reason"] = self.reason
        if self.diagnosis is not None:
            result["diagnosis"] = self.diagnosis
        return result

    @classmethod
    def from_result(cls, value: Any) -> Verdict | None:
        """The verdict a stored result holds, or None if it holds none."""
        if not isinstance(value, dict) or set(value) - {"verdict", "reason", "diagnosis"}:
            return None
        try:
            return cls(value.get("verdict"), value.get("reason"), value.get("diagnosis"))  # type: ignore[arg-type]
        except PolicyError:
            return None


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage of a pipeline: the tool that runs it and where its outcome leads.

    A plain stage's value leads to ``next``: one stage, several (a fan-out), or
    none (the branch ends). A gate (``on`` given) returns a `Verdict` whose
    decision picks the next stage(s), e.g. ``on={"approve": "secops", "reject":
    "correct"}``; a decision mapped to ``()`` ends the branch. A stage with
    ``after`` is a join: it starts once every stage named there has succeeded
    and led to it. ``outbox`` names tools that record this stage's outcome in
    another system; their jobs are written in the same transaction as the
    outcome and delivered, with their own idempotency keys, until they succeed.

    The tool (``tool``, default ``name``) is called with the entries of the run's
    context that it declares (the run's input, merged with every earlier
    result; see `App.start_run`), plus ``run_id``, ``stage`` and ``round`` if it
    declares them. ``arguments`` replaces the context with fixed arguments.
    """

    name: str
    tool: str | None = None
    next: str | Sequence[str] = ()
    on: Mapping[str, str | Sequence[str]] | None = None
    after: Sequence[str] = ()
    outbox: Sequence[str] = ()
    arguments: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StageSpec:
    """A validated stage, as the graph stores it."""

    name: str
    tool: str
    next: tuple[str, ...]
    on: Mapping[str, tuple[str, ...]] | None
    after: tuple[str, ...]
    outbox: tuple[str, ...]
    arguments: Mapping[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tool": self.tool,
            "next": list(self.next),
            "on": None if self.on is None else {k: list(v) for k, v in self.on.items()},
            "after": list(self.after),
            "outbox": list(self.outbox),
            "arguments": None if self.arguments is None else dict(self.arguments),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StageSpec:
        on = data["on"]
        return cls(
            name=data["name"],
            tool=data["tool"],
            next=tuple(data["next"]),
            on=None if on is None else {k: tuple(v) for k, v in on.items()},
            after=tuple(data["after"]),
            outbox=tuple(data["outbox"]),
            arguments=data["arguments"],
        )


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """What a transition needs to know of a tool without importing it."""

    params: frozenset[str] | None  # None: it takes **kwargs
    required: tuple[str, ...]
    max_attempts: int
    priority: int = 0

    def to_json(self) -> dict[str, Any]:
        params = None if self.params is None else sorted(self.params)
        return {
            "params": params,
            "required": list(self.required),
            "max_attempts": self.max_attempts,
            "priority": self.priority,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolInfo:
        params = data["params"]
        return cls(
            None if params is None else frozenset(params),
            tuple(data["required"]),
            int(data["max_attempts"]),
            int(data.get("priority", 0)),
        )

    @classmethod
    def of(cls, spec: ToolSpec) -> ToolInfo:
        if getattr(spec, "concurrency_key", None) is not None:
            raise PolicyError(
                f"tool {spec.name!r} has a concurrency key, which stage jobs do not carry yet; "
                "run it as a plain job, or use a tool without one as the stage"
            )
        names: set[str] = set()
        required: list[str] = []
        anything = False
        for param in list(inspect.signature(spec.fn).parameters.values())[1:]:
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                anything = True
            elif param.kind is inspect.Parameter.POSITIONAL_ONLY:
                if param.default is inspect.Parameter.empty:
                    raise PolicyError(
                        f"tool {spec.name!r} cannot run a stage: its argument {param.name!r} "
                        "is positional-only and stages pass arguments by name"
                    )
            elif param.kind is not inspect.Parameter.VAR_POSITIONAL:
                names.add(param.name)
                if param.default is inspect.Parameter.empty:
                    required.append(param.name)
        params = None if anything else frozenset(names)
        priority = getattr(spec, "priority", 0)
        return cls(params, tuple(required), spec.policy.retry.max_attempts, priority)


@dataclass(frozen=True, slots=True)
class Graph:
    """A pipeline as data: what every run carries in its ``graph`` column."""

    start: tuple[str, ...]
    stages: Mapping[str, StageSpec]
    tools: Mapping[str, ToolInfo]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "start": list(self.start),
            "stages": [s.to_json() for s in self.stages.values()],
            "tools": {name: info.to_json() for name, info in self.tools.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Graph:
        stages = [StageSpec.from_json(s) for s in data["stages"]]
        return cls(
            tuple(data["start"]),
            {s.name: s for s in stages},
            {name: ToolInfo.from_json(t) for name, t in data["tools"].items()},
        )


@dataclass(frozen=True, slots=True)
class Pipeline:
    """A named pipeline, validated against the app's tools when it was declared."""

    name: str
    stages: tuple[Stage, ...]
    start: tuple[str, ...]
    graph: Graph = field(repr=False)


def _spec(stage: Stage) -> StageSpec:
    if not isinstance(stage, Stage):
        raise PolicyError(f"stages must be tenure.Stage values, got {type(stage).__name__}")
    if not isinstance(stage.name, str) or not NAME.match(stage.name):
        raise PolicyError(f"stage name must match {NAME.pattern}, got {stage.name!r}")
    if stage.on is not None and stage.next:
        raise PolicyError(
            f"stage {stage.name!r} has both next and on: a gate's verdict alone decides"
        )
    on: dict[str, tuple[str, ...]] | None = None
    if stage.on is not None:
        on = {}
        for decision, targets in stage.on.items():
            if not isinstance(decision, str) or not DECISION.match(decision):
                raise PolicyError(
                    f"stage {stage.name!r}: decision {decision!r} must match {DECISION.pattern}"
                )
            on[decision] = _names(targets, f"stage {stage.name!r} on[{decision!r}]")
        if not on:
            raise PolicyError(f"gate {stage.name!r} maps no decision to a next step")
    return StageSpec(
        name=stage.name,
        tool=stage.name if stage.tool is None else stage.tool,
        next=_names(stage.next, f"stage {stage.name!r} next"),
        on=on,
        after=_names(stage.after, f"stage {stage.name!r} after"),
        outbox=_names(stage.outbox, f"stage {stage.name!r} outbox"),
        arguments=None if stage.arguments is None else dict(stage.arguments),
    )


def _check_links(specs: Mapping[str, StageSpec], start: tuple[str, ...]) -> None:
    """Every named stage exists, and every join can complete."""
    leads: dict[str, set[str]] = {name: set() for name in specs}
    for spec in specs.values():
        targets = spec.next + tuple(t for ts in (spec.on or {}).values() for t in ts)
        for target in targets:
            if target not in specs:
                raise PolicyError(f"stage {spec.name!r} leads to unknown stage {target!r}")
            leads[target].add(spec.name)
        for name in spec.after:
            if name not in specs:
                raise PolicyError(f"join {spec.name!r} waits for unknown stage {name!r}")
    for name in start:
        if name not in specs:
            raise PolicyError(f"start stage {name!r} is not a stage of the pipeline")
        if specs[name].after:
            raise PolicyError(f"start stage {name!r} is a join; a run cannot start by waiting")
    for spec in specs.values():
        if not spec.after:
            continue
        strangers = leads[spec.name] - set(spec.after)
        if strangers:
            raise PolicyError(
                f"join {spec.name!r} is reached from {sorted(strangers)}, which it does not "
                f"wait for; list them in after= or lead them elsewhere"
            )
        missing = set(spec.after) - leads[spec.name]
        if missing:
            raise PolicyError(
                f"join {spec.name!r} waits for {sorted(missing)}, which never lead to it"
            )


def build_pipeline(
    name: str,
    stages: Sequence[Stage],
    start: str | Sequence[str] | None,
    tools: Mapping[str, ToolSpec],
) -> Pipeline:
    """Validate a pipeline against the registered tools; PolicyError says what is wrong."""
    if not isinstance(name, str) or not 1 <= len(name) <= PIPELINE_NAME_MAX:
        raise PolicyError(f"pipeline name must be 1-{PIPELINE_NAME_MAX} characters")
    if not name.isprintable():
        raise PolicyError(f"pipeline name must be printable, got {name!r}")
    stages = tuple(stages)
    if not 1 <= len(stages) <= MAX_STAGES:
        raise PolicyError(f"a pipeline has 1-{MAX_STAGES} stages, got {len(stages)}")
    specs: dict[str, StageSpec] = {}
    for stage in stages:
        spec = _spec(stage)
        if spec.name in specs:
            raise PolicyError(f"stage {spec.name!r} is declared twice")
        specs[spec.name] = spec
    first = _names(start if start is not None else stages[0].name, "start")
    if not first:
        raise PolicyError("a pipeline needs at least one start stage")
    _check_links(specs, first)
    infos: dict[str, ToolInfo] = {}
    for spec in specs.values():
        for tool in (spec.tool, *spec.outbox):
            found = tools.get(tool)
            if found is None:
                known = ", ".join(sorted(tools)) or "none"
                raise PolicyError(
                    f"stage {spec.name!r} uses tool {tool!r}, which is not registered "
                    f"(registered: {known})"
                )
            infos[tool] = ToolInfo.of(found)
        if spec.arguments is not None:
            try:
                tools[spec.tool].validate(dict(spec.arguments), "arguments")
            except PayloadError as exc:
                raise PolicyError(f"stage {spec.name!r}: {exc}") from None
    return Pipeline(name, stages, first, Graph(first, specs, infos))


@dataclass(frozen=True, slots=True)
class RunStage:
    """One execution of a stage in a run (or one outbox delivery), with its job.

    ``job`` is None once the job was pruned (the stage keeps its outcome) or
    while a join is still ``waiting`` for predecessors listed in ``arrived``.
    """

    id: int
    name: str
    round: int
    kind: StageKind
    state: StageState
    decision: str | None
    arrived: tuple[str, ...]
    job_id: int | None
    job: Job | None
    created_at: datetime
    decided_at: datetime | None


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a pipeline: where it stands and every stage it went through.

    ``input`` and ``result`` are left out of ``repr`` so that logging a run
    never prints what it was given or produced.
    """

    id: int
    pipeline: str
    state: RunState
    idempotency_key: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    error: dict[str, Any] | None
    stages: tuple[RunStage, ...]
    input: Any = field(repr=False)
    result: Any = field(repr=False)
    created: bool = True  # False when start_run found a run under the same key

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    def current(self) -> tuple[RunStage, ...]:
        """The stages that may still decide the run (open stage executions)."""
        return tuple(s for s in self.stages if s.kind == "stage" and s.state == "open")
