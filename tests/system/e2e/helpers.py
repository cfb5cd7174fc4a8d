"""What the end-to-end tests read and write: worker environments, notes, commands, evidence.

Evidence comes from four places, so that no assertion rests on a worker's word
alone: tenure's tables (the job row and its journal), the receiver's tables (the
effects), the receiver's decision log (every request's fate and arrival time
on CLOCK_MONOTONIC), and the workers' own log lines (each confirmed lease with
its conservative deadline on the same clock).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from tests.apps.fence_app import commands_path, notes_path
from tests.integration.fence.helpers import Receiver
from tests.support.waiting import wait_until
from tests.support.workers import WorkerProcess

from tenure._chaos._proxy import FaultProxy

TERMINAL = ("succeeded", "failed", "cancelled")
WAIT = 20.0  # generous: a reclaim needs a lease (1.5 s) plus a poll


def worker_env(
    *,
    scripted: bool = False,
    debug: bool = False,
    timeout: float | None = None,
    signing_key: bytes | None = None,
) -> dict[str, str]:
    """The environment that tells one worker of fence_app how to behave (see its docstring)."""
    env: dict[str, str] = {}
    if scripted:
        env["FENCE_APP_SCRIPTED"] = "1"
    if debug:
        env["FENCE_APP_LOG_LEVEL"] = "DEBUG"
    if timeout is not None:
        env["FENCE_APP_TIMEOUT"] = str(timeout)
    if signing_key is not None:
        env["TENURE_SIGNING_KEY"] = signing_key.decode()
    return env


def pg_proxy(dsn: str) -> FaultProxy:
    """A FaultProxy in front of the PostgreSQL server ``dsn`` names (TCP or Unix socket)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        host, port = conn.info.host, conn.info.port
    if not host or host.startswith("/"):
        return FaultProxy.unix(f"{host}/.s.PGSQL.{port}")
    return FaultProxy(host, port)


# -- a scripted tool's notes and commands -----------------------------------------------


def notes(workdir: Path, worker: str) -> list[dict[str, Any]]:
    path = notes_path(workdir, worker)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def wait_notes(
    workdir: Path, worker: str, count: int, timeout: float = WAIT
) -> list[dict[str, Any]]:
    """Wait until the tool on ``worker`` has noted ``count`` steps; return all of them."""
    wait_until(
        lambda: len(notes(workdir, worker)) >= count,
        timeout=timeout,
        interval=0.02,
        message=f"{worker} noted fewer than {count} steps: {notes(workdir, worker)}",
    )
    return notes(workdir, worker)


def command(workdir: Path, worker: str, *commands: str) -> None:
    """Tell a scripted tool what to do next (it runs commands in order)."""
    with commands_path(workdir, worker).open("a", encoding="utf-8") as f:
        f.write("".join(c + "\n" for c in commands))


# -- the receiver ------------------------------------------------------------------------


def decided(receiver: Receiver, key: str) -> list[tuple[str, int]]:
    """(decision, token) of every request with ``key``, in the order they were decided."""
    return [(d["decision"], d["token"]) for d in receiver.decisions(key)]


def wait_decision(
    receiver: Receiver, key: str, decision: str, token: int, timeout: float = WAIT
) -> dict[str, Any]:
    """Wait for the receiver to log ``decision`` for ``key`` under ``token``; return the entry."""

    def found() -> list[dict[str, Any]]:
        return [
            d for d in receiver.decisions(key) if d["decision"] == decision and d["token"] == token
        ]

    wait_until(
        found,
        timeout=timeout,
        interval=0.02,
        message=f"no {decision} of {key} with token {token}; log: {decided(receiver, key)}",
    )
    return found()[0]


def effects(receiver_dsn: str) -> list[dict[str, Any]]:
    """Every case the receiver created — the side effect that must happen exactly once."""
    with psycopg.connect(receiver_dsn, row_factory=dict_row) as conn:
        return conn.execute(
            "SELECT id, idempotency_key, scope, token, title FROM example_cases ORDER BY id"
        ).fetchall()


def highest_token(receiver_dsn: str, scope: str) -> int | None:
    """The receiver's high-water mark for ``scope``, read from its own table."""
    with psycopg.connect(receiver_dsn) as conn:
        row = conn.execute(
            "SELECT highest_token FROM tenure_fence_scopes WHERE scope = %s", (scope,)
        ).fetchone()
    return None if row is None else int(row[0])


# -- tenure's side -----------------------------------------------------------------------


def confirmations(worker: WorkerProcess, job_id: int) -> list[tuple[float, float]]:
    """(sent_at, deadline) of every lease confirmation ``worker`` logged for ``job_id``.

    Both are on CLOCK_MONOTONIC: ``deadline_monotonic`` is the worker's
    conservative deadline and ``deadline_monotonic - lease_remaining`` the
    moment the confirming statement (claim or heartbeat) was sent. Heartbeats
    are logged only at DEBUG.
    """
    found = []
    for kind in ("job_claimed", "heartbeat_ok"):
        for event in worker.events(kind, job=job_id):
            deadline = float(event["deadline_monotonic"])
            found.append((deadline - float(event["lease_remaining"]), deadline))
    return sorted(found)


def last_deadline(worker: WorkerProcess, job_id: int) -> float:
    """The latest moment ``worker`` ever believed it owned ``job_id``."""
    found = confirmations(worker, job_id)
    assert found, f"{worker.name} logged no confirmation for job {job_id}:\n{worker.log()}"
    return max(deadline for _, deadline in found)
