"""Fixtures of the pydantic-ai adapter tests (see ledger_fixtures)."""

from tests.system.adapters.pydantic_ai.ledger_fixtures import (  # noqa: F401 - fixtures
    app,
    ledger,
    require_in_ci,
    worker,
    workers,
)

require_in_ci("pydantic_ai", "pydantic-ai")
