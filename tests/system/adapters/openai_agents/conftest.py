"""Fixtures of the OpenAI Agents SDK adapter tests (see ../pydantic_ai/ledger_fixtures.py)."""

from tests.system.adapters.pydantic_ai.ledger_fixtures import (  # noqa: F401 - fixtures
    app,
    ledger,
    require_in_ci,
    worker,
    workers,
)

require_in_ci("agents", "openai-agents")
