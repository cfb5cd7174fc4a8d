"""TenureDurability: a pydantic-ai agent run as one tenure job, every unit a fenced step.

Built on pydantic-ai's public durable-execution surface (``pydantic_ai.durable_exec``):
the capability subclasses `BaseDurabilityCapability`, its backend is a
`CallableOperationBackend` whose durable unit is ``ctx.step`` of the run's job, values
cross as JSON (`JSON_CODEC`), `durable_sleep` is ``ctx.sleep``, and a wait for an
external event (a `HandleDeferredToolCalls` handler that takes a resume token: human
approval) is a tenure waitpoint. So:

- the agent run is a job of the tool ``agent:{name}``, registered on the App when the
  capability is attached to the agent: any ``tenure worker`` that imports the agent's
  module runs it, under a lease, with heartbeats; a run started twice with one key is
  one run (the job's idempotency key);
- each model request, tool call (function and MCP tools), tool discovery and argument
  validation is a step recorded under the run's fencing token, named by its position in
  the run (``model.{run_step}``, ``tool.{run_step}.{index in the model's response}``),
  never by an id the model made up: a resumed run replays them, so the model is not
  asked again and a tool whose step was recorded is not called again;
- a `TenureToolset` tool called in a run is a child job (``ctx.enqueue``) keyed by the
  run and the call's position, waited for with ``ctx.wait_for``: the run holds no lease
  while its tools run, and a replay finds the same child;
- a run that sleeps or waits for a person holds no lease and no worker slot.

A step that ran but was not recorded (its process died in between) runs again on the
next attempt: give a function tool's side effect the step's key (`run_context()` is
the run's tenure `Context`; inside a step, ``ctx.idempotency_key()`` and
``ctx.http_auth()`` carry ``tool-job:{run}:{step}`` and the fencing token), and a
receiver applies it once and refuses the paused old owner.
"""

from __future__ import annotations

import contextvars
import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import JsonValue
from pydantic_ai import messages as _messages
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.agent.abstract import AbstractAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    CallableOperationBackend,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    ExternalEventError,
    ExternalEventWaiter,
    JournalOperationNamer,
    ModelCountTokensId,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
    ToolsetValidateToolArgumentsId,
    conversation_id_from_run_id,
    external_event_scope,
)
from pydantic_ai.models import Model
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_core import to_jsonable_python

import tenure

from ._calls import DurableRun, RunStarter

__all__ = ["TenureDurability", "run_context"]

TOOL_PREFIX = "agent:"
MAX_WAIT = 365 * 24 * 3600.0
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def _serialization_failure(error: Exception) -> BaseException:
    """A value that cannot become JSON never will: the run fails instead of retrying."""
    return tenure.PermanentError(f"a durable step's value is not JSON ({type(error).__name__})")


@dataclass(eq=False)
class _Run(DurableRun):
    """One attempt of one pydantic-ai run (see `DurableRun`), and where its tool calls stand
    in the model responses that asked for them."""

    waits: int = 0

    def position(self, run_ctx: RunContext[Any] | None, kind: str) -> str:
        """``{run_step}.{index}``: where a tool call stands in the model response that asked
        for it. The index, not the model's tool-call id, names it (a model that numbers its
        calls per response, or makes fresh random ids, must not change the key); ids only
        tell the calls of one recorded response apart, and a response that repeats an id
        gives each repetition its own index, in order."""
        if run_ctx is None:
            return f"0.{self.index(f'{kind}.orphan')}"
        step = run_ctx.run_step
        ids = [
            part.tool_call_id
            for message in run_ctx.messages[-1:]
            if isinstance(message, _messages.ModelResponse)
            for part in message.parts
            if isinstance(part, _messages.ToolCallPart)
        ]
        matches = [i for i, found in enumerate(ids) if found == run_ctx.tool_call_id]
        nth = self.index(f"{kind}.{step}.{run_ctx.tool_call_id}")
        if matches:
            return f"{step}.{matches[min(nth, len(matches) - 1)]}"
        digest = hashlib.sha256(str(run_ctx.tool_call_id).encode()).hexdigest()[:12]
        return f"{step}.id-{digest}.{nth}"


