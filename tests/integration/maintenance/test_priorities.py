"""Priorities: a tool's default, a call's own, and the claim taking the higher first."""

from __future__ import annotations

import pytest
from tests.integration.maintenance.maintenance_app import build_app

from tenure import PolicyError
from tenure._store import Store

LEASES = {"tick": 60_000, "hold": 60_000, "urgent": 60_000}


async def test_higher_priority_is_claimed_first(store: Store, tenure_dsn: str) -> None:
    app = build_app(tenure_dsn)

    @app.tool(priority=5)
    async def urgent(ctx: object) -> None:
        """Calls of this tool go before default ones."""

    try:
        low = await app.enqueue("tick", priority=-3)
        default = await app.enqueue("tick")
        tool_default = await app.enqueue("urgent")
        high = await app.enqueue("tick", priority=9)
        demoted = await app.enqueue("urgent", priority=0)  # a call may set its own
        later_default = await app.enqueue("tick")
        assert (default.priority, tool_default.priority, demoted.priority) == (0, 5, 0)
        order = [(await store.claim("w", LEASES, 1))[0].id for _ in range(6)]
        expected = [high, tool_default, default, demoted, later_default, low]
        assert order == [job.id for job in expected]  # equal priority: first queued first
        with pytest.raises(PolicyError, match="priority must be an integer in"):
            await app.enqueue("tick", priority=101)
        with pytest.raises(PolicyError, match="priority must be an integer in"):
            app.tool("bad", priority=True)
    finally:
        await app.aclose()


async def test_keyed_and_unkeyed_calls_share_one_priority_order(
    store: Store, tenure_dsn: str
) -> None:
    """The admitting claim hands keyed calls to the same statement, so order is not split."""
    app = build_app(tenure_dsn)
    try:
        free_low = await app.enqueue("hold", {"seconds": 0}, priority=1)
        keyed_high = await app.enqueue("hold", {"seconds": 0, "user": 1}, priority=7)
        free_high = await app.enqueue("hold", {"seconds": 0}, priority=5)
        keyed_low = await app.enqueue("hold", {"seconds": 0, "user": 2}, priority=0)
        order = [(await store.claim("w", LEASES, 1, limited=True))[0].id for _ in range(4)]
        assert order == [job.id for job in (keyed_high, free_high, free_low, keyed_low)]
    finally:
        await app.aclose()
