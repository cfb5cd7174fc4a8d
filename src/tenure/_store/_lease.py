"""The heartbeat thread's own connection: synchronous, kept apart from the event loop.

A query that the network swallows (a blackholed link) would block the thread
forever, and no server-side timeout can fire for it; so every call runs under a
local deadline after which the statement is cancelled and the socket shut down from a
watchdog timer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from .._dsn import check_dsn
from ._connection import (
    abandon_statement,
    connect_options,
    statement,
    typed_errors,
    typed_methods,
)
from ._rows import (
    Extension,
    JournalRow,
    SessionBeat,
    WorkerRegistration,
    journal_params,
)


class LeaseConnection:
    """The heartbeat thread's own connection: one batched extension per tick.

    A query that the network swallows (a blackholed link) would block the
    thread forever, and no server-side timeout can fire for it; so every call
    runs under a local deadline after which the statement is cancelled and the socket
    shut down from a watchdog timer, turning the hang into an ordinary connection error
    (and leaving no statement behind on the server, holding its locks).

    Every public method raises its database errors as tenure errors (StoreError and
    its verdict, `_errors.RULES`); a failed connect is a ConnectionLost to ``retry``.
    """

    def __init__(self, dsn: str) -> None:
        self._dsn = check_dsn(dsn)
        self._conn: psycopg.Connection[dict[str, Any]] | None = None
        self._kept: list[int] = []
        self._freeze_unnamed = True

    def _connection(self, timeout: float) -> psycopg.Connection[dict[str, Any]]:
        if self._conn is None or self._conn.closed:
            options = {**connect_options(), "connect_timeout": max(2, round(timeout))}
            with typed_errors(connecting=True):
                self._conn = psycopg.connect(
                    self._dsn, autocommit=True, row_factory=dict_row, **options
                )
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _run(
        self, name: str, params: Callable[[], dict[str, Any]], timeout: float
    ) -> tuple[float, list[dict[str, Any]]]:
        """Run one statement; returns when it was sent (monotonic, measured once the
        connection is up, so a reconnect is not counted against a lease) and its rows.
        ``params`` is built at that moment too (journal rows are dated from it)."""
        conn = self._connection(timeout)
        watchdog = threading.Timer(timeout, abandon_statement, (conn,))
        watchdog.daemon = True
        watchdog.start()
        try:
            sent_at = time.monotonic()
            cursor = conn.execute(statement(name), params())
            return sent_at, cursor.fetchall() if cursor.description else []
        except psycopg.Error:
            self.close()
            raise
        finally:
            watchdog.cancel()

    def keep(self, job_ids: Sequence[int], *, freeze_unnamed: bool = True) -> None:
        """The other leases the process holds and can observe, not due at the next
        extension: a session lease (migration 0023) in neither list is frozen by it, unless
        ``freeze_unnamed`` is false (a claim of the process is still on its way: its jobs
        may be the ones not named yet)."""
        self._kept = list(job_ids)
        self._freeze_unnamed = freeze_unnamed

    def extend(
        self, owner: str, held: Sequence[tuple[int, int, int]], timeout: float
    ) -> list[Extension]:
        """Extend (job id, token, lease_ms) leases held by ``owner`` in one statement;
        one answer per lease, each carrying when the statement was sent."""
        sent_at, rows = self._run(
            "extend_leases",
            lambda: {
                "owner": owner,
                "ids": [h[0] for h in held],
                "tokens": [h[1] for h in held],
                "lease_ms": [h[2] for h in held],
                "kept": self._kept,
                "freeze_unnamed": self._freeze_unnamed,
            },
            timeout,
        )
        return [Extension(row["id"], row["lease_until"], row["db_now"], sent_at) for row in rows]

    def beat_session(
        self,
        owner: str,
        shortest_ms: int,
        freeze: Sequence[tuple[int, int]],
        timeout: float,
    ) -> SessionBeat:
        """Confirm every lease that follows ``owner``'s session in one update of its row
        (refused when the session was last heard of more than ``shortest_ms`` ago), and
        freeze the (job id, token) leases in ``freeze``."""
        sent_at, rows = self._run(
            "beat_session",
            lambda: {
                "owner": owner,
                "shortest_ms": shortest_ms,
                "ids": [f[0] for f in freeze],
                "tokens": [f[1] for f in freeze],
            },
            timeout,
        )
        row = rows[0]
        return SessionBeat(row["beat_at"], row["db_now"], list(row["frozen"]), sent_at)

    def report_progress(
        self, owner: str, reports: Sequence[tuple[int, int, str]], timeout: float
    ) -> set[int]:
        """Write (job id, token, progress JSON) reports held by ``owner``, fenced like an
        extension; returns the ids whose report was accepted."""
        _, rows = self._run(
            "report_progress",
            lambda: {
                "owner": owner,
                "ids": [r[0] for r in reports],
                "tokens": [r[1] for r in reports],
                "progress": [Jsonb(r[2], dumps=str) for r in reports],
            },
            timeout,
        )
        return {row["id"] for row in rows}

    def touch_worker(self, worker: WorkerRegistration, timeout: float) -> None:
        """The worker's keep-alive in the registry when no extension carried it."""
        self._run("touch_worker", worker.params, timeout)

    def states(self, job_ids: Sequence[int], timeout: float) -> dict[int, str]:
        _, rows = self._run("job_states", lambda: {"ids": list(job_ids)}, timeout)
        return {row["id"]: row["state"] for row in rows}

    def record_events(self, rows: Sequence[JournalRow], timeout: float) -> None:
        """Journal many events in one statement."""
        self._run("record_events", lambda: journal_params(rows), timeout)


typed_methods(LeaseConnection, sync=True)
