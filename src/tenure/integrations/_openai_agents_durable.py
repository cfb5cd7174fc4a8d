"""TenureRunner: an OpenAI Agents SDK run as one tenure job, every model call a fenced step.

`TenureRunner(app, agent)` registers the tool ``agent:{name}`` on the App; a run is a job
of it (`start`, `run`), run by any worker that imports the agent's module, under a lease,
with heartbeats. On the worker, ``Runner.run`` drives the agent as usual, with:

- its model wrapped (`Model`, or a `ModelProvider` for models named by string): each model
  call is a step of the run's job (``model.{n}``), recorded under its fencing token as the
  SDK's own JSON form of the response, so a resumed run replays the model's answers and
  never asks it again;
- its tools: a `TenureTools` tool is a child job keyed by the run and the call's position
  in the response (``tool.{n}.{i}``), never by the model's call id, waited for holding no
  lease; any other function tool is a step (``tool.{n}.{i}``) whose result is replayed;
- its input guardrails run before the first turn (never beside it, where a tool could start
  before a guardrail trips) and their verdicts are steps too;
- a tool that needs approval (the SDK's ``needs_approval``, left to you) ends the attempt at
  a waitpoint: ``on_approval(token, requests)`` hands the token to whoever decides, and
  ``app.answer_waitpoint(token, {"approve": [call ids]})`` resumes the run.

So the run resumes after a kill at any point, on any worker, the first turn included.
Streaming (``Runner.run_streamed``) is not durable: a durable run is driven by ``Runner.run``.
A handoff to an agent whose model is a `Model` instance reaches that model unrecorded;
name its model by string (or give `model_provider`) so the provider records it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    GuardrailFunctionOutput,
    InputGuardrail,
    Model,
    ModelProvider,
    ModelResponse,
    MultiProvider,
    RunConfig,
    Runner,
    RunResult,
)
from agents.tool_context import ToolContext
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

import tenure

from ._calls import DurableRun, RunStarter

__all__ = ["TenureRunner", "current_run", "run_context"]

TOOL_PREFIX = "agent:"
RESPONSE = TypeAdapter(ModelResponse)
MAX_APPROVAL_ROUNDS = 100

Approval = Callable[[str, list[dict[str, Any]]], Awaitable[None] | None]


@dataclasses.dataclass(eq=False)
class _Run(DurableRun):
    """One attempt of one OpenAI Agents run: the model calls made so far and the call ids of
    the last response, which place each tool call by its index in that response."""

    model_calls: int = 0
    last_calls: list[str] = dataclasses.field(default_factory=list)

    def position(self, call_id: str | None, kind: str) -> str:
        """``{n}.{i}``: the call's index ``i`` in the ``n``-th model response (a repeated id
        gives each repetition its own index, in order)."""
        matches = [i for i, found in enumerate(self.last_calls) if found == call_id]
        nth = self.index(f"{kind}.{self.model_calls}.{call_id}")
        if not matches:
            return f"{self.model_calls}.x{nth}"
        return f"{self.model_calls}.{matches[min(nth, len(matches) - 1)]}"


_RUN: contextvars.ContextVar[_Run | None] = contextvars.ContextVar(
    "tenure_openai_run", default=None
)


def current_run() -> _Run | None:
    """The durable run this code runs in, if any (for `TenureTools`)."""
    return _RUN.get()


def run_context() -> tenure.Context:
    """The tenure `Context` of the durable run this code runs in (a function tool): its
    job, its fencing token, and inside a step the step's side-effect key
    (``idempotency_key()``, ``http_auth()``). RuntimeError outside a durable run."""
    run = _RUN.get()
    if run is None:
        raise RuntimeError("not inside a durable agent run (TenureRunner)")
    return run.ctx


def _usage(result: Any) -> dict[str, Any]:
    usage = result.get("usage") if isinstance(result, dict) else None
    if not isinstance(usage, dict):
        return {}
    return {
        k: usage[k]
        for k in ("input_tokens", "output_tokens", "requests")
        if isinstance(usage.get(k), int)
    }


def _call_ids(response: ModelResponse) -> list[str]:
    return [
        str(item.call_id)
        for item in response.output
        if getattr(item, "type", None) == "function_call" and hasattr(item, "call_id")
    ]


class _DurableModel(Model):
    """A model whose every answer is a step of the run (replayed, never asked twice)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        run = _RUN.get()
        if run is None:  # the wrapped agent outside a run: the plain model
            return await self.inner.get_response(*args, **kwargs)
        run.model_calls += 1

        async def ask() -> Any:
            answer = await self.inner.get_response(*args, **kwargs)
            return RESPONSE.dump_python(answer, mode="json", by_alias=True)

        recorded = await run.ctx.step(f"model.{run.model_calls}", ask, kind="model", detail=_usage)
        response = RESPONSE.validate_python(recorded)
        run.last_calls = _call_ids(response)
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        if _RUN.get() is not None:
            raise tenure.PolicyError("a durable run is driven by Runner.run, not streamed")
        return self.inner.stream_response(*args, **kwargs)

    def get_retry_advice(self, request: Any) -> Any:
        return self.inner.get_retry_advice(request)

    async def close(self) -> None:
        await self.inner.close()


