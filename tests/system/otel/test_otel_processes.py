"""One trace per job across processes: this process produces (and receives the fenced
request), real ``tenure worker`` processes run the job; the spans of all of them are one
trace with the links the README draws, and hold no payload, result or error text."""

from __future__ import annotations

from tests.apps.otel_app import ERROR_MARK, PAYLOAD_MARK, RESULT_MARK
from tests.integration.otel.spans import Seen, Traced, leaks, named, one
from tests.support.waiting import wait_until
from tests.system.otel.conftest import Stage, TracedWorkers

MARKS = (PAYLOAD_MARK, RESULT_MARK, ERROR_MARK)


def wait_spans(workers: TracedWorkers, name: str, what: str, **attributes: object) -> list[Seen]:
    wait_until(
        lambda: named(workers.spans(), name, **attributes),
        timeout=20,
        interval=0.05,
        message=f"no {name} {attributes} from the workers ({what})\n{workers.logs()[-3000:]}",
    )
    return named(workers.spans(), name, **attributes)


def test_one_trace_from_the_producer_through_the_worker_to_the_receiver(
    tracing: Traced, stage: Stage, receiver: str
) -> None:
    workers = stage.workers
    with tracing.tracer.start_as_current_span("producer.request"):
        payload = {"receiver": receiver, "title": PAYLOAD_MARK}
        job = stage.producer.sync.enqueue("file_case", payload)
    workers.spawn_traced("w1")
    row = stage.wait_state(job.id, "succeeded")
    wait_spans(workers, "tenure.commit", "the commit", **{"tenure.job.id": job.id})
    wait_until(lambda: named(tracing.spans(), "tenure.fence"), message="no fence span")

    mine = tracing.spans()
    theirs = workers.spans()
    root = one(mine, "producer.request")
    enqueue = one(mine, "tenure.enqueue")
    claim = one(theirs, "tenure.claim")
    call = one(theirs, "tenure.call")
    commit = one(theirs, "tenure.commit")
    fence = one(mine, "tenure.fence")
    handler = one(mine, "receiver.create_case")

    # One trace, three roles, two processes: the worker's spans came from its own process.
    assert {s.trace_id for s in (root, enqueue, claim, call, commit, fence, handler)} == {
        root.trace_id
    }
    assert {s.service for s in (claim, call, commit)} == {"worker-w1"}
    assert {s.service for s in (root, enqueue, fence, handler)} == {"test-process"}

    # The links: the row carries the enqueue span; the receiver continues the call's.
    assert enqueue.parent_id == root.span_id and enqueue.kind == "PRODUCER"
    assert claim.parent_id == enqueue.span_id and claim.kind == "CONSUMER"
    assert call.parent_id == claim.span_id
    assert commit.parent_id == claim.span_id
    assert fence.parent_id == call.span_id and fence.kind == "SERVER"
    assert handler.parent_id == fence.span_id

    # What each says: ids, token, attempt, worker, outcome codes.
    attempt = {
        "tenure.job.id": job.id,
        "tenure.tool": "file_case",
        "tenure.job.token": row["token"],
        "tenure.job.attempt": 1,
        "tenure.worker": "w1",
    }
    for span in (claim, call, commit):
        assert attempt.items() <= span.attributes.items(), span.text
    assert enqueue.attributes["tenure.job.id"] == job.id
    assert enqueue.attributes["tenure.job.created"] is True
    assert call.attributes["tenure.outcome"] == "succeeded" and call.status == "UNSET"
    assert commit.attributes["tenure.outcome"] == "succeeded"
    assert commit.attributes["tenure.commit.accepted"] is True
    assert fence.attributes["tenure.fence.outcome"] == "accepted"
    assert fence.attributes["http.response.status_code"] == 201
    assert fence.attributes["tenure.fence.token"] == row["token"]
    assert fence.attributes["tenure.fence.scope"] == f"tool-job:{job.id}"
    assert "tenure.trace_context.ignored" not in claim.attributes

    # The payload went to the receiver and the result into the row, never into a span.
    assert PAYLOAD_MARK in str(stage.journal.job(job.id)["payload"])
    assert RESULT_MARK in str(row["result"])
    assert leaks(mine + theirs, *MARKS) == []


