"""Every journaled event, provoked for real, carries the right token, attempt and worker.

Worker processes of ``tests.integration.observe.observe_app`` are SIGKILLed, SIGSTOPped,
cut off from the database by a TCP proxy, cancelled and retried; a real fenced
receiver refuses a stale token. The assertions read tenure_events the way an
operator would at 02:00: who held which job under which token, when the lease
ran out, which request went out, which result was refused.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from tests.integration.observe.conftest import JOURNAL_KEY
from tests.integration.observe.helpers import Receiver, scrape, value, wait_done, wait_events
from tests.integration.observe.observe_app import LEASE
from tests.support.schemas import db_now
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup, wait_job
from tests.system.e2e.helpers import pg_proxy

from tenure import App
from tenure._chaos._proxy import rewrite_dsn
from tenure._observe._journal import payload_hmac
from tenure._payload import encode
from tenure.fence import FencedAuth, fence_headers


def running(journal: Journal, job_id: int, workers: WorkerGroup) -> dict[str, Any]:
    return wait_job(journal, job_id, lambda r: r["state"] == "running", "never ran", workers)


def ms(delta: timedelta) -> float:
    return delta.total_seconds() * 1000


def who(event: dict[str, Any]) -> tuple[Any, Any, Any]:
    return event["token"], event["attempt"], event["worker"]


def test_sigkill_journals_the_expired_lease_under_its_token_then_the_reclaim(
    workers: WorkerGroup, ops: App, journal: Journal
) -> None:
    doomed = workers.spawn("doomed")
    doomed.wait_started()
    payload = {"seconds": 30.0, "text": "report for customer 1048", "only_on": "doomed"}
    job = ops.sync.enqueue("slow", payload)
    first = running(journal, job.id, workers)
    doomed.kill()
    heir = workers.spawn("heir")

    row = wait_done(journal, job.id, workers)
    assert (row["state"], row["owner"], row["attempt"]) == ("succeeded", "heir", 2), row
    events = journal.events(job.id)
    assert [e["kind"] for e in events] == [
        "job_claimed",
        "lease_expired",
        "job_claimed",
        "succeeded",
    ]
    claimed, expired, reclaimed, done = events
    assert who(claimed) == (first["token"], 1, "doomed")
    # lease_expired is about the expired holder: its token, its attempt, its name.
    assert who(expired) == (first["token"], 1, "doomed")
    assert expired["code"] == "lease_expired" and expired["detail"] == {"reclaimed_by": "heir"}
    assert 0 <= expired["duration_ms"] < 15_000  # found this long after the lease ended
    # job_reclaimed is derived: the claim that carries previous_token.
    assert who(reclaimed) == (row["token"], 2, "heir")
    assert reclaimed["detail"] == {"previous_token": first["token"], "reclaimed_from": "doomed"}
    assert who(done) == (row["token"], 2, "heir")
    # The heir's attempt ran from its claim, after the first claim's row, to its commit,
    # before its own row: never longer than the time between the two rows.
    assert done["duration_ms"] <= ms(done["at"] - claimed["at"]) + 1
    # Every row carries the keyed payload hash, never the payload.
    expected = payload_hmac(JOURNAL_KEY.encode(), "slow", encode(payload))
    assert {e["payload_hmac"] for e in events} == {expected} == {row["payload_hmac"]}
    line = heir.wait_event("lease_expired", job=job.id)
    assert (line["token"], line["worker"], line["reclaimed_by"]) == (
        str(first["token"]),
        "doomed",
        "heir",
    )
    assert heir.has_event("job_claimed", job=job.id, previous_token=first["token"])


def test_sigstopped_owner_journals_its_lost_lease_and_any_late_commit_is_rejected(
    workers: WorkerGroup, ops: App, journal: Journal
) -> None:
    stale = workers.spawn("stale")
    stale.wait_started()
    # The call finishes while its worker is stopped. On SIGCONT the worker's deadline
    # watcher and its event loop race: either the call is stopped (heartbeat_lost,
    # deadline_passed) or its result reaches the fenced commit, which the newer owner's
    # token refuses (result_rejected). Both must be journaled under the stale token.
    job = ops.sync.enqueue("slow", {"seconds": 0.5, "only_on": "stale"})
    first = running(journal, job.id, workers)
    stale.pause()
    workers.spawn("fresh")
    row = wait_done(journal, job.id, workers)
    assert (row["state"], row["owner"]) == ("succeeded", "fresh"), row
    stale.resume()

    # Whichever of the stale worker's threads woke first, its attempt leaves a row.
    stale_kinds = ("heartbeat_lost", "result_rejected")
    try:
        wait_until(
            lambda: any(journal.events(job.id, kind) for kind in stale_kinds),
            timeout=15,
            interval=0.02,
        )
    except AssertionError:
        raise AssertionError(
            f"no trace of the stale owner: {journal.kinds(job.id)}\n{workers.logs()}"
        ) from None
    lost = journal.events(job.id, "heartbeat_lost")
    assert {who(e) for e in lost} <= {(first["token"], 1, "stale")}
    assert {e["code"] for e in lost} <= {"deadline_passed", "zero_rows", "executor_unobservable"}
    assert all(e["duration_ms"] > 1000 for e in lost if e["code"] == "deadline_passed")
    (expired,) = journal.events(job.id, "lease_expired")
    assert who(expired) == (first["token"], 1, "stale")
    for rejected in journal.events(job.id, "result_rejected"):
        assert who(rejected) == (first["token"], 1, "stale")
        assert rejected["detail"] == {"outcome": "succeeded"}
    succeeded = journal.events(job.id, "succeeded")
    assert [who(e) for e in succeeded] == [(row["token"], 2, "fresh")]


def test_a_late_commit_from_a_stalled_owner_is_journaled_as_rejected(
    workers: WorkerGroup, ops: App, journal: Journal
) -> None:
    stalled = workers.spawn("stalled")
    stalled.wait_started()
    # Attempt 1 blocks its worker's event loop past the lease: the tool returns after the
    # takeover, and nothing can stop its result before the fenced commit refuses it.
    job = ops.sync.enqueue("block_loop", {"seconds": 2 * LEASE})
    first = running(journal, job.id, workers)
    workers.spawn("healthy")
    row = wait_done(journal, job.id, workers)
    assert (row["state"], row["owner"], row["attempt"]) == ("succeeded", "healthy", 2), row
    (rejected,) = wait_events(journal, job.id, "result_rejected")
    assert who(rejected) == (first["token"], 1, "stalled")
    assert rejected["detail"] == {"outcome": "succeeded"}
    assert rejected["payload_hmac"] == row["payload_hmac"] is not None
    withheld = journal.events(job.id, "heartbeat_lost")
    assert ("executor_unobservable", first["token"]) in {(e["code"], e["token"]) for e in withheld}
    assert stalled.has_event("result_rejected", job=job.id, token=first["token"])


def test_cancel_retry_and_failures_are_journaled_with_codes_and_durations(
    workers: WorkerGroup, ops: App, journal: Journal, tenure_dsn: str
) -> None:
    before = db_now(tenure_dsn)  # every attempt below was claimed after this
    first_worker = workers.spawn("first")
    first_worker.wait_started()
    job = ops.sync.enqueue("slow", {"seconds": 30.0, "only_on": "first"})
    first = running(journal, job.id, workers)
    assert ops.sync.cancel(job.id).state == "cancelled"
    first_worker.wait_event("cancel_observed", job=job.id)
    (stopped,) = wait_events(journal, job.id, "call_stopped", workers=workers)
    assert who(stopped) == (first["token"], 1, "first") and stopped["code"] == "cancelled"
    first_worker.terminate()
    first_worker.wait()

    ops.sync.admin.retry(job.id)
    workers.spawn("second")
    flaky = ops.sync.enqueue("flaky", {"text": "once more"})
    refused = ops.sync.enqueue("refuse", {"text": "no"})
    row = wait_done(journal, job.id, workers)
    assert (row["state"], row["attempt"], row["owner"]) == ("succeeded", 2, "second")

    events = journal.events(job.id)
    assert [e["kind"] for e in events] == [
        "job_claimed",
        "cancelled",
        "call_stopped",
        "retry_requested",
        "job_claimed",
        "succeeded",
    ]
    _, cancelled, _, requested, again, done = events
    assert who(cancelled) == (first["token"], 1, "first") and cancelled["code"] == "cancelled"
    # it had been running this long: from a claim after `before` to the cancel's row
    assert cancelled["duration_ms"] <= ms(cancelled["at"] - before) + 1
    assert (requested["token"], requested["attempt"], requested["worker"]) == (
        first["token"],
        1,
        None,
    )
    assert who(again) == (row["token"], 2, "second") and who(done) == who(again)

    assert wait_done(journal, flaky.id, workers)["state"] == "succeeded"
    kinds = journal.kinds(flaky.id)
    assert kinds == ["job_claimed", "retried", "job_claimed", "succeeded"], kinds
    retried = journal.events(flaky.id, "retried")[0]
    assert (retried["attempt"], retried["code"], retried["worker"]) == (1, "retryable", "second")
    assert retried["duration_ms"] <= ms(retried["at"] - before) + 1

    assert wait_done(journal, refused.id, workers)["state"] == "failed"
    (failed,) = journal.events(refused.id, "failed")
    assert (failed["attempt"], failed["code"], failed["detail"]) == (
        1,
        "permanent",
        {"code": "permanent"},
    )


class _StaleSender:
    """What a stale owner's FencedAuth would send: the job's scope with an older token."""

    def __init__(self, job_id: int, token: int) -> None:
        self.job_id, self.token = job_id, token

    def fence_headers(self, operation: str, **_request: object) -> dict[str, str]:
        scope = f"tool-job:{self.job_id}"  # unsigned: the request itself need not be covered
        return fence_headers(scope, self.token, f"{scope}:{operation}", None)

    def ensure_owned(self) -> None:
        """A stale owner believes it still owns the job."""


def test_fenced_requests_and_stale_fences_are_journaled_next_to_the_job(
    workers: WorkerGroup, ops: App, journal: Journal, tenure_dsn: str
) -> None:
    receiver = Receiver(tenure_dsn)
    try:
        workers.spawn("sender")
        warm_up = ops.sync.enqueue("echo", {"text": "first token"})  # so a lower token exists
        assert wait_done(journal, warm_up.id, workers)["state"] == "succeeded"
        job = ops.sync.enqueue("send", {"url": receiver.url + "/notify", "text": "hello"})
        row = wait_done(journal, job.id, workers)
        assert row["state"] == "succeeded" and row["result"] == {"status": 201}, row

        (started,) = wait_events(journal, job.id, "tool_request_started")
        assert who(started) == (row["token"], 1, "sender") and started["tool"] == "send"
        assert started["detail"] == {
            "operation": "notify",
            "key": f"tool-job:{job.id}:notify",
            "method": "POST",
            "host": "127.0.0.1",
            "lease_left": pytest.approx(started["duration_ms"] / 1000, abs=0.001),
        }
        assert 0 < started["duration_ms"] <= 1500  # lease left when the request went out
        assert started["payload_hmac"] == row["payload_hmac"] is not None

        # A stale owner's request for the same job arrives late: the receiver refuses it.
        stale = _StaleSender(job.id, row["token"] - 1)
        response = httpx.post(
            receiver.url + "/notify", json={"text": "late"}, auth=FencedAuth(stale, "notify")
        )
        assert response.status_code == 409
        (refused,) = wait_events(journal, job.id, "stale_fence_rejected")
        assert (refused["token"], refused["worker"], refused["code"]) == (
            row["token"] - 1,
            None,
            None,
        )
        assert refused["detail"] == {
            "status": 409,
            "operation": "notify",
            "key": f"tool-job:{job.id}:notify",
            "receiver": "test-receiver",
        }
        samples = scrape(receiver.url + "/metrics")
        assert value(samples, "tenure_stale_fences_rejected_total") == 1
        assert value(samples, "tenure_fence_decisions_total", outcome="accepted") == 1
        assert value(samples, "tenure_fence_decisions_total", outcome="stale") == 1
    finally:
        receiver.close()


def test_ownership_unknown_is_journaled_once_the_database_answers_and_back_dated(
    workers: WorkerGroup, ops: App, journal: Journal
) -> None:
    with pg_proxy(journal.dsn) as proxy:
        cut_off = workers.spawn("cut-off", dsn=rewrite_dsn(journal.dsn, proxy.host, proxy.port))
        job = ops.sync.enqueue("slow", {"seconds": 60.0, "only_on": "cut-off"})
        first = running(journal, job.id, workers)
        beat_after = first["heartbeat_at"]
        wait_job(journal, job.id, lambda r: r["heartbeat_at"] > beat_after, "no beat", workers)
        proxy.set_mode("blackhole")
        cut_off.wait_event("ownership_unknown", job=job.id, timeout=10)
        workers.spawn("connected")
        wait_events(journal, job.id, "lease_expired")  # reclaimed while the partition lasts
        proxy.set_mode("pass")

        # The writer kept the event and writes it once its connection works again.
        (unknown,) = wait_events(journal, job.id, "ownership_unknown")
    assert who(unknown) == (first["token"], 1, "cut-off")
    assert unknown["code"] == "db_error" and unknown["detail"]["error"]
    assert 0 < unknown["duration_ms"] < 1500  # since the last confirmed heartbeat
    (expired,) = journal.events(job.id, "lease_expired")
    # Back-dated by the time it waited: it happened before the lease ran out, although it
    # was written long after the reclaim.
    assert unknown["at"] < expired["at"] and unknown["id"] > expired["id"]
    wait_until(lambda: wait_done(journal, job.id, workers)["owner"] == "connected", timeout=20)