class _DurableProvider(ModelProvider):
    """Models named by string, wrapped so that their answers are steps of the run."""

    def __init__(self, inner: ModelProvider) -> None:
        self.inner = inner

    def get_model(self, model_name: str | None) -> Model:
        return _DurableModel(self.inner.get_model(model_name))

    async def aclose(self) -> None:
        await self.inner.aclose()


def _durable_tool(tool: FunctionTool) -> FunctionTool:
    """A function tool whose call is a step of the run (``tool.{n}.{i}``): run once, then
    replayed. A `TenureTools` tool is left as it is: its call is a child job already."""
    if getattr(tool, "__tenure_child__", False):
        return tool
    invoke = tool.on_invoke_tool

    async def recorded(ctx: ToolContext[Any], arguments: str) -> Any:
        run = _RUN.get()
        if run is None:
            return await invoke(ctx, arguments)
        name = f"tool.{run.position(ctx.tool_call_id, 'tool')}"

        async def call() -> Any:
            return to_jsonable_python(await invoke(ctx, arguments), fallback=str)

        with run.tool_call():
            return await run.ctx.step(name, call, kind="tool", detail={"tool": tool.name[:200]})

    return dataclasses.replace(tool, on_invoke_tool=recorded)


def _durable_guardrail(guardrail: InputGuardrail[Any]) -> InputGuardrail[Any]:
    """The guardrail before the first turn, its verdict a step (replayed, not re-judged)."""
    check = guardrail.guardrail_function
    label = guardrail.get_name()

    async def recorded(ctx: Any, agent: Agent[Any], given: Any) -> GuardrailFunctionOutput:
        run = _RUN.get()

        async def judge() -> dict[str, Any]:
            verdict = check(ctx, agent, given)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            info = to_jsonable_python(verdict.output_info, fallback=str)
            return {"tripwire": bool(verdict.tripwire_triggered), "info": info}

        found = await judge() if run is None else await run.ctx.step(f"guardrail.{label}", judge)
        return GuardrailFunctionOutput(
            output_info=found["info"], tripwire_triggered=found["tripwire"]
        )

    return InputGuardrail(guardrail_function=recorded, name=label, run_in_parallel=False)


def _approval_requests(result: RunResult) -> list[dict[str, Any]]:
    requests = []
    for item in result.interruptions:
        raw = item.raw_item
        call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
        arguments = (
            raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
        )
        requests.append({"tool": item.tool_name, "call_id": call_id, "arguments": arguments})
    return requests


