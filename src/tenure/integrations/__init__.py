"""Adapters that run agent frameworks' tool calls as tenure jobs.

Each adapter is its own module behind its own extra, so the core install pulls in
no agent framework: ``tenure.integrations.pydantic_ai`` (``tenure[pydantic-ai]``)
and ``tenure.integrations.openai_agents`` (``tenure[openai-agents]``). What they
share (keys, waiting, what a failed job may tell a model) is in ``_calls``.

Module map:

    _calls         one tool call as one job, framework-free: its key, waiting, deferral,
                   what a failure may tell the model; DurableRun, one attempt of a durable
                   run (its units' names, its tool calls as child jobs, parking)
    pydantic_ai    TenureToolset: a pydantic-ai toolset (deferred tools past defer_after);
                   TenureDurability and run_context, re-exported from
    _pydantic_ai_durable  a durable pydantic-ai engine: the agent run is a job, each model
                   request and tool call a fenced step, tools child jobs keyed by position
    openai_agents  TenureTools: OpenAI Agents SDK FunctionTools; TenureRunner and
                   run_context, re-exported from
    _openai_agents_durable  durable OpenAI Agents runs: the run is a job, each model call a
                   fenced step (a Model/ModelProvider wrapper), tools child jobs or steps
"""
