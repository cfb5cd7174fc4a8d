"""Interceptors: a chain around enqueue, claim, call and commit, configured on the App (and a
fenced request's sender), the first outermost, each calling ``proceed`` once; the process's
own (tenure.otel's tracer) end every chain."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import httpx
import pytest
from tests.support.waiting import wait_until_async

from tenure import App, Context
from tenure import _intercept as intercept
from tenure._job import Enqueued, Job
from tenure._store import ClaimedJob, Finish, NewJob
from tenure.fence import FencedAuth
from tenure.telemetry import Interceptor

R = TypeVar("R")


class Recording(Interceptor):
    """Says when each step begins and ends, and what it saw."""

    def __init__(self, name: str, seen: list[str]) -> None:
        self.name = name
        self.seen = seen

    async def enqueue(self, job: NewJob, proceed: Callable[[NewJob], Awaitable[Job]]) -> Job:
        self.seen.append(f"{self.name} enqueue {job.tool}")
        found = await proceed(job)
        self.seen.append(f"{self.name} enqueued {found.created}")
        return found

    async def enqueue_many(
        self,
        jobs: Sequence[NewJob],
        carrier: dict[str, str] | None,
        proceed: Callable[[Sequence[NewJob], dict[str, str] | None], Awaitable[list[Enqueued]]],
    ) -> list[Enqueued]:
        self.seen.append(f"{self.name} enqueue_many {len(jobs)}")
        return await proceed(jobs, carrier)

    def claimed(self, job: ClaimedJob, worker: str) -> None:
        self.seen.append(f"{self.name} claimed {job.tool}")

    async def call(self, job: ClaimedJob, worker: str, proceed: Callable[[], Awaitable[R]]) -> R:
        self.seen.append(f"{self.name} call")
        outcome = await proceed()
        self.seen.append(f"{self.name} called {getattr(outcome, 'state', 'abandoned')}")
        return outcome

    async def commit(
        self, job: ClaimedJob, worker: str, finish: Finish, proceed: Callable[[], Awaitable[bool]]
    ) -> bool:
        self.seen.append(f"{self.name} commit {finish.state}")
        accepted = await proceed()
        self.seen.append(f"{self.name} committed {accepted}")
        return accepted

    def outgoing_headers(self) -> dict[str, str]:
        return {f"x-{self.name}": "1"}


async def test_an_apps_chain_wraps_its_enqueues_and_its_workers_claims_calls_and_commits(
    tenure_dsn: str,
) -> None:
    seen: list[str] = []
    app = App(tenure_dsn, interceptors=[Recording("outer", seen), Recording("inner", seen)])

    @app.tool(lease=30, heartbeat=5, jitter=1)
    async def double(ctx: Context, n: int) -> int:
        seen.append("tool")
        return 2 * n

    worker = app.worker(poll_interval=0.05)
    task = asyncio.create_task(worker.run(handle_signals=False))
    try:
        job = await app.enqueue("double", {"n": 4})
        assert await app.wait(job.id, timeout=20) == 8
        # The waiter hears of the commit as the chain returns from it.
        await wait_until_async(lambda: "outer committed True" in seen, timeout=20)
        many = await app.enqueue_many("double", [{"n": 1}, {"n": 2}])
        assert [await app.wait(e.id, timeout=20) for e in many] == [2, 4]
    finally:
        worker.stop()
        await task
        await app.aclose()
    first = seen[: seen.index("inner committed True") + 2]
    assert first == [
        "outer enqueue double", "inner enqueue double",
        "inner enqueued True", "outer enqueued True",
        "outer claimed double", "inner claimed double",
        "outer call", "inner call", "tool", "inner called succeeded", "outer called succeeded",
        "outer commit succeeded", "inner commit succeeded",
        "inner committed True", "outer committed True",
    ]  # fmt: skip
    assert "outer enqueue_many 2" in seen and "inner enqueue_many 2" in seen


def links(owner: intercept.Interceptors) -> tuple[Interceptor, ...]:
    chain = owner.chain()
    return () if chain is None else chain.interceptors


async def test_the_process_interceptors_end_every_chain_until_removed(tenure_dsn: str) -> None:
    own = Recording("own", [])
    tail = Recording("tail", [])
    chain = intercept.Interceptors([own])
    before = intercept.process_interceptors()  # a worker's metrics may have added theirs
    assert links(chain) == (own, *before)
    intercept.add_process(tail)
    try:
        assert links(chain) == (own, *before, tail)
        assert chain.chain() is chain.chain()  # rebuilt only when the process's change
        assert links(intercept.Interceptors()) == (*before, tail)
    finally:
        intercept.remove_process(tail)
    assert links(chain) == (own, *before)
    if not before:
        assert intercept.Interceptors().chain() is None  # no chain: callers skip it
    with pytest.raises(TypeError, match="must subclass Interceptor"):
        App(tenure_dsn, interceptors=[object()])  # type: ignore[list-item]


class Source:
    """A FenceSource that is not a tenure Context."""

    def fence_headers(self, operation: str, **request: Any) -> dict[str, str]:
        return {"Idempotency-Key": f"k:{operation}", "X-Execution-Fence": "7", "X-Fence-Scope": "k"}

    def ensure_owned(self) -> None:
        return None


def test_a_senders_interceptors_add_their_headers_and_the_fence_wins() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    auth = FencedAuth(Source(), "op", interceptors=[Recording("audit", [])])
    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        client.post("http://receiver/cases", headers={"x-audit": "mine"}, auth=auth)
    assert seen[0].headers["x-audit"] == "mine"  # the request's own header is kept
    assert seen[0].headers["x-execution-fence"] == "7"
    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        client.post("http://receiver/cases", auth=auth)
    assert seen[1].headers["x-audit"] == "1"
