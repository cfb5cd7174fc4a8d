"""Polling with a deadline (tests/support/waiting.py, on the harness's `wait_for`)."""

from __future__ import annotations

import asyncio

import pytest
from tests.support.waiting import wait_until, wait_until_async

from tenure._chaos._harness import wait_for


def test_wait_until_returns_once_the_condition_holds_and_fails_the_test_otherwise() -> None:
    calls: list[int] = []

    def third() -> bool:
        calls.append(1)
        return len(calls) >= 3

    wait_until(third, interval=0.001)
    assert len(calls) == 3
    with pytest.raises(AssertionError, match=r"never true \(waited 0\.05 s\)"):
        wait_until(lambda: False, timeout=0.05, message="never true")


def test_wait_for_raises_the_error_it_is_given() -> None:
    with pytest.raises(TimeoutError, match="the thing"):
        wait_for(lambda: False, 0.02, "the thing", interval=0.005)
    with pytest.raises(LookupError, match="the thing"):
        wait_for(lambda: False, 0.02, "the thing", interval=0.005, error=LookupError)


async def test_wait_until_async_awaits_an_async_predicate() -> None:
    calls: list[int] = []

    async def ready() -> bool:
        await asyncio.sleep(0)
        calls.append(1)
        return len(calls) >= 3

    await wait_until_async(ready, interval=0.001)
    assert len(calls) == 3  # awaited each time, not taken for a truthy coroutine


async def test_wait_until_async_fails_when_an_async_predicate_stays_false() -> None:
    async def never() -> bool:
        return False

    with pytest.raises(AssertionError, match="never"):
        await wait_until_async(never, timeout=0.05, message="never")


async def test_wait_until_async_takes_plain_predicates_too() -> None:
    calls: list[int] = []

    def second() -> bool:
        calls.append(1)
        return len(calls) >= 2

    await wait_until_async(second, interval=0.001)
    assert len(calls) == 2
