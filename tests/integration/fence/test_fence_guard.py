"""FenceGuard and SyncFenceGuard against a real PostgreSQL: the decisions and their races.

Concurrency tests never sleep: the first request holds its slot open until
PostgreSQL itself reports the other requests waiting on its lock, which is
the exact interleaving the guard must survive.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from tests.integration.fence.helpers import count_rows, unique
from tests.support.waiting import wait_until, wait_until_async

from tenure._errors import ConfigError, StaleFence
from tenure.fence import (
    FINAL_STATUSES,
    BadSignature,
    FenceConfigError,
    FenceGuard,
    FingerprintMismatch,
    MalformedFence,
    RequestDigest,
    RequestInProgress,
    StoredResponse,
    SyncFenceGuard,
    _core,
    migrate_fence,
    sign_fence,
)
from tenure.fence._schema import QUERIES
from tenure.fence._signing import MAX_TOKEN, sign_fence_v1

SECRET = b"guard-test-secret"
INSERT_EFFECT = "INSERT INTO fence_test_effects (idempotency_key, token) VALUES (%s, %s)"
DUPLICATES = 20


@pytest.fixture
async def guard(fence_dsn: str) -> AsyncIterator[FenceGuard]:
    async with FenceGuard(fence_dsn, insecure=True, max_connections=DUPLICATES + 5) as opened:
        yield opened


@pytest.fixture
def sync_guard(fence_dsn: str) -> Iterator[SyncFenceGuard]:
    with SyncFenceGuard(fence_dsn, insecure=True, max_connections=DUPLICATES + 5) as opened:
        yield opened


@pytest.fixture
def lock_waiters(fence_dsn: str) -> Iterator[psycopg.Connection[tuple[int]]]:
    """A watcher connection: how many backends of this database wait on a lock right now."""
    with psycopg.connect(fence_dsn, autocommit=True) as conn:
        yield conn


def waiting_on_locks(conn: psycopg.Connection[tuple[int]]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchone()
    assert row is not None
    return int(row[0])


async def apply(
    guard: FenceGuard, scope: str, token: int, key: str, fingerprint: str = "fp"
) -> StoredResponse | None:
    """One request whose effect is a row in fence_test_effects; returns the replay, if any."""
    async with guard.fenced(scope=scope, token=token, key=key, fingerprint=fingerprint) as slot:
        if slot.replay is not None:
            return slot.replay
        await slot.conn.execute(INSERT_EFFECT, (key, token))
        slot.complete(201, f"made by {token}".encode(), [("content-type", "text/plain")])
    return None


def apply_sync(
    guard: SyncFenceGuard, scope: str, token: int, key: str, fingerprint: str = "fp"
) -> StoredResponse | None:
    with guard.fenced(scope=scope, token=token, key=key, fingerprint=fingerprint) as slot:
        if slot.replay is not None:
            return slot.replay
        slot.conn.execute(INSERT_EFFECT, (key, token))
        slot.complete(201, f"made by {token}".encode(), [("content-type", "text/plain")])
    return None


async def test_a_stale_token_is_refused_and_changes_nothing(
    guard: FenceGuard, fence_dsn: str
) -> None:
    scope = unique()
    assert await apply(guard, scope, 10, f"{scope}:a") is None

    with pytest.raises(StaleFence) as refused:
        await apply(guard, scope, 9, f"{scope}:b")
    assert (refused.value.scope, refused.value.token, refused.value.highest) == (scope, 9, 10)
    assert await guard.lookup(f"{scope}:b") is None
    assert count_rows(fence_dsn, "fence_test_effects", f"{scope}:b") == 0
    assert await guard.highest_token(scope) == 10

    with pytest.raises(StaleFence):  # a stale owner does not even get the replay
        await apply(guard, scope, 9, f"{scope}:a")


async def test_an_equal_token_is_the_same_owner_and_a_higher_one_raises_the_mark(
    guard: FenceGuard,
) -> None:
    scope = unique()
    assert await apply(guard, scope, 10, f"{scope}:a") is None
    assert await apply(guard, scope, 10, f"{scope}:b") is None  # same owner, next operation
    assert await guard.highest_token(scope) == 10
    assert await apply(guard, scope, 11, f"{scope}:c") is None  # a new owner took over
    assert await guard.highest_token(scope) == 11
    with pytest.raises(StaleFence):
        await apply(guard, scope, 10, f"{scope}:d")


async def test_a_repeated_request_replays_the_stored_response(
    guard: FenceGuard, fence_dsn: str
) -> None:
    scope = unique()
    key = f"{scope}:create_case"
    assert await apply(guard, scope, 5, key) is None
    # the next owner repeats the request after its predecessor's outcome was unknown
    replay = await apply(guard, scope, 6, key)
    assert replay == StoredResponse(201, b"made by 5", (("content-type", "text/plain"),))
    assert count_rows(fence_dsn, "fence_test_effects", key) == 1
    record = await guard.lookup(key)
    assert record is not None
    assert (record.status, record.token, record.response_status) == ("completed", 5, 201)
    assert await guard.highest_token(scope) == 6


async def test_a_key_reused_for_another_request_is_a_mismatch(
    guard: FenceGuard, fence_dsn: str
) -> None:
    scope = unique()
    key = f"{scope}:capture"
    await apply(guard, scope, 5, key, fingerprint="amount=10")
    with pytest.raises(FingerprintMismatch):
        await apply(guard, scope, 5, key, fingerprint="amount=99")
    with pytest.raises(FingerprintMismatch):  # the same key sent under another scope
        await apply(guard, unique(), 5, key, fingerprint="amount=10")
    assert count_rows(fence_dsn, "fence_test_effects", key) == 1
    assert await apply(guard, scope, 5, key, fingerprint="amount=10") is not None


async def test_an_effect_that_raises_leaves_no_trace(guard: FenceGuard, fence_dsn: str) -> None:
    scope = unique()
    key = f"{scope}:op"
    with pytest.raises(ZeroDivisionError):
        async with guard.fenced(scope=scope, token=3, key=key, fingerprint="fp") as slot:
            await slot.conn.execute(INSERT_EFFECT, (key, 3))
            _ = 1 / 0
    assert await guard.lookup(key) is None
    assert await guard.highest_token(scope) is None
    assert count_rows(fence_dsn, "fence_test_effects", key) == 0
    assert await apply(guard, scope, 3, key) is None  # the retry applies it
    assert count_rows(fence_dsn, "fence_test_effects", key) == 1


async def test_release_in_single_phase_rolls_the_effect_back(
    guard: FenceGuard, fence_dsn: str
) -> None:
    scope = unique()
    key = f"{scope}:op"
    async with guard.fenced(scope=scope, token=3, key=key, fingerprint="fp") as slot:
        await slot.conn.execute(INSERT_EFFECT, (key, 3))
        slot.release()
    assert await guard.lookup(key) is None
    assert count_rows(fence_dsn, "fence_test_effects", key) == 0


async def test_a_block_that_forgets_to_complete_is_a_bug_and_records_nothing(
    guard: FenceGuard,
) -> None:
    scope = unique()
    with pytest.raises(RuntimeError, match="without complete"):
        async with guard.fenced(scope=scope, token=3, key=f"{scope}:op", fingerprint="fp"):
            pass
    assert await guard.lookup(f"{scope}:op") is None


async def test_concurrent_duplicates_apply_once(
    guard: FenceGuard, fence_dsn: str, lock_waiters: psycopg.Connection[tuple[int]]
) -> None:
    scope = unique()
    key = f"{scope}:create_case"
    first_inside = asyncio.Event()
    let_go = asyncio.Event()

    async def attempt() -> str:
        async with guard.fenced(scope=scope, token=7, key=key, fingerprint="fp") as slot:
            if slot.replay is not None:
                assert slot.replay.body == b"the only one"
                return "replayed"
            await slot.conn.execute(INSERT_EFFECT, (key, 7))
            first_inside.set()
            await let_go.wait()
            slot.complete(201, b"the only one")
        return "applied"

    tasks = [asyncio.create_task(attempt()) for _ in range(DUPLICATES)]
    await asyncio.wait_for(first_inside.wait(), timeout=10)
    await wait_until_async(
        lambda: waiting_on_locks(lock_waiters) >= DUPLICATES - 1,
        message="the duplicates never queued behind the first request's lock",
    )
    let_go.set()
    outcomes = await asyncio.gather(*tasks)
    assert sorted(outcomes) == ["applied"] + ["replayed"] * (DUPLICATES - 1)
    assert count_rows(fence_dsn, "fence_test_effects", key) == 1


def test_concurrent_duplicates_apply_once_with_threads(
    sync_guard: SyncFenceGuard, fence_dsn: str, lock_waiters: psycopg.Connection[tuple[int]]
) -> None:
    scope = unique()
    key = f"{scope}:create_case"
    first_inside = threading.Event()
    let_go = threading.Event()

    def attempt() -> str:
        with sync_guard.fenced(scope=scope, token=7, key=key, fingerprint="fp") as slot:
            if slot.replay is not None:
                return "replayed"
            slot.conn.execute(INSERT_EFFECT, (key, 7))
            first_inside.set()
            let_go.wait(timeout=30)
            slot.complete(201, b"the only one")
        return "applied"

    with ThreadPoolExecutor(DUPLICATES) as pool:
        futures = [pool.submit(attempt) for _ in range(DUPLICATES)]
        wait_until(first_inside.is_set, message="no request got in")
        wait_until(
            lambda: waiting_on_locks(lock_waiters) >= DUPLICATES - 1,
            message="the duplicates never queued behind the first request's lock",
        )
        let_go.set()
        outcomes = [future.result(timeout=30) for future in futures]
    assert sorted(outcomes) == ["applied"] + ["replayed"] * (DUPLICATES - 1)
    assert count_rows(fence_dsn, "fence_test_effects", key) == 1


async def test_two_phase_duplicates_see_in_progress_then_the_replay(guard: FenceGuard) -> None:
    scope = unique()
    key = f"{scope}:send_mail"
    sent: list[int] = []  # the "outside world"
    first_inside = asyncio.Event()
    let_go = asyncio.Event()

    async def first() -> None:
        async with guard.fenced(
            scope=scope, token=4, key=key, fingerprint="fp", two_phase=True
        ) as slot:
            assert slot.replay is None
            first_inside.set()
            await let_go.wait()
            sent.append(4)
            slot.complete(202, b"queued")

    async def duplicate() -> None:
        async with guard.fenced(scope=scope, token=4, key=key, fingerprint="fp", two_phase=True):
            sent.append(-1)  # must never run

    leader = asyncio.create_task(first())
    await asyncio.wait_for(first_inside.wait(), timeout=10)
    outcomes = await asyncio.gather(
        *(duplicate() for _ in range(DUPLICATES - 1)), return_exceptions=True
    )
    assert all(isinstance(outcome, RequestInProgress) for outcome in outcomes), outcomes
    let_go.set()
    await leader
    async with guard.fenced(
        scope=scope, token=4, key=key, fingerprint="fp", two_phase=True
    ) as slot:
        assert slot.replay == StoredResponse(202, b"queued", ())
    assert sent == [4]


async def test_two_phase_failure_keeps_the_key_in_progress_for_every_later_owner(
    guard: FenceGuard,
) -> None:
    scope = unique()
    key = f"{scope}:charge_card"
    with pytest.raises(TimeoutError):  # the provider did not answer: charged or not?
        async with guard.fenced(scope=scope, token=4, key=key, fingerprint="fp", two_phase=True):
            raise TimeoutError
    record = await guard.lookup(key)
    assert record is not None
    assert (record.status, record.token) == ("in_progress", 4)
    for token in (4, 5):  # neither a retry nor a newer owner may charge a second time
        with pytest.raises(RequestInProgress):
            async with guard.fenced(
                scope=scope, token=token, key=key, fingerprint="fp", two_phase=True
            ):
                pass


async def test_two_phase_release_frees_the_key_for_a_retry(guard: FenceGuard) -> None:
    scope = unique()
    key = f"{scope}:charge_card"
    async with guard.fenced(scope=scope, token=4, key=key, fingerprint="fp", two_phase=True) as s:
        s.release()  # the provider refused before charging: nothing happened
    assert await guard.lookup(key) is None
    async with guard.fenced(scope=scope, token=4, key=key, fingerprint="fp", two_phase=True) as s:
        assert s.replay is None
        s.complete(200, b"charged")
    record = await guard.lookup(key)
    assert record is not None and record.status == "completed"


async def test_a_duplicate_waiting_past_the_lock_timeout_gets_in_progress(
    fence_dsn: str, guard: FenceGuard
) -> None:
    scope = unique()
    key = f"{scope}:op"
    first_inside = asyncio.Event()
    let_go = asyncio.Event()

    async def slow_first() -> None:
        async with guard.fenced(scope=scope, token=2, key=key, fingerprint="fp") as slot:
            first_inside.set()
            await let_go.wait()
            slot.complete(201, b"done")

    leader = asyncio.create_task(slow_first())
    await asyncio.wait_for(first_inside.wait(), timeout=10)
    async with FenceGuard(fence_dsn, insecure=True, lock_timeout=0.2) as impatient:
        with pytest.raises(RequestInProgress):
            await apply(impatient, scope, 2, key)
        let_go.set()
        await leader
        assert await apply(impatient, scope, 2, key) == StoredResponse(201, b"done", ())


def signed(token: int, key: str, scope: str, secret: bytes = SECRET) -> str:
    """A v2 signature over the request every signed test here sends."""
    return sign_fence(secret, scope, token, key, method="POST", path="/cases", body=b"{}")


SENT = RequestDigest.from_url("POST", "/cases", b"{}")


def honestly(guard: FenceGuard, scope: str, key: str, token: int = 3) -> Any:
    """``guard.fenced(...)`` for a request signed by its rightful owner."""
    signature = signed(token, key, scope)
    return guard.fenced(
        scope=scope, token=token, key=key, fingerprint="fp", signature=signature, digest=SENT
    )


async def test_a_signed_guard_checks_signatures_before_the_high_water_mark(
    fence_dsn: str,
) -> None:
    scope = unique()
    key = f"{scope}:op"
    async with FenceGuard(fence_dsn, secret=SECRET) as guard:
        forged = [
            None,  # unsigned
            "v2=" + "0" * 64,  # made up
            signed(MAX_TOKEN, key, scope, b"another-secret"),  # wrong secret
            signed(3, key, scope),  # a real signature, replayed with a bigger token
            sign_fence_v1(SECRET, scope, MAX_TOKEN, key),  # the old format, refused by default
        ]
        for signature in forged:
            with pytest.raises(BadSignature):
                async with guard.fenced(
                    scope=scope,
                    token=MAX_TOKEN,
                    key=key,
                    fingerprint="fp",
                    signature=signature,
                    digest=SENT,
                ):
                    pass
        assert await guard.highest_token(scope) is None  # nobody is locked out
        async with honestly(guard, scope, key) as slot:
            slot.complete(201, b"honest")
        assert await guard.highest_token(scope) == 3
        with pytest.raises(FenceConfigError, match="method, path and body"):
            async with guard.fenced(  # a receiver that does not hand the request over
                scope=scope, token=3, key=key, fingerprint="fp", signature=signed(3, key, scope)
            ):
                pass

    async with FenceGuard(fence_dsn, secret=[b"new-secret", SECRET]) as rotating:
        async with honestly(rotating, scope, key) as slot:
            assert slot.replay is not None and slot.replay.body == b"honest"


async def test_v1_signatures_pass_only_through_the_upgrade_window(fence_dsn: str) -> None:
    scope = unique()
    key = f"{scope}:op"
    old = sign_fence_v1(SECRET, scope, 4, key)
    async with FenceGuard(fence_dsn, secret=SECRET) as strict:
        with pytest.raises(BadSignature, match="v1 signatures"):
            async with strict.fenced(
                scope=scope, token=4, key=key, fingerprint="fp", signature=old, digest=SENT
            ):
                pass
    async with FenceGuard(fence_dsn, secret=SECRET, accept_v1_signatures=True) as upgrading:
        async with upgrading.fenced(
            scope=scope, token=4, key=key, fingerprint="fp", signature=old, digest=SENT
        ) as slot:
            slot.complete(201, b"from an old sender")
        assert await upgrading.highest_token(scope) == 4


@pytest.mark.parametrize("guard_class", [FenceGuard, SyncFenceGuard])
def test_a_guard_without_a_secret_must_say_insecure(guard_class: type[Any]) -> None:
    with pytest.raises(FenceConfigError, match="insecure=True") as refused:
        guard_class("dbname=unused")
    assert isinstance(refused.value, ConfigError) and isinstance(refused.value, ValueError)
    assert "forged" in str(refused.value)  # it says why
    assert guard_class("dbname=unused", insecure=True).signed is False
    assert guard_class("dbname=unused", secret=SECRET).signed is True
    with pytest.raises(FenceConfigError, match="contradict"):
        guard_class("dbname=unused", secret=SECRET, insecure=True)
    with pytest.raises(FenceConfigError, match="needs a secret"):
        guard_class("dbname=unused", insecure=True, accept_v1_signatures=True)
    with pytest.raises(FenceConfigError, match="insecure=True"):
        guard_class("dbname=unused", insecure=1)  # only True itself says it


async def test_invalid_requests_are_refused_before_the_database(guard: FenceGuard) -> None:
    for token in (0, -3, MAX_TOKEN + 1):
        with pytest.raises(MalformedFence):
            async with guard.fenced(scope="s", token=token, key="k", fingerprint="fp"):
                pass
    with pytest.raises(FenceConfigError, match="lock_timeout"):
        FenceGuard("dbname=unused", insecure=True, lock_timeout=0)
    with pytest.raises(FenceConfigError, match="non-empty bytes"):
        FenceGuard("dbname=unused", secret=b"")
    for never in ({429}, {401}, {408}, {503}, {404, 500}, {199}, {True}):
        with pytest.raises(FenceConfigError, match="final_statuses"):
            FenceGuard("dbname=unused", insecure=True, final_statuses=FINAL_STATUSES | never)


async def answer(
    guard: FenceGuard, scope: str, key: str, status: int, final: bool | None = None
) -> bool:
    """Apply the effect, answer ``status``; True if the guard recorded it."""
    async with guard.fenced(scope=scope, token=5, key=key, fingerprint="fp") as slot:
        assert slot.replay is None, "a not-final answer was replayed"
        await slot.conn.execute(INSERT_EFFECT, (key, 5))
        recorded = slot.complete(status, f"{status}".encode(), final=final)
    return recorded


@pytest.mark.parametrize("status", [401, 403, 404, 408, 409, 425, 429, 500, 503])
async def test_a_not_final_answer_is_released_and_the_next_attempt_applies_the_effect(
    guard: FenceGuard, fence_dsn: str, status: int
) -> None:
    scope = unique()
    key = f"{scope}:op"
    for _ in range(2):  # "not now" twice: never replayed, the effect rolled back each time
        assert await answer(guard, scope, key, status) is False
        assert await guard.lookup(key) is None
        assert count_rows(fence_dsn, "fence_test_effects", key) == 0
    assert await answer(guard, scope, key, 201) is True
    assert count_rows(fence_dsn, "fence_test_effects", key) == 1
    assert await apply(guard, scope, 5, key) == StoredResponse(201, b"201", ())


async def test_the_application_declares_single_answers_final_or_not(
    guard: FenceGuard, fence_dsn: str
) -> None:
    scope = unique()
    gone, undone = f"{scope}:gone", f"{scope}:undone"
    assert await answer(guard, scope, gone, 404, final=True) is True  # it will never exist
    assert await apply(guard, scope, 5, gone) == StoredResponse(404, b"404", ())
    assert await answer(guard, scope, undone, 200, final=False) is False  # nothing was done
    assert await guard.lookup(undone) is None
    assert count_rows(fence_dsn, "fence_test_effects", undone) == 0
    async with FenceGuard(
        fence_dsn, insecure=True, final_statuses=FINAL_STATUSES | {404}
    ) as lenient:
        assert await answer(lenient, scope, f"{scope}:missing", 404) is True


async def test_a_two_phase_not_final_answer_frees_the_key(guard: FenceGuard) -> None:
    scope = unique()
    key = f"{scope}:send_mail"
    sent: list[str] = []
    for status in (429, 202):  # the provider said "slow down", then took it
        async with guard.fenced(
            scope=scope, token=4, key=key, fingerprint="fp", two_phase=True
        ) as slot:
            assert slot.replay is None
            sent.append(str(status))
            slot.complete(status, b"")
        record = await guard.lookup(key)
        assert (record is None) == (status == 429)
    assert sent == ["429", "202"]


def test_the_sync_guard_makes_the_same_decisions(
    sync_guard: SyncFenceGuard, fence_dsn: str
) -> None:
    scope = unique()
    key = f"{scope}:op"
    assert apply_sync(sync_guard, scope, 8, key) is None
    assert apply_sync(sync_guard, scope, 8, key) == StoredResponse(
        201, b"made by 8", (("content-type", "text/plain"),)
    )
    with pytest.raises(StaleFence):
        apply_sync(sync_guard, scope, 7, f"{scope}:other")
    with pytest.raises(FingerprintMismatch):
        apply_sync(sync_guard, scope, 8, key, fingerprint="other")
    assert sync_guard.highest_token(scope) == 8
    assert count_rows(fence_dsn, "fence_test_effects", key) == 1
    with pytest.raises(OSError):
        with sync_guard.fenced(
            scope=scope, token=8, key=f"{scope}:mail", fingerprint="fp", two_phase=True
        ):
            raise OSError("connection reset by the mail server")
    record = sync_guard.lookup(f"{scope}:mail")
    assert record is not None and record.status == "in_progress"


@pytest.mark.parametrize("status", [401, 408, 429, 503])
def test_the_sync_guard_releases_not_final_answers_too(
    sync_guard: SyncFenceGuard, fence_dsn: str, status: int
) -> None:
    scope = unique()
    key = f"{scope}:op"
    for answered, recorded in ((status, False), (201, True)):
        with sync_guard.fenced(scope=scope, token=8, key=key, fingerprint="fp") as slot:
            assert slot.replay is None
            slot.conn.execute(INSERT_EFFECT, (key, 8))
            assert slot.complete(answered, b"") is recorded
        assert count_rows(fence_dsn, "fence_test_effects", key) == int(recorded)
    assert apply_sync(sync_guard, scope, 8, key) == StoredResponse(201, b"", ())
    with sync_guard.fenced(scope=scope, token=8, key=f"{scope}:x", fingerprint="fp") as slot:
        slot.final = True  # as a handler behind the middleware declares it
        assert slot.complete(status, b"") is True
    assert sync_guard.lookup(f"{scope}:x") is not None


def test_migrations_are_idempotent(fence_dsn: str) -> None:
    assert migrate_fence(fence_dsn) == []
    with psycopg.connect(fence_dsn) as conn:
        assert migrate_fence(conn) == []


def test_every_named_query_is_used() -> None:
    plans = inspect.getsource(_core)
    assert {name for name in QUERIES if f'"{name}"' not in plans} == set()
