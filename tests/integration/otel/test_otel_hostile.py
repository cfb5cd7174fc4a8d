"""Hostile trace contexts: whatever a row or a request says, the job runs and the request is
served; a context that is not a valid W3C one is ignored (the work starts a trace of its
own), an oversized tracestate is dropped, and nobody gets an error for it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from psycopg.types.json import Jsonb
from tests.integration.otel.helpers import finished, running
from tests.integration.otel.spans import Traced, one

from tenure import App, Context
from tenure.fence import fence_headers

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{SPAN_ID}-01"

# Every one of these is ignored: the job's claim starts a trace of its own.
IGNORED_CONTEXTS: dict[str, Any] = {
    "not hex": {"traceparent": "00-zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz-00f067aa0ba902b7-01"},
    "upper-case hex": {"traceparent": VALID.upper()},
    "all-zero trace id": {"traceparent": f"00-{'0' * 32}-{SPAN_ID}-01"},
    "all-zero span id": {"traceparent": f"00-{TRACE_ID}-{'0' * 16}-01"},
    "version ff": {"traceparent": f"ff-{TRACE_ID}-{SPAN_ID}-01"},
    "a future version": {"traceparent": f"01-{TRACE_ID}-{SPAN_ID}-01-extra"},
    "trailing text": {"traceparent": VALID + "-and-more"},
    "leading space": {"traceparent": " " + VALID},
    "oversized": {"traceparent": VALID + "0" * 800},
    "a number": {"traceparent": 42},
    "a list": {"traceparent": [VALID]},
    "an object": {"traceparent": {"traceparent": VALID}},
    "null": {"traceparent": None},
    "non-ASCII": {"traceparent": f"00-{TRACE_ID[:-1]}é-{SPAN_ID}-01"},
    "tracestate only": {"tracestate": "vendor=value"},
    "empty": {},
}

# A valid traceparent is continued; a tracestate that is not acceptable is dropped.
DROPPED_STATES: dict[str, Any] = {
    "oversized": "v=" + "a" * 600,
    "control characters": "v=a\tb",
    "too many members": ",".join(f"k{n}=v" for n in range(40)),
    "not a string": ["v=a"],
}


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[App]:
    app = App(tenure_dsn)

    @app.tool(lease=5, heartbeat=1, jitter=1)
    async def noop(ctx: Context, case: str) -> None:
        return None

    yield app
    await app.aclose()


def set_context(dsn: str, job_id: int, value: Any) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE tenure_jobs SET trace_context = %s WHERE id = %s", (Jsonb(value), job_id)
        )


async def test_a_hostile_trace_context_in_a_row_is_ignored_and_the_job_runs(
    app: App, tenure_dsn: str, tracing: Traced
) -> None:
    jobs: dict[str, int] = {}
    cases = {**IGNORED_CONTEXTS, **{f"state {k}": v for k, v in DROPPED_STATES.items()}}
    for case, value in cases.items():
        job = await app.enqueue("noop", {"case": case})
        if case.startswith("state "):
            value = {"traceparent": VALID, "tracestate": value}
        set_context(tenure_dsn, job.id, value)
        jobs[case] = job.id
    async with running(app):
        ended = await app.wait_many(list(jobs.values()), timeout=20)
        assert {job.state for job in ended} == {"succeeded"}
        await finished(tracing, "tenure.commit", len(jobs))

    spans = tracing.spans()
    for case, job_id in jobs.items():
        claim = one(spans, "tenure.claim", **{"tenure.job.id": job_id})
        call = one(spans, "tenure.call", **{"tenure.job.id": job_id})
        assert call.parent_id == claim.span_id and call.attributes["tenure.outcome"] == "succeeded"
        if case in IGNORED_CONTEXTS:
            assert claim.parent_id is None, case
            assert claim.attributes["tenure.trace_context.ignored"] is True, case
            assert claim.trace_id != f"0x{TRACE_ID}", case
        else:  # the traceparent is continued, the tracestate left behind
            assert (claim.trace_id, claim.parent_id) == (f"0x{TRACE_ID}", f"0x{SPAN_ID}"), case
            assert claim.trace_state == "[]", case


async def test_the_database_refuses_a_trace_context_that_is_not_a_small_object(
    app: App, tenure_dsn: str
) -> None:
    job = await app.enqueue("noop", {"case": "refused"})
    for value in ([VALID], VALID, {"traceparent": VALID, "pad": "x" * 1100}):
        with pytest.raises(psycopg.errors.CheckViolation):
            set_context(tenure_dsn, job.id, value)
    with psycopg.connect(tenure_dsn) as conn:
        row = conn.execute("SELECT trace_context FROM tenure_jobs WHERE id = %s", (job.id,))
        assert row.fetchone() == (None,)


@pytest.mark.parametrize(
    ("state", "kept"),
    [("vendor=abc", "vendor=abc"), (",".join(f"v{n}={'a' * 200}" for n in range(3)), None)],
    ids=["small", "oversized"],
)
async def test_the_producer_stores_its_span_with_a_capped_tracestate(
    app: App, tenure_dsn: str, tracing: Traced, state: str, kept: str | None
) -> None:
    parent = SpanContext(
        int(TRACE_ID, 16),
        int(SPAN_ID, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState.from_header([state]),
    )
    with trace.use_span(NonRecordingSpan(parent)):
        job = await app.enqueue("noop", {"case": "producer"})
    with psycopg.connect(tenure_dsn) as conn:
        row = conn.execute("SELECT trace_context FROM tenure_jobs WHERE id = %s", (job.id,))
        (stored,) = row.fetchone() or (None,)
    enqueue = one(tracing.spans(), "tenure.enqueue")
    assert stored["traceparent"] == f"00-{TRACE_ID}-{enqueue.span_id[2:]}-01"
    assert stored.get("tracestate") == kept
    assert len(json.dumps(stored)) < 1024


async def test_a_hostile_traceparent_on_a_fenced_request_is_ignored_and_it_is_served(
    receiver: str, tracing: Traced
) -> None:
    cases: dict[str, list[tuple[str, str]]] = {
        "malformed": [("traceparent", "00-nothex-00f067aa0ba902b7-01")],
        "repeated": [("traceparent", VALID), ("traceparent", VALID)],
        "oversized": [("traceparent", VALID + "0" * 2000)],
        "state oversized": [("traceparent", VALID), ("tracestate", "v=" + "a" * 3000)],
        "state repeated past the cap": [("traceparent", VALID)]
        + [("tracestate", f"k{n}={'b' * 100}") for n in range(6)],
    }
    async with httpx.AsyncClient(timeout=10) as client:
        for n, (case, extra) in enumerate(cases.items(), 1):
            headers = list(fence_headers(f"tool-job:{n}", 7, f"tool-job:{n}:op").items())
            response = await client.post(
                receiver + "/cases", content=b"{}", headers=headers + extra
            )
            assert response.status_code == 201, case
    fences = await finished(tracing, "tenure.fence", len(cases))  # ended after the response
    assert len(fences) == len(cases)
    for fence, case in zip(fences, cases, strict=True):
        assert fence.attributes["tenure.fence.outcome"] == "accepted", case
        if case.startswith("state"):
            assert fence.parent_id == f"0x{SPAN_ID}" and fence.trace_state == "[]", case
        else:
            assert fence.parent_id is None and fence.trace_id != f"0x{TRACE_ID}", case
