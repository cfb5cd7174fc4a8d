"""/metrics while the database is gone: it answers, and says so (tenure_database_up 0).

A scrape that waited for the database would outlast Prometheus's scrape timeout; the
target would then look dead and every tenure series vanish, so the alert on
``tenure_database_up == 0`` could never fire. The database is cut off for real, through
a TCP proxy in front of the test's PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from psycopg.conninfo import conninfo_to_dict
from tests.observe.helpers import scrape, value
from tests.support.waiting import wait_until

from tenure._chaos._proxy import FaultProxy, rewrite_dsn
from tenure._observe._http import MetricsState, ServerThread, metrics_app
from tenure._observe._metrics import DatabaseGauges, ToolLabels

pytestmark = pytest.mark.storage

# Well below the pool's 30 s wait for a connection, which is what a scrape without a
# deadline takes once the database is gone (and a partitioned one takes for ever).
PATIENCE = 20.0


@pytest.fixture
def proxy(tenure_dsn: str) -> Iterator[FaultProxy]:
    params = conninfo_to_dict(tenure_dsn)
    host, port = str(params.get("host", "")), int(params.get("port") or 5432)
    unix = host.startswith("/")
    proxy = FaultProxy.unix(f"{host}/.s.PGSQL.{port}") if unix else FaultProxy(host, port)
    with proxy:
        yield proxy


@pytest.mark.parametrize("mode", ["reset", "blackhole"])
def test_metrics_answer_database_down_while_the_database_is_unreachable(
    tenure_dsn: str, proxy: FaultProxy, mode: str
) -> None:
    """``reset``: the server went away (connections refused); ``blackhole``: a partition
    that swallows every byte. Either way each scrape answers, with tenure_database_up 0,
    and the gauges come back once the database does."""
    labels = ToolLabels()
    labels.register("echo", {})
    state = MetricsState([], DatabaseGauges(labels, deadline=0.5))
    server = ServerThread(
        metrics_app(rewrite_dsn(tenure_dsn, proxy.host, proxy.port), state), "127.0.0.1", 0
    )
    url = server.start() + "/metrics"
    try:
        assert value(scrape(url), "tenure_database_up") == 1
        proxy.set_mode(mode)
        # The second scrape is the one that used to hang: the pool has no connection left.
        for _ in range(3):
            assert value(scrape(url, timeout=PATIENCE), "tenure_database_up") == 0
        proxy.set_mode("pass")
        wait_until(
            lambda: value(scrape(url), "tenure_database_up") == 1,
            timeout=60,
            interval=0.2,
            message="tenure_database_up never came back after the database did",
        )
    finally:
        proxy.set_mode("pass")
        server.stop()
