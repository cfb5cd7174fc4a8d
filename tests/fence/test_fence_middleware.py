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
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from tests.fence.helpers import count_rows, unique
from tests.support.waiting import wait_until

from tenure.fence import FenceDecision, FenceGuard, FenceMiddleware, FenceSlot, fence_headers

pytestmark = pytest.mark.storage

INSERT_EFFECT = "INSERT INTO fence_test_effects (idempotency_key, token) VALUES (%s, %s)"


class Behaviour:
    """What the test app's handler does next; flipped by the test between requests."""

    def __init__(self) -> None:
        self.mode = "ok"  # ok | fail | raise | wait
        self.inside = threading.Event()
        self.let_go = threading.Event()
        self.outside_effects: list[str] = []


def build_app(
    dsn: str, behaviour: Behaviour, decisions: list[FenceDecision], **options: Any
) -> Starlette:
    guard = FenceGuard(dsn)

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


@contextmanager
def serve(app: Starlette) -> Iterator[str]:
    """Run ``app`` under uvicorn in a thread on a free loopback port; yield its URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), message="uvicorn never started")
        assert server.started, "uvicorn exited during startup"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def harness(fence_dsn: str) -> Callable[..., Any]:
    @contextmanager
    def start(**options: Any) -> Iterator[tuple[str, Behaviour, list[FenceDecision]]]:
        behaviour, decisions = Behaviour(), list[FenceDecision]()
        with serve(build_app(fence_dsn, behaviour, decisions, **options)) as url:
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
            crashed = client.post("/effect", json={"n": 1}, headers=fenced(scope, "op"))
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