_RUN: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("tenure_agent_run", default=None)


def run_context() -> tenure.Context:
    """The tenure `Context` of the agent run this code runs in (a function tool, a hook):
    its job, its fencing token, and inside a step the step's side-effect key
    (``idempotency_key()``, ``http_auth()``). RuntimeError outside a durable run."""
    run = _RUN.get()
    if run is None:
        raise RuntimeError("not inside a durable agent run (TenureDurability)")
    return run.ctx


def current_run() -> _Run | None:
    """The durable run this code runs in, if any (for `TenureToolset`)."""
    return _RUN.get()


def _first_run_context(values: tuple[object, ...]) -> RunContext[Any] | None:
    return next((v for v in values if isinstance(v, RunContext)), None)


def _model_detail(result: Any) -> dict[str, Any]:
    """What the run page shows of a model step: the model and the usage it reported."""
    if not isinstance(result, dict):
        return {}
    found = result.get("usage")
    usage: dict[str, Any] = found if isinstance(found, dict) else {}
    detail: dict[str, Any] = {
        key: usage[key]
        for key in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
        if isinstance(usage.get(key), int)
    }
    if isinstance(result.get("model_name"), str):
        detail["model"] = result["model_name"][:100]
    return detail


class _Backend(CallableOperationBackend[None]):
    """Every durable unit is one ``ctx.step`` of the run's job, named by its position."""

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: None,
    ) -> object:
        run = _RUN.get()
        if run is None:  # the base calls the backend only inside a run
            raise RuntimeError("a durable unit ran outside a tenure agent run")
        run_ctx = _first_run_context(cache_key)
        step = run_ctx.run_step if run_ctx is not None else 0
        detail: Callable[[Any], dict[str, Any] | None] | dict[str, Any] | None = None
        match operation_id:
            case ModelRequestId() | ModelCountTokensId():
                counting = isinstance(operation_id, ModelCountTokensId)
                base, kind = f"{'count' if counting else 'model'}.{step}", "model"
                detail = None if counting else _model_detail
            case ToolsetCallToolId():
                base, kind = f"tool.{run.position(run_ctx, 'tool')}", "tool"
                tool = cache_key[0] if cache_key and isinstance(cache_key[0], str) else None
                detail = {"tool": tool[:200]} if tool else None
                with run.tool_call():
                    return await run.ctx.step(base, body, kind=kind, detail=detail)
            case ToolsetValidateToolArgumentsId():
                base, kind = f"validate.{run.position(run_ctx, 'validate')}", "step"
            case _:
                base, kind = f"{_UNSAFE.sub('_', name)[-120:]}.{step}", "step"
        nth = run.index(base)  # a unit met again at the same position: a retry of it
        return await run.ctx.step(base, body, index=nth or None, kind=kind, detail=detail)


class _Waiter(ExternalEventWaiter):
    """A wait for an external event (an approval) is a tenure waitpoint: the run holds no
    lease while it waits, and ``app.answer_waitpoint(token, answer)`` resumes it."""

    def __init__(self, run: _Run) -> None:
        self._run = run

    async def wait(
        self,
        name: str,
        *,
        ask: Callable[[str], Awaitable[JsonValue]],
        timeout: timedelta | None,
    ) -> JsonValue:
        run = self._run
        run.waits += 1
        label = f"{_UNSAFE.sub('_', name)[:60]}.{run.waits}"
        seconds = MAX_WAIT if timeout is None else min(max(timeout.total_seconds(), 1.0), MAX_WAIT)
        wp = run.ctx.waitpoint(label, timeout=seconds)
        if wp.answered:
            answer: JsonValue = wp.answer
            return answer
        if wp.timed_out:
            raise ExternalEventError(f"no answer within {seconds:g} s")
        answered: JsonValue = await run.ctx.step(f"ask.{label}", ask, wp.token)
        if answered is not None:
            return answered
        run.ctx.suspend(wp, request={"waiting_for": name})


