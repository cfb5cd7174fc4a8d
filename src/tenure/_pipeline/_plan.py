"""Planning vs execution: a model proposes tool calls; tenure decides how they run.

A plan is data from a model's output — a list of ``{"tool": ..., "arguments":
{...}, "time_limit": ...}`` — and nothing in it is trusted. Every step is
checked against the registered tools before anything is queued, and every
problem of every step is reported at once. What makes a call safe to run
(idempotency keys, leases, heartbeats, attempts, backoff) is tenure's choice
from the tool's registration, never the plan's: a plan may ask for a shorter
time limit than the tool's cap, but the tool's own policy still governs the run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import PlanRejected, PolicyError
from .._registry import ToolSpec
from ._model import Pipeline, Stage, build_pipeline

PLAN_PIPELINE = "plan"
MAX_PLAN_STEPS = 100
STEP_KEYS = frozenset({"tool", "arguments", "time_limit"})


def _check_step(step: Any, number: int, tools: Mapping[str, ToolSpec]) -> tuple[list[str], Stage]:
    where = f"step {number}"
    problems: list[str] = []
    if not isinstance(step, Mapping):
        return [f"{where}: must be an object with 'tool' and 'arguments'"], Stage(where)
    extra = sorted(str(k) for k in step if k not in STEP_KEYS)
    if extra:
        problems.append(
            f"{where}: {', '.join(extra)} cannot come from a plan "
            "(tenure chooses keys, leases, attempts and backoff)"
        )
    tool = step.get("tool")
    spec = tools.get(tool) if isinstance(tool, str) else None
    if spec is None:
        known = ", ".join(sorted(tools)) or "none"
        problems.append(f"{where}: unknown tool {tool!r} (registered: {known})")
        return problems, Stage(where)
    where = f"step {number} ({spec.name})"
    arguments = step.get("arguments", {})
    problems += [f"{where}: {problem}" for problem in spec.contract.problems(arguments)]
    limit = step.get("time_limit")
    cap = spec.policy.time_limit
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0:
            problems.append(f"{where}: time_limit must be a positive number of seconds")
        elif not math.isfinite(limit) or limit > cap:
            problems.append(f"{where}: time_limit {limit:g} s exceeds the tool's cap of {cap:g} s")
    return problems, Stage(f"step-{number}", tool=spec.name, arguments=arguments)


def plan_pipeline(plan: Any, tools: Mapping[str, ToolSpec]) -> Pipeline:
    """The plan as a sequential pipeline, or PlanRejected listing every problem."""
    if not isinstance(plan, Sequence) or isinstance(plan, str | bytes):
        raise PlanRejected(["a plan must be a list of steps"])
    if not 1 <= len(plan) <= MAX_PLAN_STEPS:
        raise PlanRejected([f"a plan has 1-{MAX_PLAN_STEPS} steps, got {len(plan)}"])
    problems: list[str] = []
    stages: list[Stage] = []
    for number, step in enumerate(plan, 1):
        found, stage = _check_step(step, number, tools)
        problems += found
        following = f"step-{number + 1}" if number < len(plan) else ()
        stages.append(Stage(stage.name, tool=stage.tool, arguments=stage.arguments, next=following))
    if problems:
        raise PlanRejected(problems)
    try:
        return build_pipeline(PLAN_PIPELINE, stages, None, tools)
    except PolicyError as exc:  # e.g. a tool whose signature cannot run as a stage
        raise PlanRejected([str(exc)]) from None