class TenureRunner(RunStarter):
    """Runs an OpenAI Agents SDK agent as tenure jobs: durable, fenced, resumable.

    ``TenureRunner(app, agent)`` registers the tool ``agent:{name}`` (``name`` defaults to
    the agent's) on ``app``; `start` and `run` start a run from any process, one per key.
    ``run_config`` and ``max_turns`` are what ``Runner.run`` gets on the worker (its model
    provider is wrapped); ``on_approval(token, requests)`` is called once when tools need
    approval, to hand the waitpoint token to whoever decides. ``lease``, ``heartbeat``,
    ``jitter``, ``time_limit`` and ``max_attempts`` are the run job's policy.
    """

    def __init__(
        self,
        app: tenure.App,
        agent: Agent[Any],
        *,
        name: str | None = None,
        run_config: RunConfig | None = None,
        max_turns: int = 10,
        on_approval: Approval | None = None,
        approval_timeout: float = 7 * 24 * 3600.0,
        lease: float = 90.0,
        heartbeat: float = 30.0,
        jitter: float = 20.0,
        time_limit: float = 3600.0,
        max_attempts: int = 10,
    ) -> None:
        self.app = app
        self.agent = agent
        self.run_config = run_config or RunConfig()
        self.max_turns = max_turns
        self.on_approval = on_approval
        self.approval_timeout = approval_timeout
        self.tool: str | None = TOOL_PREFIX + (name or agent.name)

        async def run(ctx: tenure.Context, prompt: str) -> Any:
            return await self._run_agent(ctx, prompt)

        run.__doc__ = f"A durable run of the OpenAI Agents SDK agent {agent.name!r}."
        app.tool(
            self.tool,
            lease=lease,
            heartbeat=heartbeat,
            jitter=jitter,
            time_limit=time_limit,
            max_attempts=max_attempts,
        )(run)

    # -- the worker's side ---------------------------------------------------------------

    def _durable_agent(self) -> Agent[Any]:
        agent = self.agent
        changes: dict[str, Any] = {
            "tools": [_durable_tool(t) if isinstance(t, FunctionTool) else t for t in agent.tools],
            "input_guardrails": [_durable_guardrail(g) for g in agent.input_guardrails],
        }
        if isinstance(agent.model, Model):
            changes["model"] = _DurableModel(agent.model)
        return agent.clone(**changes)

    def _durable_config(self) -> RunConfig:
        config = self.run_config
        provider = config.model_provider if config.model_provider is not None else MultiProvider()
        guardrails = [_durable_guardrail(g) for g in config.input_guardrails or []]
        return dataclasses.replace(
            config, model_provider=_DurableProvider(provider), input_guardrails=guardrails
        )

    async def _run_agent(self, ctx: tenure.Context, prompt: str) -> Any:
        run = _Run(ctx)
        token = _RUN.set(run)
        try:
            agent, config = self._durable_agent(), self._durable_config()
            result = await Runner.run(agent, prompt, run_config=config, max_turns=self.max_turns)
            for round_ in range(1, MAX_APPROVAL_ROUNDS + 1):
                if not result.interruptions:
                    break
                answer = await self._approval(run, result, round_)
                state = result.to_state()
                approved = set(answer.get("approve") or [])
                for item, request in zip(
                    result.interruptions, _approval_requests(result), strict=True
                ):
                    if answer.get("approved") is True or request["call_id"] in approved:
                        state.approve(item)
                    else:
                        state.reject(item)
                result = await Runner.run(agent, state, run_config=config, max_turns=self.max_turns)
        finally:
            _RUN.reset(token)
        return to_jsonable_python(result.final_output, fallback=str)

    async def _approval(self, run: _Run, result: RunResult, round_: int) -> dict[str, Any]:
        """A person's decision on the calls that need approval: a waitpoint (the run holds no
        lease while it waits); ``on_approval`` gets its token, once."""
        wp = run.ctx.waitpoint(f"approval.{round_}", timeout=self.approval_timeout)
        if wp.answered:
            return wp.answer if isinstance(wp.answer, dict) else {}
        if wp.timed_out:
            return {}  # nobody decided in time: every call is rejected
        requests = _approval_requests(result)
        if self.on_approval is None:
            raise tenure.PermanentError(
                f"{self.tool}: a tool needs approval and the runner has no on_approval"
            )
        handler = self.on_approval

        async def ask() -> None:
            handed = handler(wp.token, requests)
            if inspect.isawaitable(handed):
                await handed

        await run.ctx.step(f"ask.approval.{round_}", ask)
        run.ctx.suspend(wp, request={"approvals": requests})
