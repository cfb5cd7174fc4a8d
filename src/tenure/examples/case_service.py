"""A case-management service that receives fenced side effects from tenure workers.

Run it::

    python -m tenure.examples.case_service --dsn "dbname=cases" --port 8080 \\
        (--secret-env CASE_SERVICE_FENCE_SECRET | --insecure)

It prints its URL once it listens on 127.0.0.1. With ``--secret-env`` the
guard requires every fence to be signed with that secret (the workers'
``TENURE_SIGNING_KEY``); ``--insecure`` trusts every caller that can reach the
loopback port, which is only fit for a demo on one machine. Endpoints:

- ``POST /cases`` ``{"title": "..."}`` → 201, creates a row in ``example_cases``;
- ``POST /payments/capture`` ``{"payment_id": "...", "amount_cents": 1250}`` → 200,
  creates a row in ``example_payments``;
- ``GET /operations/{key}`` → what the service knows about an idempotency key,
  for a worker whose request timed out (404 if it never arrived).

Both POSTs require the fence headers and write their row through
``slot.conn``, in the same transaction as the guard's record: the row and the
stored response commit together or not at all, so a repeated request finds
either both or neither.

With ``RECEIVER_DECISION_LOG=/path/file.jsonl`` every fence decision is
appended as one JSON line (decision, scope, token, key, status, arrival time on
the monotonic and the wall clock) — the record to read when two cases exist.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import uvicorn
from psycopg.rows import dict_row
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tenure.fence import FenceDecision, FenceGuard, FenceMiddleware, FenceSlot, migrate_fence

# This service's own SQL: its tables are the "side effects" a worker causes.

# No unique constraint on idempotency_key on purpose: exactly-once must come
# from the fence guard, and tests count these rows to prove it does.
CREATE_TABLES = """
SELECT pg_advisory_xact_lock(7233732574736250467);
CREATE TABLE IF NOT EXISTS example_cases (
    id              bigserial   PRIMARY KEY,
    idempotency_key text        NOT NULL,
    scope           text        NOT NULL,
    token           bigint      NOT NULL,
    title           text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS example_payments (
    id              bigserial   PRIMARY KEY,
    idempotency_key text        NOT NULL,
    scope           text        NOT NULL,
    token           bigint      NOT NULL,
    payment_id      text        NOT NULL,
    amount_cents    bigint      NOT NULL CHECK (amount_cents > 0),
    captured_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""

INSERT_CASE = """
INSERT INTO example_cases (idempotency_key, scope, token, title)
VALUES (%(key)s, %(scope)s, %(token)s, %(title)s)
RETURNING id, created_at;
"""

INSERT_PAYMENT = """
INSERT INTO example_payments (idempotency_key, scope, token, payment_id, amount_cents)
VALUES (%(key)s, %(scope)s, %(token)s, %(payment_id)s, %(amount_cents)s)
RETURNING id, captured_at;
"""

# For a report (tenure demo): effects applied, and idempotency keys applied more than once.
EFFECTS_SUMMARY = """
SELECT count(*) AS applied,
       (SELECT count(*) FROM (
            SELECT idempotency_key FROM (
                SELECT idempotency_key FROM example_cases
                UNION ALL
                SELECT idempotency_key FROM example_payments) AS effects
            GROUP BY idempotency_key HAVING count(*) > 1) AS twice) AS doubled
FROM (SELECT 1 FROM example_cases UNION ALL SELECT 1 FROM example_payments) AS everything;
"""

AsyncConn = psycopg.AsyncConnection[Any]


class DecisionLog:
    """Appends each FenceDecision as a JSON line; one write per line, so lines never interleave."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()

    def __call__(self, decision: FenceDecision) -> None:
        line = json.dumps(
            {
                "decision": decision.outcome,
                "status": decision.status,
                "method": decision.method,
                "path": decision.path,
                "scope": decision.scope,
                "token": decision.token,
                "key": decision.key,
                "arrived_monotonic": decision.arrived_monotonic,
                "arrived_wall": decision.arrived_wall,
                "arrived_at": datetime.fromtimestamp(decision.arrived_wall, UTC).isoformat(),
                "detail": decision.detail,
                "pid": os.getpid(),
            }
        )
        with self._lock, self._path.open("a", encoding="utf-8") as log:
            log.write(line + "\n")


def effects_summary(dsn: str) -> tuple[int, int]:
    """(effects applied, idempotency keys applied more than once), read from this
    service's own tables: what a report of exactly-once needs."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(EFFECTS_SUMMARY).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def prepare_database(dsn: str) -> None:
    """The fence kit's tables and the example's own, both idempotent."""
    migrate_fence(dsn)
    with psycopg.connect(dsn) as conn:
        conn.execute(CREATE_TABLES)


def _slot(request: Request) -> FenceSlot[AsyncConn]:
    slot: FenceSlot[AsyncConn] = request.scope["tenure.fence"]
    return slot


async def _object(request: Request) -> dict[str, Any] | None:
    try:
        payload = await request.json()
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def _invalid(detail: str) -> JSONResponse:
    return JSONResponse({"error": "invalid_request", "detail": detail}, status_code=400)


async def create_case(request: Request) -> JSONResponse:
    payload = await _object(request)
    title = None if payload is None else payload.get("title")
    if not isinstance(title, str) or not 1 <= len(title) <= 200:
        return _invalid("title must be a string of 1-200 characters")
    slot = _slot(request)
    async with slot.conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            INSERT_CASE,
            {
                "key": slot.request.key,
                "scope": slot.request.scope,
                "token": slot.request.token,
                "title": title,
            },
        )
        row = await cur.fetchone()
    assert row is not None
    return JSONResponse(
        {"case_id": row["id"], "title": title, "created_at": row["created_at"].isoformat()},
        status_code=201,
    )


async def capture_payment(request: Request) -> JSONResponse:
    payload = await _object(request) or {}
    payment_id, amount = payload.get("payment_id"), payload.get("amount_cents")
    if not isinstance(payment_id, str) or not payment_id:
        return _invalid("payment_id must be a non-empty string")
    if type(amount) is not int or amount <= 0:
        return _invalid("amount_cents must be a positive integer")
    slot = _slot(request)
    async with slot.conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            INSERT_PAYMENT,
            {
                "key": slot.request.key,
                "scope": slot.request.scope,
                "token": slot.request.token,
                "payment_id": payment_id,
                "amount_cents": amount,
            },
        )
        row = await cur.fetchone()
    assert row is not None
    return JSONResponse(
        {
            "capture_id": row["id"],
            "payment_id": payment_id,
            "amount_cents": amount,
            "status": "captured",
            "captured_at": row["captured_at"].isoformat(),
        }
    )


