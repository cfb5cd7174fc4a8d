"""What a worker runs for tests/system/deploy/test_deploy.py: the observability tests' tools
(labelled, short leases; one fails, one retries, one sleeps, one sends a fenced request)
and one that waits at a waitpoint, so one scrape shows every series the shipped alert
rules and Grafana dashboard read.

Worker processes load ``tests.apps.deploy_app:app`` (``TENURE_DSN``); a test builds its
producer with ``build_app(dsn)``.
"""

from __future__ import annotations

from tests.integration.observe.observe_app import HEARTBEAT, JITTER, LEASE
from tests.integration.observe.observe_app import build_app as build_observe_app

from tenure import App, Context


def build_app(dsn: str | None = None) -> App:
    app = build_observe_app(dsn)

    @app.tool(lease=LEASE, heartbeat=HEARTBEAT, jitter=JITTER)
    def approve(ctx: Context, timeout: float) -> str:
        """Waits for an approval until ``timeout`` (nobody answers in the test)."""
        wp = ctx.waitpoint("approval", timeout=timeout)
        if wp.pending:
            ctx.suspend(wp)
        return wp.state

    return app


app = build_app()