class TenureDurability(BaseDurabilityCapability[AgentDepsT], RunStarter):
    """Makes a pydantic-ai agent's runs tenure jobs: durable, fenced and resumable.

    Attach it to an agent (``Agent(..., name="support", capabilities=[durability])``):
    that registers the tool ``agent:{name}`` on ``app``, which any worker importing the
    agent's module runs. Start a run from anywhere with `start` (a job) or `run` (its
    output). ``lease``, ``heartbeat``, ``jitter``, ``time_limit`` (one attempt's), and
    ``max_attempts`` are the run job's policy, as for any tool; ``models`` and
    ``event_stream_handler`` are pydantic-ai's (see `BaseDurabilityCapability`).
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="tenure",
        durable_unit_noun="step",
        durable_container_noun="run",
        codec=JSON_CODEC,
        serialization_failure=_serialization_failure,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        tool_call_result_upgrade_lenient=False,
        journal_discovery=True,
        sequential_tools_in_durable_context=False,
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        tool_config_key=None,
        control_flow_error_types=(tenure.Suspend,),
    )

    def __init__(
        self,
        app: tenure.App,
        *,
        name: str | None = None,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        lease: float = 90.0,
        heartbeat: float = 30.0,
        jitter: float = 20.0,
        time_limit: float = 3600.0,
        max_attempts: int = 10,
    ) -> None:
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)
        self.app = app
        self._policy: dict[str, Any] = {
            "lease": lease,
            "heartbeat": heartbeat,
            "jitter": jitter,
            "time_limit": time_limit,
            "max_attempts": max_attempts,
        }
        self.tool: str | None = None  # "agent:{name}", once attached to an agent
        self._backend: _Backend | None = None

    # -- the engine ----------------------------------------------------------------------

    @property
    def in_durable_context(self) -> bool:
        return _RUN.get() is not None

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        if self._backend is None:
            self._backend = _Backend(
                namer=JournalOperationNamer(self.name or "agent"),
                config=RoleBasedOperationConfig(model=None, event=None, capability=None, tool=None),
            )
        return self._backend

    def get_default_run_id(self) -> str | None:
        run = _RUN.get()
        return None if run is None else f"tenure-job-{run.ctx.job_id}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def get_run_start_time(self, run_id: str) -> datetime | None:
        run = _RUN.get()
        if run is None:
            return None
        started = await run.ctx.step("run.started", lambda: datetime.now(UTC).isoformat())
        return datetime.fromisoformat(started)

    async def durable_sleep(self, seconds: float) -> None:
        run = _RUN.get()
        assert run is not None  # the base calls it in container code only
        await run.ctx.sleep(max(0.0, seconds))

    # -- binding: the run is a tool ------------------------------------------------------

    def for_agent(self, agent: AbstractAgent[AgentDepsT, Any]) -> AbstractCapability[AgentDepsT]:
        bound = super().for_agent(agent)
        found: list[TenureDurability[AgentDepsT]] = []
        bound.apply(lambda c: found.append(c) if isinstance(c, TenureDurability) else None)
        self._register(agent, found[0])
        return bound

    def _register(
        self, agent: AbstractAgent[AgentDepsT, Any], bound: TenureDurability[Any]
    ) -> None:
        tool = TOOL_PREFIX + bound.name
        spec = self.app.tools.get(tool)
        if spec is not None:
            if getattr(spec.fn, "__tenure_agent__", None) is not agent:
                raise tenure.PolicyError(f"tool {tool!r} is already registered on this app")
            return

        async def run(ctx: tenure.Context, prompt: str) -> Any:
            return await bound._run_agent(agent, ctx, prompt)

        run.__doc__ = f"A durable run of the pydantic-ai agent {bound.name!r}."
        run.__tenure_agent__ = agent  # type: ignore[attr-defined]
        self.app.tool(tool, **self._policy)(run)
        self.tool = bound.tool = tool

    async def _run_agent(
        self, agent: AbstractAgent[AgentDepsT, Any], ctx: tenure.Context, prompt: str
    ) -> Any:
        """The run tool's body on a worker: the agent's run, every unit a step of this job."""
        run = _Run(ctx)
        token = _RUN.set(run)
        try:
            with external_event_scope(_Waiter(run)):
                result = await agent.run(prompt)
        finally:
            _RUN.reset(token)
        return to_jsonable_python(result.output)
