"""A pydantic-ai toolset whose tools run as tenure jobs (``pip install 'tenure[pydantic-ai]'``).

Built on pydantic-ai's public toolset surface (`AbstractToolset`) and its
deferred-tools pattern (`CallDeferred`, `DeferredToolRequests`,
`DeferredToolResults`), not on its durable-execution engines: those make the
whole agent loop a workflow that an engine replays, while tenure's durable unit is
one tool call run by a worker anywhere. So the agent stays an ordinary agent and
each tool call becomes a job:

- its key is ``pydantic-ai:{conversation_id}:{tool_call_id}``: an agent restarted
  from its saved message history (run again with no new prompt) replays the pending
  call and finds the job it started, which runs once;
- the call waits for the job's result; with ``defer_after`` it waits that long at
  most, then the run ends with the call in `DeferredToolRequests` and any process
  resumes it later with `TenureToolset.results` (the job's result, when it ends);
- a failed job becomes `ModelRetry` (calling again may help) or `ToolFailed` (a
  permanent failure or a cancel), worded from the job's error code and attempts, plus
  the message of a failure the tool classified itself (``PermanentError``, ...), as
  an MCP client gets it; an unclassified exception's text may hold private data and
  never reaches the model.
  Arguments outside the tool's signature become `ModelRetry` listing the problems.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai import AbstractToolset, RunContext, ToolsetTool
from pydantic_ai.exceptions import CallDeferred, ModelRetry, ToolFailed
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDefinition
from pydantic_core import SchemaValidator, core_schema

from .._app import App
from .._errors import JobCancelled, JobFailed, PayloadError, PolicyError
from ._calls import (
    Deferred,
    Failure,
    call_key,
    check_defer_after,
    ended,
    failure,
    offered,
    run_call,
    settle,
)
from ._pydantic_ai_durable import TenureDurability, _Run, current_run, run_context

__all__ = ["TenureDurability", "TenureToolset", "run_context"]

FRAMEWORK = "pydantic-ai"
METADATA_KEY = "tenure"
# tenure checks the arguments against the tool's signature when it queues the call
# (strictly, with every problem listed), so pydantic-ai only needs to see an object.
_ANY_OBJECT = SchemaValidator(core_schema.dict_schema(core_schema.str_schema()))

Tenant = str | Callable[[RunContext[Any]], str | None] | None


class TenureToolset(AbstractToolset[Any]):
    """The tools of a tenure `App` as a pydantic-ai toolset: each call is a job.

    ``tools`` names the app's tools to offer (default: all). ``tenant`` (a string, or
    a function of the run context) puts the calls in that tenant's keyspace and share
    of the queue. ``defer_after`` (seconds; default: wait as long as the job takes)
    ends the run with calls still running deferred: give the agent an ``output_type``
    that includes `DeferredToolRequests`. ``max_retries`` bounds the model's retries
    of a tool after `ModelRetry`; ``lax`` converts a model's trivial slips (``"2"`` for an
    ``int``) instead of spending one of those retries on them.
    """

    def __init__(
        self,
        app: App,
        *,
        tools: Sequence[str] | None = None,
        tenant: Tenant = None,
        defer_after: float | None = None,
        max_retries: int = 1,
        id: str = "tenure",
        lax: bool = False,
    ) -> None:
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise PolicyError(f"max_retries must be a non-negative int, got {max_retries!r}")
        self._defs = [_definition(app.registry.tool_schema(name)) for name in offered(app, tools)]
        self.app, self.max_retries, self._tenant, self._id = app, max_retries, tenant, id
        self.defer_after = check_defer_after(defer_after)
        self.lax = lax

    @property
    def id(self) -> str:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        return {
            d.name: ToolsetTool(
                toolset=self, tool_def=d, max_retries=self.max_retries, args_validator=_ANY_OBJECT
            )
            for d in self._defs
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        run = current_run()
        if run is not None:
            return await self._child_call(run, name, tool_args, ctx)
        key = call_key(FRAMEWORK, ctx.conversation_id or ctx.run_id, ctx.tool_call_id)
        tenant = self._tenant(ctx) if callable(self._tenant) else self._tenant
        try:
            return await run_call(
                self.app,
                name,
                tool_args,
                key=key,
                tenant=tenant,
                defer_after=self.defer_after,
                lax=self.lax,
            )
        except Deferred as deferred:
            metadata = {"job_id": deferred.job.id, "key": key, "tenant": tenant, "tool": name}
            raise CallDeferred(metadata={METADATA_KEY: metadata}) from None
        except (PayloadError, JobFailed, JobCancelled) as error:
            raise _framework_error(failure(name, error)) from None

    async def _child_call(
        self, run: _Run, name: str, tool_args: dict[str, Any], ctx: RunContext[Any]
    ) -> Any:
        """Inside a durable run (`TenureDurability`): the call is a child job of the run,
        keyed by the run and the call's position (``tool-job:{run}:tool.{step}.{index}``),
        waited for holding no lease; a replay finds the same child and its recorded end."""
        position = f"tool.{run.position(ctx, 'child')}"
        try:
            if self.lax:
                tool_args = self.app.registry.coerce_arguments(name, tool_args)
            done = await run.child_call(name, tool_args, position)
        except PayloadError as error:
            raise _framework_error(failure(name, error)) from None
        if done.state == "succeeded":
            return done.result
        raise _framework_error(failure(name, ended(done))) from None

    async def results(
        self, requests: DeferredToolRequests, *, timeout: float | None = None
    ) -> DeferredToolResults:
        """The results of this toolset's deferred calls in ``requests``, once their jobs
        ended: pass them to the next run as ``deferred_tool_results`` (with that run's
        message history). A failed job's entry is the `ModelRetry` or `ToolFailed` the
        call would have raised. Other toolsets' calls are left out. WaitTimeout if a job
        has not ended within ``timeout`` seconds."""
        calls: dict[str, Any] = {}
        for call in requests.calls:
            ours = requests.metadata.get(call.tool_call_id, {}).get(METADATA_KEY)
            if not isinstance(ours, dict) or call.tool_name not in self.app.tools:
                continue
            try:
                calls[call.tool_call_id] = await settle(
                    self.app, ours["key"], ours.get("tenant"), timeout
                )
            except (JobFailed, JobCancelled) as error:
                calls[call.tool_call_id] = _framework_error(failure(call.tool_name, error))
        return DeferredToolResults(calls=calls)


def _definition(schema: dict[str, Any]) -> ToolDefinition:
    return ToolDefinition(
        name=schema["name"],
        description=schema["description"],
        parameters_json_schema=schema["parameters"],
    )


def _framework_error(outcome: Failure) -> ModelRetry | ToolFailed:
    return ModelRetry(outcome.message) if outcome.retry else ToolFailed(outcome.message)