def test_a_failed_call_is_an_error_with_its_code_and_without_its_message(
    tracing: Traced, stage: Stage
) -> None:
    workers = stage.workers
    job = stage.producer.sync.enqueue("refuse", {"note": PAYLOAD_MARK})
    workers.spawn_traced("w1")
    row = stage.wait_state(job.id, "failed")
    assert ERROR_MARK in row["error"]["message"]
    wait_spans(workers, "tenure.commit", "the failure's commit")
    call = one(workers.spans(), "tenure.call")
    commit = one(workers.spans(), "tenure.commit")
    assert (call.status, call.description) == ("ERROR", "permanent")
    assert call.attributes["tenure.outcome"] == "failed"
    assert call.attributes["tenure.code"] == "permanent"
    assert commit.attributes["tenure.outcome"] == "failed"
    assert commit.attributes["tenure.commit.accepted"] is True
    assert call.trace_id == one(tracing.spans(), "tenure.enqueue").trace_id
    assert leaks(tracing.spans() + workers.spans(), *MARKS) == []


def test_a_job_reclaimed_after_a_sigkill_shows_both_attempts_in_one_trace(
    tracing: Traced, stage: Stage
) -> None:
    workers = stage.workers
    with tracing.tracer.start_as_current_span("producer.request"):
        job = stage.producer.sync.enqueue("hold", {"note": PAYLOAD_MARK})
    first = workers.spawn_traced("w1")
    wait_spans(workers, "tenure.claim", "the first claim", **{"tenure.job.attempt": 1})
    first.kill()
    workers.spawn_traced("w2")
    row = stage.wait_state(job.id, "succeeded")
    wait_spans(workers, "tenure.commit", "the second attempt's commit")

    enqueue = one(tracing.spans(), "tenure.enqueue")
    spans = workers.spans()
    dead = one(spans, "tenure.claim", **{"tenure.job.attempt": 1, "tenure.worker": "w1"})
    second = one(spans, "tenure.claim", **{"tenure.job.attempt": 2, "tenure.worker": "w2"})
    assert dead.service == "worker-w1" and second.service == "worker-w2"
    assert dead.trace_id == second.trace_id == enqueue.trace_id
    assert dead.parent_id == second.parent_id == enqueue.span_id
    assert second.attributes["tenure.job.token"] == row["token"]
    assert second.attributes["tenure.job.previous_token"] == dead.attributes["tenure.job.token"]
    # The killed attempt's call never ended, so it was never exported; the second's was.
    assert named(spans, "tenure.call", **{"tenure.worker": "w1"}) == []
    call = one(spans, "tenure.call", **{"tenure.worker": "w2"})
    commit = one(spans, "tenure.commit")
    assert call.parent_id == commit.parent_id == second.span_id
    assert commit.attributes["tenure.commit.accepted"] is True
    assert leaks(tracing.spans() + spans, *MARKS) == []


def test_a_stopped_owner_reports_its_lost_lease_in_the_same_trace(
    tracing: Traced, stage: Stage
) -> None:
    """SIGSTOP past the lease: another worker takes the job over; woken, the first one
    finds its lease gone, and its heartbeat_lost span sits under its own call."""
    workers = stage.workers
    job = stage.producer.sync.enqueue("hold", {"note": PAYLOAD_MARK})
    first = workers.spawn_traced("w1")
    wait_spans(workers, "tenure.claim", "the first claim", **{"tenure.worker": "w1"})
    # stopped inside its call (not between the claim and the call, where a loss found on
    # waking has no call span to sit under yet)
    wait_until(lambda: stage.journal.job(job.id)["progress"] is not None, timeout=30)
    first.pause()
    workers.spawn_traced("w2")
    stage.wait_state(job.id, "succeeded")
    first.resume()
    lost = wait_spans(workers, "tenure.heartbeat_lost", "the stale owner's loss")
    wait_spans(workers, "tenure.call", "the stale owner's call", **{"tenure.worker": "w1"})

    spans = workers.spans()
    claim = one(spans, "tenure.claim", **{"tenure.worker": "w1"})
    call = one(spans, "tenure.call", **{"tenure.worker": "w1"})
    (loss,) = lost
    assert loss.parent_id == call.span_id and call.parent_id == claim.span_id
    assert loss.trace_id == claim.trace_id == one(tracing.spans(), "tenure.enqueue").trace_id
    assert loss.attributes["tenure.reason"] in ("deadline_passed", "zero_rows")
    assert loss.attributes["tenure.job.token"] == claim.attributes["tenure.job.token"]
    assert (loss.status, loss.description) == ("ERROR", loss.attributes["tenure.reason"])
    assert call.attributes["tenure.outcome"] == "abandoned"
    assert call.attributes["tenure.code"] == "lease_lost"
    assert named(spans, "tenure.commit", **{"tenure.worker": "w1"}) == []
    assert leaks(tracing.spans() + spans, *MARKS) == []
