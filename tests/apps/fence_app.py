"""Tools for the end-to-end tests: fenced HTTP side effects at the example case service.

Worker processes load ``tests.apps.fence_app:app`` (which reads ``TENURE_DSN``);
a test builds its producer with ``build_app(dsn)``. Leases are short so that a
stale owner appears within seconds, and every policy keeps ``L > R·H + J``
(1.5 > 2·0.3 + 0.5).

Where a worker sends its requests is in the payload, by worker name
(``receivers={"w1": <a FaultProxy in front of the receiver>, "*": <the
receiver>}``), so workers can start before the receiver does. The receiver
fingerprints method, path and body only, so two owners going through different
addresses still send it the same request. What else differs between two
workers running the *same* job comes from their environment:

``FENCE_APP_TIMEOUT``
    The HTTP client's timeout in seconds (default 10).
``FENCE_APP_SCRIPTED``
    ``1``: after its first request, ``create_case`` obeys commands from the
    test instead of returning (see below) — the stale owner whose every move
    the test decides.
``FENCE_APP_LOG_LEVEL``
    ``DEBUG`` makes tenure log each confirmed heartbeat (``event=heartbeat_ok
    ... deadline_monotonic=...``). The worker command's ``--log-level`` is a
    global option that the shared worker helper cannot pass, so the app sets
    the level of tenure's loggers when it is imported.

Every step a tool takes is appended as one JSON line to ``{workdir}/{worker}.jsonl``
(one ``write`` on a file opened for appending): ``step``, ``token``, ``at``
(``time.monotonic()`` just before the step), and the HTTP ``status``,
``replayed`` flag, response ``body`` or the ``error`` class name. Commands for
a scripted worker are lines of ``{workdir}/{worker}.commands``:

``post``
    Repeat the request through ``ctx.http_auth`` — what an honest tool does
    after a timeout (same key; the ownership check runs first).
``raw``
    Repeat it with ``ctx.fence_headers`` only, skipping the ownership check —
    a stale owner that does not look, stopped by nothing but the receiver.
``return``
    Return the last response as the result (the worker then tries to commit).

The scripted tool deliberately ignores ``ctx.cancelled``: it plays the owner
that wakes up late and carries on, which is exactly what fencing must survive.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import httpx

from tenure import App, Context, OwnershipError, PermanentError, RetryableError

LEASE = 1.5
HEARTBEAT = 0.3
JITTER = 0.5  # also the safety margin: ensure_owned() wants this much lease left
MARGIN = JITTER
TIME_LIMIT = 60.0
POLL = 0.02
COMMAND_WAIT = 60.0  # a scripted tool gives up on a silent test after this long
OPERATION = "create_case"

_level = os.environ.get("FENCE_APP_LOG_LEVEL")
if _level:
    logging.getLogger("tenure").setLevel(_level)


def case_key(job_id: int) -> str:
    """The idempotency key ``create_case`` sends for job ``job_id`` (ctx.idempotency_key)."""
    return f"tool-job:{job_id}:{OPERATION}"


def notes_path(directory: str | Path, worker: str) -> Path:
    return Path(directory) / f"{worker}.jsonl"


def commands_path(directory: str | Path, worker: str) -> Path:
    return Path(directory) / f"{worker}.commands"


def _note(directory: str, ctx: Context, step: str, **fields: Any) -> dict[str, Any]:
    record = {"step": step, "token": ctx.token, **fields}
    with open(notes_path(directory, ctx.worker), "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    return record


def _receiver_url(ctx: Context, receivers: dict[str, str]) -> str:
    """This worker's address of the receiver: its own entry, else ``"*"``."""
    return receivers.get(ctx.worker, receivers["*"]).rstrip("/")


def _timeout() -> float:
    return float(os.environ.get("FENCE_APP_TIMEOUT", "10"))


def _post(
    ctx: Context,
    url: str,
    body: dict[str, Any],
    operation: str,
    *,
    checked: bool,
    client: httpx.Client | None = None,
) -> dict[str, Any]:
    """One POST with the fence; the outcome as a dict, never an exception.

    ``checked``: through ``ctx.http_auth`` (ensure_owned() right before the
    send); otherwise with the bare headers. Without a ``client``, a fresh
    connection is opened for this one request.
    """
    at = time.monotonic()
    try:
        with contextlib.ExitStack() as stack:
            if client is None:
                client = stack.enter_context(httpx.Client(timeout=_timeout()))
            if checked:
                response = client.post(url, json=body, auth=ctx.http_auth(operation))
            else:  # the bare headers, signed (if keyed) over this very request
                request = client.build_request("POST", url, json=body)
                request.headers.update(
                    ctx.fence_headers(
                        operation, method="POST", path=str(request.url), body=request.content
                    )
                )
                response = client.send(request)
    except OwnershipError as exc:
        return {"at": at, "error": type(exc).__name__, "detail": str(exc)}
    except httpx.TimeoutException as exc:  # outcome unknown: it may have been applied
        return {"at": at, "error": "timeout", "detail": type(exc).__name__}
    except httpx.TransportError as exc:
        return {"at": at, "error": "transport", "detail": type(exc).__name__}
    try:
        payload = response.json()
    except ValueError:
        payload = None
    return {
        "at": at,
        "status": response.status_code,
        "replayed": response.headers.get("x-idempotent-replay") == "true",
        "body": payload,
    }