async def operation_status(request: Request) -> JSONResponse:
    guard: FenceGuard = request.app.state.guard
    record = await guard.lookup(request.path_params["key"])
    if record is None:
        return JSONResponse({"error": "unknown_operation"}, status_code=404)
    return JSONResponse(
        {
            "key": record.key,
            "scope": record.scope,
            "token": record.token,
            "status": record.status,
            "response_status": record.response_status,
            "created_at": record.created_at.isoformat(),
            "completed_at": None
            if record.completed_at is None
            else record.completed_at.isoformat(),
        }
    )


def create_app(
    dsn: str,
    *,
    secret: bytes | None = None,
    insecure: bool = False,
    decision_log: Path | None = None,
) -> Starlette:
    """The service: fenced POSTs on /cases and /payments, status lookups on /operations.

    Either ``secret`` or ``insecure=True`` (FenceConfigError otherwise).
    """
    guard = FenceGuard(dsn, secret=secret, insecure=insecure)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(prepare_database, dsn)
        async with guard:
            yield

    app = Starlette(
        routes=[
            Route("/cases", create_case, methods=["POST"]),
            Route("/payments/capture", capture_payment, methods=["POST"]),
            Route("/operations/{key:path}", operation_status, methods=["GET"]),
        ],
        middleware=[
            Middleware(
                FenceMiddleware,
                guard=guard,
                required_paths=("/cases", "/payments"),
                on_decision=None if decision_log is None else DecisionLog(decision_log),
            )
        ],
        lifespan=lifespan,
    )
    app.state.guard = guard
    return app


class _AnnouncingServer(uvicorn.Server):
    """Prints the URL once the socket listens, so a parent process knows when to start."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            print(f"http://{host}:{port}", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tenure.examples.case_service")
    parser.add_argument("--dsn", required=True, help="the service's own PostgreSQL")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    trust = parser.add_mutually_exclusive_group(required=True)
    trust.add_argument(
        "--secret-env", metavar="NAME", help="environment variable holding the fence secret"
    )
    trust.add_argument(
        "--insecure",
        action="store_true",
        help="accept unsigned fences from anyone who reaches the port (a local demo only)",
    )
    args = parser.parse_args(argv)
    secret = None
    if args.secret_env:
        value = os.environ.get(args.secret_env)
        if not value:
            parser.error(f"environment variable {args.secret_env} is not set or empty")
        secret = value.encode()
    log_path = os.environ.get("RECEIVER_DECISION_LOG")
    app = create_app(
        args.dsn,
        secret=secret,
        insecure=args.insecure,
        decision_log=Path(log_path) if log_path else None,
    )
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
    _AnnouncingServer(config).run()


if __name__ == "__main__":
    main()
