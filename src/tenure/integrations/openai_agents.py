"""OpenAI Agents SDK tools that run as tenure jobs, and durable runs
(``pip install 'tenure[openai-agents]'``).

`TenureTools(app).tools` are plain `FunctionTool`s (the SDK's public tool type) whose
schemas are the tenure tools' signatures; each call is a job:

- inside a durable run (`TenureRunner`), the job is a child of the run, keyed by the run
  and the call's position in the model's response (``tool-job:{run}:tool.{n}.{i}``), and
  the run waits for it holding no lease; a resumed run finds the same job;
- in a plain ``Runner.run``, its key is ``openai-agents:{conversation}:{call_id}``, the
  conversation being what ``conversation(ctx)`` reads from the run context, and the call
  waits for the job's result;
- a failed job is the error string the SDK sends the model instead of a result,
  worded from the job's error code and attempts, plus the message of a failure the
  tool classified itself (``PermanentError``, ...), as an MCP client gets it (never an
  unclassified exception's text); arguments outside the signature get the list of
  problems the same way.

Approval stays the SDK's: ``needs_approval`` is passed to every tool as given (in a
durable run, the wait for a person's decision is a waitpoint: see `TenureRunner`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from .._app import App
from .._errors import JobCancelled, JobFailed, PayloadError, PolicyError
from ._calls import call_key, ended, failure, offered, run_call
from ._openai_agents_durable import TenureRunner, current_run, run_context

__all__ = ["TenureRunner", "TenureTools", "run_context"]

FRAMEWORK = "openai-agents"

Scope = Callable[[RunContextWrapper[Any]], str | None]
NeedsApproval = bool | Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]


class TenureTools:
    """The tools of a tenure `App` as OpenAI Agents SDK function tools: each call is a job.

    ``conversation`` says which conversation a call belongs to, from the run context
    (e.g. ``lambda ctx: ctx.context["chat_id"]``): with the call id it makes the job's
    key outside a durable run (inside one, the run and the call's position make it).
    ``tools`` names the app's tools to offer (default: all). ``tenant`` (a string or a
    function of the run context) puts the calls in that tenant's keyspace outside a
    durable run (inside one, the run's tenant). ``needs_approval`` is the SDK's, passed on.
    ``lax`` converts a model's trivial slips (``"2"`` for an ``int``) instead of refusing
    them.
    """

    def __init__(
        self,
        app: App,
        *,
        tools: Sequence[str] | None = None,
        conversation: Scope | None = None,
        tenant: str | Scope | None = None,
        needs_approval: NeedsApproval = False,
        lax: bool = False,
    ) -> None:
        self.app = app
        self.lax = lax
        self._conversation = conversation
        self._tenant = tenant
        self._needs_approval = needs_approval
        self.tools: list[FunctionTool] = [self._tool(name) for name in offered(app, tools)]

    def _tool(self, name: str) -> FunctionTool:
        schema = self.app.registry.tool_schema(name)

        async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
            return await self._call(name, ctx, ctx.tool_call_id, arguments)

        tool = FunctionTool(
            name=name,
            description=schema["description"] or "",
            params_json_schema=schema["parameters"],
            on_invoke_tool=invoke,
            strict_json_schema=False,  # tenure's own check is strict; the schema stays as given
            needs_approval=self._needs_approval,
        )
        tool.__tenure_child__ = True  # type: ignore[attr-defined]  # a job: never a step
        return tool

    async def _call(
        self, name: str, ctx: RunContextWrapper[Any], call_id: str, arguments: str
    ) -> Any:
        try:
            payload = json.loads(arguments)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            return f"The arguments for {name} are not a JSON object."
        run = current_run()
        try:
            if self.lax:
                payload = self.app.registry.coerce_arguments(name, payload)
            if run is not None:
                done = await run.child_call(name, payload, f"tool.{run.position(call_id, 'child')}")
                if done.state != "succeeded":
                    return failure(name, ended(done)).message
                result = done.result
            else:
                if self._conversation is None:
                    raise PolicyError(
                        f"{FRAMEWORK}: outside a durable run a call's key needs conversation="
                    )
                key = call_key(FRAMEWORK, self._conversation(ctx), call_id)
                tenant = self._tenant(ctx) if callable(self._tenant) else self._tenant
                result = await run_call(
                    self.app, name, payload, key=key, tenant=tenant, defer_after=None
                )
        except (PayloadError, JobFailed, JobCancelled) as error:
            return failure(name, error).message
        return json.dumps(result)
