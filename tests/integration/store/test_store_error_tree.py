"""Real database errors reach tenure's callers as tenure errors, each with its verdict.

Every error here is provoked on a real server (a killed backend, a lock held past a
statement timeout, a constraint, a NUL byte, a closed port, a malformed DSN) and caught
where an App caller, or the worker's own connections, would catch it: a `StoreError` kind
from `tenure._errors`' one tree, its verdict from the store's one table, the database's
own error kept as the cause (for the operator) and its SQLSTATE on the error.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from tests.support.waiting import wait_until_async

import tenure
from tenure._errors import (
    ConfigError,
    ConnectionLost,
    ConstraintViolation,
    DatabaseBusy,
    DataRejected,
    StoreError,
)
from tenure._store import Finish, LeaseConnection, NewJob, Store, migrate
from tenure.telemetry import Event, attach


def make_app(dsn: str) -> tenure.App:
    app = tenure.App(dsn)

    @app.tool("fetch", lease=5, heartbeat=1, jitter=1)
    async def fetch(ctx: tenure.Context, invoice_id: str) -> dict[str, str]:
        return {"invoice_id": invoice_id}

    return app


@pytest.fixture
async def store(tenure_dsn: str) -> AsyncIterator[Store]:
    async with Store(tenure_dsn, min_size=1, max_size=1) as store:  # no idle check: a
        yield store  # connection killed while idle is handed out as it is


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A local port nothing listens on (bound, never listening: connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def no_driver_error(error: BaseException) -> None:
    """A tenure error whose own type owes nothing to psycopg; psycopg's is only the cause."""
    assert isinstance(error, StoreError), repr(error)
    assert not any(cls.__module__.startswith("psycopg") for cls in type(error).__mro__)
    assert isinstance(error.__cause__, psycopg.Error), repr(error.__cause__)


