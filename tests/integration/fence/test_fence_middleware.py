"""FenceMiddleware options and failure paths, served by a real uvicorn on loopback.

The app here is built per test so its handlers can fail on command: what the
middleware records (or refuses to record) when the app answers 5xx or raises,
which paths need a fence, and the two-phase mode with a request in flight.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from tests.integration.fence.helpers import count_rows, fence_tables, serve, unique
from tests.support.waiting import wait_until

from tenure.fence import (
    FINAL_HEADER,
    FINAL_STATUSES,
    FenceDecision,
    FenceGuard,
    FenceMiddleware,
    FenceSlot,
    fence_headers,
)

INSERT_EFFECT = "INSERT INTO fence_test_effects (idempotency_key, token) VALUES (%s, %s)"


class Behaviour:
    """What the test app's handler does next; flipped by the test between requests."""

    def __init__(self) -> None:
        self.mode = "ok"  # ok | fail | raise | answer
        self.status = 201  # mode "answer": this status, with these declarations
        self.header: str | None = None  # the X-Fence-Final header's value
        self.slot_final: bool | None = None  # what the handler sets slot.final to
        self.inside = threading.Event()
        self.let_go = threading.Event()
        self.outside_effects: list[str] = []


def build_app(
    dsn: str,
    behaviour: Behaviour,
    decisions: list[FenceDecision],
    guard_options: dict[str, Any],
    **options: Any,
) -> Starlette:
    guard = FenceGuard(dsn, **{"insecure": True, **guard_options})

    async def effect(request: Request) -> JSONResponse:
        slot: FenceSlot[Any] = request.scope["tenure.fence"]
        if slot.two_phase:  # the effect lives outside the database
            behaviour.inside.set()
            await asyncio.to_thread(behaviour.let_go.wait, 10)
            behaviour.outside_effects.append(slot.request.key)
            return JSONResponse({"sent": True}, status_code=202)
        await slot.conn.execute(INSERT_EFFECT, (slot.request.key, slot.request.token))
        if behaviour.mode == "fail":
            return JSONResponse({"error": "upstream unavailable"}, status_code=503)
        if behaviour.mode == "raise":
            raise RuntimeError("handler crashed after writing")
        if behaviour.mode == "answer":
            if behaviour.slot_final is not None:
                slot.final = behaviour.slot_final
            headers = {} if behaviour.header is None else {FINAL_HEADER: behaviour.header}
            return JSONResponse({"status": behaviour.status}, behaviour.status, headers)
        return JSONResponse({"done": True}, status_code=201)

    async def open_endpoint(request: Request) -> JSONResponse:
        return JSONResponse({"fenced": "tenure.fence" in request.scope})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with guard:
            yield

    app = Starlette(
        routes=[
            Route("/effect", effect, methods=["POST"]),
            Route("/open", open_endpoint, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.add_middleware(FenceMiddleware, guard=guard, on_decision=decisions.append, **options)
    app.state.guard = guard
    return app


@pytest.fixture
def harness(fence_dsn: str) -> Callable[..., Any]:
    @contextmanager
    def start(
        guard_options: dict[str, Any] | None = None, **options: Any
    ) -> Iterator[tuple[str, Behaviour, list[FenceDecision]]]:
        behaviour, decisions = Behaviour(), list[FenceDecision]()
        app = build_app(fence_dsn, behaviour, decisions, guard_options or {}, **options)
        with serve(app) as url:
            yield url, behaviour, decisions

    return start


def fenced(scope: str, operation: str, token: int = 1) -> dict[str, str]:
    return fence_headers(scope, token, f"{scope}:{operation}")


def test_a_5xx_answer_is_sent_but_not_recorded_so_the_retry_applies(
    harness: Callable[..., Any], fence_dsn: str
) -> None:
    scope = unique()
    key = f"{scope}:op"
    with harness(required_paths=["/effect"]) as (url, behaviour, decisions):
        with httpx.Client(base_url=url, timeout=10) as client:
            behaviour.mode = "fail"
            failed = client.post("/effect", json={"n": 1}, headers=fenced(scope, "op"))
            assert failed.status_code == 503
            assert count_rows(fence_dsn, "fence_test_effects", key) == 0  # rolled back
            behaviour.mode = "raise"
            # uvicorn closes the connection after an app that raised (once its 500 is sent):
            # on a loaded machine the close could reach the client after it reused the
            # connection for the next request, which then got a reset. Not reused, then.
            crashed = client.post(
                "/effect", json={"n": 1}, headers={**fenced(scope, "op"), "Connection": "close"}
            )
            assert crashed.status_code == 500
            assert count_rows(fence_dsn, "fence_test_effects", key) == 0
            behaviour.mode = "ok"
            applied = client.post("/effect", json={"n": 1}, headers=fenced(scope, "op"))
            replayed = client.post("/effect", json={"n": 1}, headers=fenced(scope, "op"))
    assert applied.status_code == 201 and "x-idempotent-replay" not in applied.headers
    assert replayed.status_code == 201 and replayed.headers["x-idempotent-replay"] == "true"
    assert count_rows(fence_dsn, "fence_test_effects", key) == 1
    assert [d.outcome for d in decisions] == ["aborted", "aborted", "accepted", "replayed"]
    assert decisions[1].detail == "RuntimeError"


@pytest.mark.parametrize("status", [429, 401, 408, 403, 404, 409])
def test_a_not_final_answer_is_sent_but_released_so_the_next_attempt_applies(
    harness: Callable[..., Any], fence_dsn: str, status: int
) -> None:
    """A 429 recorded under a key that every attempt repeats would be replayed forever."""
    scope = unique()
    key = f"{scope}:op"
    with harness() as (url, behaviour, decisions):
        with httpx.Client(base_url=url, timeout=10) as client:
            behaviour.mode, behaviour.status = "answer", status
            before = fence_tables(fence_dsn)
            refused = [client.post("/effect", json={}, headers=fenced(scope, "op")) for _ in "ab"]
            assert fence_tables(fence_dsn) == before  # not recorded, mark not raised
            assert count_rows(fence_dsn, "fence_test_effects", key) == 0  # rolled back
            behaviour.mode = "ok"
            applied = client.post("/effect", json={}, headers=fenced(scope, "op"))
            replayed = client.post("/effect", json={}, headers=fenced(scope, "op"))
    assert [r.status_code for r in refused] == [status, status]
    assert not any("x-idempotent-replay" in r.headers for r in refused)
    assert applied.status_code == 201 and "x-idempotent-replay" not in applied.headers
    assert replayed.headers["x-idempotent-replay"] == "true"
    assert count_rows(fence_dsn, "fence_test_effects", key) == 1
    assert [d.outcome for d in decisions] == ["released", "released", "accepted", "replayed"]
    assert decisions[0].detail == f"the app's {status} is not final; nothing recorded"


@pytest.mark.parametrize(
    ("status", "header", "slot_final", "recorded"),
    [
        (404, "true", None, True),  # the header says: this will never exist
        (404, None, True, True),  # the same through the slot in the scope
        (503, "TRUE", None, True),  # the outside effect happened, whatever upstream said
        (201, "false", None, False),  # nothing was done after all
        (200, None, False, False),
        (201, "false", False, False),  # both, agreeing
        (422, None, None, True),  # no word: the guard's statuses decide
    ],
)
def test_a_handler_declares_one_answer_final_or_not(
    harness: Callable[..., Any],
    fence_dsn: str,
    status: int,
    header: str | None,
    slot_final: bool | None,
    recorded: bool,
) -> None:
    scope = unique()
    key = f"{scope}:op"
    with harness() as (url, behaviour, decisions):
        behaviour.mode, behaviour.status = "answer", status
        behaviour.header, behaviour.slot_final = header, slot_final
        with httpx.Client(base_url=url, timeout=10) as client:
            first = client.post("/effect", json={}, headers=fenced(scope, "op"))
            behaviour.mode = "ok"
            second = client.post("/effect", json={}, headers=fenced(scope, "op"))
    assert first.status_code == status
    assert FINAL_HEADER.lower() not in first.headers  # the app's word to the middleware only
    if recorded:
        assert second.status_code == status and second.headers["x-idempotent-replay"] == "true"
        assert FINAL_HEADER.lower() not in second.headers  # nor stored
        assert [d.outcome for d in decisions] == ["accepted", "replayed"]
    else:
        assert second.status_code == 201 and "x-idempotent-replay" not in second.headers
        assert [d.outcome for d in decisions][1] == "accepted"
    assert count_rows(fence_dsn, "fence_test_effects", key) == 1


@pytest.mark.parametrize(("header", "slot_final"), [("maybe", None), ("true", False)])
def test_a_garbled_or_contradicted_declaration_is_an_app_error_and_records_nothing(
    harness: Callable[..., Any], fence_dsn: str, header: str, slot_final: bool | None
) -> None:
    scope = unique()
    with harness() as (url, behaviour, decisions):
        behaviour.mode, behaviour.status = "answer", 201
        behaviour.header, behaviour.slot_final = header, slot_final
        before = fence_tables(fence_dsn)
        with httpx.Client(base_url=url, timeout=10) as client:
            response = client.post("/effect", json={}, headers=fenced(scope, "op"))
    assert response.status_code == 500
    assert fence_tables(fence_dsn) == before
    assert count_rows(fence_dsn, "fence_test_effects", f"{scope}:op") == 0
    assert [(d.outcome, d.detail) for d in decisions] == [("aborted", "RuntimeError")]


def test_a_guard_option_makes_more_answers_final(
    harness: Callable[..., Any], fence_dsn: str
) -> None:
    scope = unique()
    with harness(guard_options={"final_statuses": FINAL_STATUSES | {404}}) as (url, b, decisions):
        b.mode, b.status = "answer", 404
        with httpx.Client(base_url=url, timeout=10) as client:
            first = client.post("/effect", json={}, headers=fenced(scope, "op"))
            again = client.post("/effect", json={}, headers=fenced(scope, "op"))
    assert first.status_code == again.status_code == 404
    assert again.headers["x-idempotent-replay"] == "true"
    assert [d.outcome for d in decisions] == ["accepted", "replayed"]


def test_only_required_paths_demand_a_fence_but_any_fence_is_checked(
    harness: Callable[..., Any],
) -> None:
    scope = unique()
    with harness(required_paths=["/effect"]) as (url, _, decisions):
        with httpx.Client(base_url=url, timeout=10) as client:
            bare = client.post("/open", json={})
            with_fence = client.post("/open", json={}, headers=fenced(scope, "open", token=5))
            stale = client.post("/open", json={}, headers=fenced(scope, "open2", token=4))
            required = client.post("/effect", json={})
    assert bare.json() == {"fenced": False}
    assert with_fence.json() == {"fenced": True}
    assert stale.status_code == 409 and stale.json()["highest"] == 5
    assert required.status_code == 428
    assert [d.outcome for d in decisions] == ["accepted", "stale", "missing"]


def test_oversized_bodies_are_refused_before_the_guard(harness: Callable[..., Any]) -> None:
    scope = unique()
    with harness(max_body_bytes=16) as (url, _, decisions):
        with httpx.Client(base_url=url, timeout=10) as client:
            response = client.post("/effect", content=b"x" * 17, headers=fenced(scope, "op"))
    assert response.status_code == 413
    assert [d.outcome for d in decisions] == ["too_large"]


def test_two_phase_middleware_answers_in_progress_while_the_effect_is_in_flight(
    harness: Callable[..., Any],
) -> None:
    scope = unique()
    with harness(two_phase=True) as (url, behaviour, decisions):
        with httpx.Client(base_url=url, timeout=10) as client:
            first: dict[str, httpx.Response] = {}
            sender = threading.Thread(
                target=lambda: first.setdefault(
                    "response", client.post("/effect", json={}, headers=fenced(scope, "mail"))
                )
            )
            sender.start()
            wait_until(behaviour.inside.is_set, message="the first request never reached the app")
            duplicate = client.post("/effect", json={}, headers=fenced(scope, "mail"))
            behaviour.let_go.set()
            sender.join(timeout=10)
            replay = client.post("/effect", json={}, headers=fenced(scope, "mail"))
    assert duplicate.status_code == 409 and duplicate.json()["error"] == "in_progress"
    assert first["response"].status_code == 202
    assert replay.status_code == 202 and replay.headers["x-idempotent-replay"] == "true"
    assert behaviour.outside_effects == [f"{scope}:mail"]
    assert sorted(d.outcome for d in decisions) == ["accepted", "in_progress", "replayed"]
