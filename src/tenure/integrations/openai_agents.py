"""OpenAI Agents SDK tools that run as tenure jobs (``pip install 'tenure[openai-agents]'``).

`TenureTools(app, conversation=...).tools` are plain `FunctionTool`s (the SDK's public
tool type) whose schemas are the tenure tools' signatures; each call is a job:

- its key is ``openai-agents:{conversation}:{call_id}``, the conversation being what
  ``conversation(ctx)`` reads from the run context: a run resumed from a saved
  `RunState` replays the same call id and so finds the job it started, which runs once;
- the call waits for the job's result. With ``defer_after``, the SDK's interruption
  carries calls that outlive the agent process: a call whose job has not ended after
  that many seconds asks for approval (``needs_approval``), so the run ends with it
  in ``result.interruptions``; save ``result.to_state().to_string()``, and any process
  resumes it with `TenureTools.approve` and ``Runner.run(agent, state)``;
- a failed job is the error string the SDK sends the model instead of a result,
  worded from the job's error code and attempts, plus the message of a failure the
  tool classified itself (``PermanentError``, ...), as an MCP client gets it (never an
  unclassified exception's text); arguments outside the signature get the list of
  problems the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from agents import FunctionTool, RunContextWrapper, RunState
from agents.tool_context import ToolContext

from .._app import App
from .._errors import JobCancelled, JobFailed, PayloadError
from ._calls import Deferred, call_key, check_defer_after, failure, offered, run_call

__all__ = ["TenureTools"]

FRAMEWORK = "openai-agents"

Scope = Callable[[RunContextWrapper[Any]], str | None]


class TenureTools:
    """The tools of a tenure `App` as OpenAI Agents SDK function tools: each call is a job.

    ``conversation`` says which conversation a call belongs to, from the run context
    (e.g. ``lambda ctx: ctx.context["chat_id"]``): with the call id it makes the job's
    key. ``tools`` names the app's tools to offer (default: all). ``tenant`` (a string
    or a function of the run context) puts the calls in that tenant's keyspace.
    ``defer_after`` (seconds; default: wait as long as the job takes) ends the run with
    the calls still running after that long interrupted. ``lax`` converts a model's
    trivial slips (``"2"`` for an ``int``) instead of refusing them.
    """

    def __init__(
        self,
        app: App,
        *,
        tools: Sequence[str] | None = None,
        conversation: Scope,
        tenant: str | Scope | None = None,
        defer_after: float | None = None,
        lax: bool = False,
    ) -> None:
        self.app = app
        self.lax = lax
        self.defer_after = check_defer_after(defer_after)
        self._conversation = conversation
        self._tenant = tenant
        self.tools: list[FunctionTool] = [self._tool(name) for name in offered(app, tools)]

    def _tool(self, name: str) -> FunctionTool:
        schema = self.app.tool_schema(name)

        async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
            return await self._call(name, ctx, ctx.tool_call_id, arguments, None)

        async def defer(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
            """Whether the call must wait outside this run: its job is still going."""
            try:
                await self._call(name, ctx, call_id, params, self.defer_after)
            except Deferred:
                return True
            return False

        return FunctionTool(
            name=name,
            description=schema["description"] or "",
            params_json_schema=schema["parameters"],
            on_invoke_tool=invoke,
            strict_json_schema=False,  # tenure's own check is strict; the schema stays as given
            needs_approval=defer if self.defer_after is not None else False,
        )

    async def _call(
        self,
        name: str,
        ctx: RunContextWrapper[Any],
        call_id: str,
        arguments: str | dict[str, Any],
        defer_after: float | None,
    ) -> Any:
        key = call_key(FRAMEWORK, self._conversation(ctx), call_id)
        tenant = self._tenant(ctx) if callable(self._tenant) else self._tenant
        try:
            payload = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            return f"The arguments for {name} are not a JSON object."
        try:
            result = await run_call(
                self.app,
                name,
                payload,
                key=key,
                tenant=tenant,
                defer_after=defer_after,
                lax=self.lax,
            )
        except (PayloadError, JobFailed, JobCancelled) as error:
            return failure(name, error).message
        return json.dumps(result)

    def approve(self, state: RunState[Any]) -> int:
        """Approve this set's interrupted calls in ``state`` (a run that ended with calls
        still running), so that ``Runner.run(agent, state)`` resumes them: each finds its
        job by key and returns its result, or its error, once the job ended. Returns how
        many it approved; other interruptions are left to their owners."""
        ours = {tool.name for tool in self.tools}
        approved = 0
        for item in state.get_interruptions():
            if item.tool_name in ours:
                state.approve(item)
                approved += 1
        return approved