def terminate_tenure_backends(dsn: str) -> int:
    """Kill every tenure connection to this database (the server's admin shutdown of them)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'tenure'"
            " AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def with_options(dsn: str, extra: str) -> str:
    params = conninfo_to_dict(dsn)
    params["options"] = f"{params.get('options', '')} {extra}".strip()
    return make_conninfo("", **params)


@pytest.mark.parametrize("call", ["get_job", "claim", "finish_many", "complete_waitpoint"])
async def test_a_killed_connection_is_a_lost_connection_of_uncertain_outcome(
    store: Store, tenure_dsn: str, call: str
) -> None:
    """What a caller reads, what the worker claims and commits, what an operator answers."""
    await store.db_now()  # the pool's one connection is up and idle
    assert terminate_tenure_backends(tenure_dsn) >= 1
    with pytest.raises(ConnectionLost) as caught:
        if call == "get_job":
            await store.get_job(1)
        elif call == "claim":
            await store.claim("w", {"fetch": 5000}, 1)
        elif call == "finish_many":
            await store.finish_many("w", [Finish(1, 1, "succeeded", result_json="{}")])
        else:
            await store.complete_waitpoint("0" * 64, "{}")
    no_driver_error(caught.value)
    assert caught.value.verdict == "uncertain"  # the statement may have been applied
    assert caught.value.sqlstate in (None, "57P01")
    await store.db_now()  # the pool dropped the dead connection and made a new one


def test_the_heartbeats_connection_loses_its_link_as_a_tenure_error(tenure_dsn: str) -> None:
    conn = LeaseConnection(tenure_dsn)
    try:
        assert conn.states([1], 2.0) == {}
        assert terminate_tenure_backends(tenure_dsn) >= 1
        with pytest.raises(ConnectionLost) as caught:
            conn.states([1], 2.0)
        no_driver_error(caught.value)
        assert caught.value.verdict == "uncertain"
        assert conn.states([1], 2.0) == {}  # it reconnects on the next call
    finally:
        conn.close()


async def test_a_statement_timeout_is_busy_and_may_be_sent_again(tenure_dsn: str) -> None:
    app = make_app(with_options(tenure_dsn, "-c statement_timeout=300"))
    try:
        job = await app.enqueue("fetch", {"invoice_id": "locked"})
        with psycopg.connect(tenure_dsn) as holder:  # holds the job's row lock meanwhile
            holder.execute("SELECT 1 FROM tenure_jobs WHERE id = %s FOR UPDATE", (job.id,))
            with pytest.raises(DatabaseBusy) as caught:
                await app.cancel(job.id)
        no_driver_error(caught.value)
        assert (caught.value.verdict, caught.value.sqlstate) == ("retry", "57014")
        assert (await app.cancel(job.id)).state == "cancelled"  # sent again, it passes
    finally:
        await app.aclose()


async def test_a_constraint_fails_and_names_the_constraint(store: Store) -> None:
    job = NewJob(tool="fetch", key="k", payload_json="{}", payload_hash="h", max_attempts=0)
    with pytest.raises(ConstraintViolation) as caught:
        await store.enqueue(job)
    no_driver_error(caught.value)
    assert (caught.value.verdict, caught.value.sqlstate) == ("fail", "23514")
    assert caught.value.constraint == "tenure_jobs_max_attempts_check"


async def test_a_nul_byte_is_data_the_database_cannot_store(store: Store) -> None:
    # In text, psycopg refuses it before sending; in jsonb, the server does (22P05).
    in_text = NewJob(
        tool="fetch", key="a\x00b", payload_json="{}", payload_hash="h", max_attempts=1
    )
    in_json = NewJob(
        tool="fetch", key="k", payload_json='{"a": "\\u0000"}', payload_hash="h", max_attempts=1
    )
    for job, sqlstate in ((in_text, None), (in_json, "22P05")):
        with pytest.raises(DataRejected) as caught:
            await store.enqueue(job)
        no_driver_error(caught.value)
        assert (caught.value.verdict, caught.value.sqlstate) == ("fail", sqlstate)
        assert "\x00" not in str(caught.value) and "\\u0000" not in str(caught.value)


async def test_an_unreachable_server_is_a_lost_connection_to_retry(closed_port: int) -> None:
    dsn = f"host=127.0.0.1 port={closed_port} user=tenure dbname=tenure connect_timeout=2"
    app = make_app(dsn)
    try:
        for call in ("get", "enqueue"):
            with pytest.raises(ConnectionLost) as caught:
                if call == "get":
                    await app.get(1)
                else:
                    await app.enqueue("fetch", {"invoice_id": "a"})
            no_driver_error(caught.value)
            assert caught.value.verdict == "retry"  # nothing was sent
            assert "Connection refused" in str(caught.value)  # libpq's word, for the operator
    finally:
        await app.aclose()
    with pytest.raises(ConnectionLost) as refused:
        migrate(dsn)
    no_driver_error(refused.value)
    assert refused.value.verdict == "retry"


@pytest.mark.parametrize(
    "dsn", ["host=127.0.0.1 port=notaport", "postgresql://[::1", "host=127.0.0.1 nonsense=1"]
)
async def test_a_malformed_dsn_is_a_config_error_before_any_connection(dsn: str) -> None:
    with pytest.raises(ConfigError) as caught:
        app = make_app(dsn)
        try:
            await app.get(1)
        finally:
            await app.aclose()
    assert caught.value.__cause__ is None and caught.value.__context__ is None


async def test_a_worker_whose_connections_are_all_killed_finishes_its_job(
    tenure_dsn: str,
) -> None:
    """The worker's claims, heartbeats, LISTEN and commit all lose their link at once; it
    goes on, and what it reports of the errors names tenure's types, never psycopg's."""
    app = tenure.App(tenure_dsn)
    release = threading.Event()

    @app.tool("hold", lease=5, heartbeat=1, jitter=1)
    def hold(ctx: tenure.Context) -> str:
        release.wait(30)
        return "held"

    events: list[Event] = []
    detach = attach(events.append)
    worker = app.worker(concurrency=1, poll_interval=0.1)
    running = asyncio.create_task(worker.run(handle_signals=False))
    try:
        job = await app.enqueue("hold", {})

        async def started() -> bool:
            return (await app.get(job.id)).state == "running"

        await wait_until_async(started, timeout=30, message="the job never started")
        assert terminate_tenure_backends(tenure_dsn) >= 3  # pool, heartbeat, listener
        release.set()
        assert await app.wait(job.id, timeout=60) == "held"
        assert not running.done()
    finally:
        release.set()
        worker.stop()
        await running
        detach()
        await app.aclose()
    named = {str(e.fields["error"]) for e in events if "error" in e.fields}
    drivers = {"OperationalError", "InterfaceError", "DatabaseError", "AdminShutdown"}
    assert "ConnectionLost" in named and not named & drivers, named