def _result(ctx: Context, outcome: dict[str, Any]) -> dict[str, Any]:
    status = outcome.get("status")
    if status != 201:
        raise PermanentError(f"the receiver did not create the case: {outcome}")
    return {
        "worker": ctx.worker,
        "token": ctx.token,
        "status": status,
        "replayed": outcome["replayed"],
        "case_id": outcome["body"]["case_id"],
    }


def _commands(directory: str, ctx: Context) -> Any:
    """Yield the test's commands for this worker, in order, as they are written."""
    path = commands_path(directory, ctx.worker)
    done = 0
    give_up = time.monotonic() + COMMAND_WAIT
    while time.monotonic() < give_up:
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        if len(lines) > done:
            for command in lines[done:]:
                done += 1
                yield command.strip()
            give_up = time.monotonic() + COMMAND_WAIT
            continue
        time.sleep(POLL)
    raise TimeoutError(f"no command for {ctx.worker} in {COMMAND_WAIT:g} s")


def build_app(dsn: str | None = None) -> App:
    """An App with the end-to-end tools (``dsn`` None: ``TENURE_DSN``)."""
    app = App(dsn)
    tool = functools.partial(
        app.tool,
        lease=LEASE,
        heartbeat=HEARTBEAT,
        jitter=JITTER,
        missed_beats=2,
        backoff=0.05,
        max_backoff=1.0,
        time_limit=TIME_LIMIT,
        max_attempts=3,
    )

    @tool()
    def create_case(
        ctx: Context, workdir: str, title: str, receivers: dict[str, str]
    ) -> dict[str, Any]:
        """POST /cases once (fenced, key ``tool-job:{job}:create_case``), then return —
        or, on a scripted worker, obey the test's commands."""
        url = _receiver_url(ctx, receivers) + "/cases"
        body = {"title": title}  # no token in the body: both owners send the same request
        outcome = _note(workdir, ctx, "post", **_post(ctx, url, body, OPERATION, checked=True))
        if os.environ.get("FENCE_APP_SCRIPTED") != "1":
            return _result(ctx, outcome)
        for command in _commands(workdir, ctx):
            if command in ("post", "raw"):
                sent = _post(ctx, url, body, OPERATION, checked=command == "post")
                outcome = _note(workdir, ctx, command, **sent)
            elif command == "return":
                _note(workdir, ctx, "return", at=time.monotonic())
                return _result(ctx, outcome)
            else:
                raise ValueError(f"unknown command {command!r}")
        raise AssertionError("unreachable")

    @tool()
    def keep_sending(
        ctx: Context,
        workdir: str,
        receivers: dict[str, str],
        period: float = 0.05,
        seconds: float = 30.0,
    ) -> dict[str, Any]:
        """Every ``period`` seconds, POST a new case through ``ctx.http_auth`` — whatever
        the lease says — until ``{workdir}/stop`` exists or ``seconds`` pass (then it
        notes ``stopped``).

        Each request is a new effect (operation ``tick-N``), so every one that
        ensure_owned() lets through is a request the receiver sees. One kept-alive
        connection carries them all, so little but the write itself lies between
        the ownership check and the arrival.
        """
        stop = Path(workdir) / "stop"
        url = _receiver_url(ctx, receivers) + "/cases"
        sent = 0
        end = time.monotonic() + seconds
        n = 0
        with httpx.Client(timeout=_timeout()) as client:
            while time.monotonic() < end and not stop.exists():
                n += 1
                title = {"title": f"tick {n}"}
                outcome = _post(ctx, url, title, f"tick-{n}", checked=True, client=client)
                _note(workdir, ctx, f"tick-{n}", **outcome)
                sent += outcome.get("status") is not None
                time.sleep(period)
        _note(workdir, ctx, "stopped", at=time.monotonic())
        return {"worker": ctx.worker, "token": ctx.token, "sent": sent, "tried": n}

    @tool()
    def watch_cancelled(ctx: Context, workdir: str, seconds: float = 30.0) -> dict[str, Any]:
        """A well-behaved threaded computation: no side effects, it only polls ctx.cancelled
        and notes the moment it sees True."""
        _note(workdir, ctx, "started", at=time.monotonic())
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if ctx.cancelled:
                _note(workdir, ctx, "cancelled", at=time.monotonic())
                raise RetryableError("stopped because ctx.cancelled was set")
            time.sleep(POLL)
        return {"worker": ctx.worker, "token": ctx.token}

    @tool()
    async def await_cancel(ctx: Context, workdir: str, seconds: float = 30.0) -> dict[str, Any]:
        """A well-behaved async computation: it awaits, and notes when the worker cancels it."""
        _note(workdir, ctx, "started", at=time.monotonic())
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            _note(workdir, ctx, "cancelled", at=time.monotonic())
            raise
        return {"worker": ctx.worker, "token": ctx.token}

    return app


app = build_app()
