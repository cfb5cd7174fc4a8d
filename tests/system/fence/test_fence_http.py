"""The whole kit over real HTTP: FencedAuth → loopback → FenceMiddleware → the example service.

Every receiver here is a real ``python -m tenure.examples.case_service``
subprocess; applied effects are counted in its tables and arrivals are read
from its decision log.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from tests.integration.fence.helpers import Receivers, Wire, count_rows, fence_tables, unique
from tests.support.waiting import wait_until

from tenure._errors import OwnershipUnknown
from tenure.examples import case_service
from tenure.fence import (
    FENCE_HEADER,
    KEY_HEADER,
    SCOPE_HEADER,
    SIGNATURE_HEADER,
    FenceConfigError,
    FencedAuth,
    SyncFenceGuard,
    fence_headers,
)
from tenure.fence._signing import MAX_TOKEN

SECRET = b"case-service-secret"
DUPLICATES = 20


class FakeContext:
    """A FenceSource as a tool's Context would be: one job, one token, ownership on a switch."""

    def __init__(self, token: int, *, secret: bytes | None = None) -> None:
        self.scope = unique()
        self.token = token
        self.secret = secret
        self.owned_error: Exception | None = None
        self.checked_at: list[float] = []

    def key(self, operation: str) -> str:
        return f"{self.scope}:{operation}"

    def fence_headers(self, operation: str, **request: Any) -> dict[str, str]:
        return fence_headers(self.scope, self.token, self.key(operation), self.secret, **request)

    def ensure_owned(self) -> None:
        self.checked_at.append(time.monotonic())
        if self.owned_error is not None:
            raise self.owned_error


def test_a_fenced_request_is_applied_once_and_replayed(
    receivers: Receivers, fence_dsn: str
) -> None:
    receiver = receivers.start()
    ctx = FakeContext(token=11)
    with httpx.Client(base_url=receiver.url, timeout=10) as client:
        first = client.post("/cases", json={"title": "Refund"}, auth=FencedAuth(ctx, "open"))
        again = client.post("/cases", json={"title": "Refund"}, auth=FencedAuth(ctx, "open"))
        status = client.get(f"/operations/{quote(ctx.key('open'), safe='')}")
        unknown = client.get(f"/operations/{quote(unique(), safe='')}")
    assert first.status_code == 201 and "x-idempotent-replay" not in first.headers
    assert again.status_code == 201 and again.headers["x-idempotent-replay"] == "true"
    assert again.json() == first.json()
    assert count_rows(fence_dsn, "example_cases", ctx.key("open")) == 1
    assert status.status_code == 200
    assert status.json()["status"] == "completed" and status.json()["token"] == 11
    assert unknown.status_code == 404
    assert [d["decision"] for d in receiver.decisions(ctx.key("open"))] == ["accepted", "replayed"]


def test_ensure_owned_runs_right_before_sending_in_sync_and_async_clients(
    receivers: Receivers, fence_dsn: str
) -> None:
    receiver = receivers.start()
    ctx = FakeContext(token=3)
    with httpx.Client(base_url=receiver.url, timeout=10) as client:
        response = client.post(
            "/payments/capture",
            json={"payment_id": "pay_1", "amount_cents": 1250},
            auth=FencedAuth(ctx, "capture"),
        )
    assert response.status_code == 200, response.text

    async def send_async() -> httpx.Response:
        async with httpx.AsyncClient(base_url=receiver.url, timeout=10) as client:
            return await client.post(
                "/cases", json={"title": "Async"}, auth=FencedAuth(ctx, "open")
            )

    assert asyncio.run(send_async()).status_code == 201
    arrivals = [
        receiver.decisions(ctx.key(op))[0]["arrived_monotonic"] for op in ("capture", "open")
    ]
    # one check per request, each made before that request reached the receiver
    assert len(ctx.checked_at) == 2
    assert ctx.checked_at[0] <= arrivals[0] <= ctx.checked_at[1] <= arrivals[1]
    assert count_rows(fence_dsn, "example_payments", ctx.key("capture")) == 1


def test_an_owner_in_doubt_sends_nothing(receivers: Receivers, fence_dsn: str) -> None:
    receiver = receivers.start()
    ctx = FakeContext(token=5)
    ctx.owned_error = OwnershipUnknown("the database did not confirm the lease")
    with httpx.Client(base_url=receiver.url, timeout=10) as client:
        with pytest.raises(OwnershipUnknown):
            client.post("/cases", json={"title": "x"}, auth=FencedAuth(ctx, "open"))

        async def send_async() -> None:
            async with httpx.AsyncClient(base_url=receiver.url, timeout=10) as aclient:
                await aclient.post("/cases", json={"title": "x"}, auth=FencedAuth(ctx, "open"))

        with pytest.raises(OwnershipUnknown):
            asyncio.run(send_async())
        # a request sent afterwards on the same client arrives and is logged, so had the
        # refused one been sent, its line would be in the log already
        ctx.owned_error = None
        marker = client.post("/cases", json={"title": "y"}, auth=FencedAuth(ctx, "marker"))
    assert marker.status_code == 201
    assert [d["key"] for d in receiver.decisions()] == [ctx.key("marker")]
    assert count_rows(fence_dsn, "example_cases", ctx.key("open")) == 0


def test_concurrent_duplicates_over_http_apply_once(receivers: Receivers, fence_dsn: str) -> None:
    receiver = receivers.start()
    ctx = FakeContext(token=9)

    async def storm() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=DUPLICATES)
        async with httpx.AsyncClient(base_url=receiver.url, timeout=30, limits=limits) as client:
            return await asyncio.gather(
                *(
                    client.post("/cases", json={"title": "Dup"}, auth=FencedAuth(ctx, "open"))
                    for _ in range(DUPLICATES)
                )
            )

    responses = asyncio.run(storm())
    replays = [r for r in responses if r.headers.get("x-idempotent-replay") == "true"]
    fresh = [r for r in responses if r.status_code == 201 and r not in replays]
    busy = [r for r in responses if r.status_code == 409]
    assert len(fresh) == 1
    assert len(fresh) + len(replays) + len(busy) == DUPLICATES
    assert all(r.json() == fresh[0].json() for r in replays)
    assert all(r.json()["error"] == "in_progress" for r in busy)
    assert count_rows(fence_dsn, "example_cases", ctx.key("open")) == 1
    decisions = [d["decision"] for d in receiver.decisions(ctx.key("open"))]
    assert decisions.count("accepted") == 1 and len(decisions) == DUPLICATES


def test_http_refusals_map_to_their_status_codes(receivers: Receivers, fence_dsn: str) -> None:
    receiver = receivers.start()
    ctx = FakeContext(token=20)
    with httpx.Client(base_url=receiver.url, timeout=10) as client:
        assert (
            client.post("/cases", json={"title": "A"}, auth=FencedAuth(ctx, "open")).status_code
            == 201
        )
        mismatch = client.post("/cases", json={"title": "B"}, auth=FencedAuth(ctx, "open"))
        stale_ctx = FakeContext(token=19)
        stale_ctx.scope = ctx.scope
        stale = client.post("/cases", json={"title": "C"}, auth=FencedAuth(stale_ctx, "other"))
        missing = client.post("/cases", json={"title": "D"})
        malformed = client.post(
            "/cases",
            json={"title": "E"},
            headers={**ctx.fence_headers("bad"), "X-Execution-Fence": "twenty"},
        )
        invalid_body = client.post("/cases", json={"title": ""}, auth=FencedAuth(ctx, "empty"))
    assert mismatch.status_code == 422
    assert mismatch.json() == {"error": "fingerprint_mismatch", "key": ctx.key("open")}
    assert stale.status_code == 409
    assert stale.json() == {"error": "stale_fence", "scope": ctx.scope, "token": 19, "highest": 20}
    assert missing.status_code == 428 and missing.json()["error"] == "fence_required"
    assert malformed.status_code == 400 and malformed.json()["error"] == "malformed_fence"
    assert invalid_body.status_code == 400  # the app's own answer, recorded like any other
    assert count_rows(fence_dsn, "example_cases", ctx.key("open")) == 1
    outcomes = {d["decision"] for d in receiver.decisions()}
    assert {"accepted", "mismatch", "stale", "missing", "malformed"} <= outcomes


def test_forged_or_unsigned_requests_cannot_lock_out_the_honest_writer(
    receivers: Receivers, fence_dsn: str
) -> None:
    receiver = receivers.start(secret=SECRET)
    honest = FakeContext(token=4, secret=SECRET)
    attacker = FakeContext(token=MAX_TOKEN, secret=b"guessed-secret")
    attacker.scope = honest.scope
    unsigned = FakeContext(token=MAX_TOKEN)
    unsigned.scope = honest.scope
    with httpx.Client(base_url=receiver.url, timeout=10) as client:
        forged = client.post("/cases", json={"title": "x"}, auth=FencedAuth(attacker, "evil"))
        bare = client.post("/cases", json={"title": "x"}, auth=FencedAuth(unsigned, "evil"))
        sent: Wire = {"method": "POST", "path": "/cases", "body": b'{"title":"x"}'}
        tampered_headers = {
            **honest.fence_headers("open", **sent),
            "X-Execution-Fence": str(MAX_TOKEN),
        }
        tampered = client.post("/cases", content=sent["body"], headers=tampered_headers)
        accepted = client.post("/cases", json={"title": "x"}, auth=FencedAuth(honest, "open"))
    assert SIGNATURE_HEADER in honest.fence_headers("open", **sent)
    for refused in (forged, bare, tampered):
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"] == "bad_signature"
    assert accepted.status_code == 201, accepted.text
    assert count_rows(fence_dsn, "example_cases", honest.key("evil")) == 0
    with SyncFenceGuard(fence_dsn, insecure=True) as guard:  # a reader only
        assert guard.highest_token(honest.scope) == 4  # the forged MAX_TOKEN left no mark
    refusals = [d for d in receiver.decisions() if d["decision"] == "bad_signature"]
    assert len(refusals) == 3


def test_a_restarted_receiver_replays_what_it_applied_before(
    receivers: Receivers, fence_dsn: str
) -> None:
    first_run = receivers.start()
    ctx = FakeContext(token=30)
    body = {"payment_id": "pay_restart", "amount_cents": 990}
    with httpx.Client(base_url=first_run.url, timeout=10) as client:
        applied = client.post("/payments/capture", json=body, auth=FencedAuth(ctx, "capture"))
    assert applied.status_code == 200
    first_run.kill()

    second_run = receivers.start(port=first_run.port, decision_log=first_run.decision_log)
    assert second_run.url == first_run.url
    with httpx.Client(base_url=second_run.url, timeout=10) as client:
        replayed = client.post("/payments/capture", json=body, auth=FencedAuth(ctx, "capture"))
    assert replayed.status_code == 200
    assert replayed.headers["x-idempotent-replay"] == "true"
    assert replayed.json() == applied.json()
    assert count_rows(fence_dsn, "example_payments", ctx.key("capture")) == 1
    decisions = second_run.decisions(ctx.key("capture"))
    assert [d["decision"] for d in decisions] == ["accepted", "replayed"]
    assert decisions[0]["pid"] != decisions[1]["pid"]
    wait_until(lambda: first_run.process.poll() is not None, message="first run still alive")


def test_captured_signed_headers_cannot_carry_another_request(
    receivers: Receivers, fence_dsn: str
) -> None:
    """Headers seen on the wire work for that request only: not on another path, method,
    query or body — before the honest request arrived, or after it was applied."""
    receiver = receivers.start(secret=SECRET)
    honest = FakeContext(token=6, secret=SECRET)
    captured: list[httpx.Headers] = []

    def wiretap(request: httpx.Request) -> None:
        captured.append(request.headers)

    title = b'{"title":"Refund"}'
    payment = b'{"payment_id":"pay_evil","amount_cents":100000}'
    elsewhere = [
        ("POST", "/payments/capture", payment),  # another path
        ("POST", "/cases", b'{"title":"Refund of everything"}'),  # another body
        ("PUT", "/cases", title),  # another method
        ("PATCH", "/cases", title),
        ("POST", "/cases?notify=all", title),  # another query
    ]
    with httpx.Client(
        base_url=receiver.url, timeout=10, event_hooks={"request": [wiretap]}
    ) as client:
        # the honest request's headers, captured in flight: signed over POST /cases and its body
        probe = client.build_request("POST", "/cases", content=title)
        flow = FencedAuth(honest, "open").auth_flow(probe)
        fence = {h.lower() for h in (KEY_HEADER, FENCE_HEADER, SCOPE_HEADER, SIGNATURE_HEADER)}
        stolen = {k: v for k, v in next(flow).headers.items() if k in fence}
        assert len(stolen) == 4 and stolen[SIGNATURE_HEADER.lower()].startswith("v2=")
        before = fence_tables(fence_dsn)
        early = [client.request(m, p, content=b, headers=stolen) for m, p, b in elsewhere]
        assert fence_tables(fence_dsn) == before  # no mark, no reservation, no response
        applied = client.post("/cases", content=title, auth=FencedAuth(honest, "open"))
        assert applied.status_code == 201, applied.text
        assert {k: captured[-1][k] for k in stolen} == stolen  # it sent the very same fence
        after_apply = fence_tables(fence_dsn)
        late = [client.request(m, p, content=b, headers=stolen) for m, p, b in elsewhere]
        assert fence_tables(fence_dsn) == after_apply  # the stored response did not change
        again = client.post("/cases", content=title, headers=stolen)
    for refused in early + late:
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"] == "bad_signature"
    assert again.status_code == 201 and again.headers["x-idempotent-replay"] == "true"
    assert count_rows(fence_dsn, "example_cases", honest.key("open")) == 1
    assert count_rows(fence_dsn, "example_payments", honest.key("open")) == 0
    with SyncFenceGuard(fence_dsn, insecure=True) as guard:  # a reader only
        assert guard.highest_token(honest.scope) == 6
    decisions = [d["decision"] for d in receiver.decisions(honest.key("open"))]
    assert decisions == ["bad_signature"] * 5 + ["accepted"] + ["bad_signature"] * 5 + ["replayed"]


def test_the_example_receiver_refuses_to_start_without_a_secret_or_insecure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        case_service.main(["--dsn", "dbname=unused", "--port", "0"])
    assert exited.value.code == 2
    assert "--secret-env" in capsys.readouterr().err
    with pytest.raises(FenceConfigError, match="insecure=True"):
        case_service.create_app("dbname=unused")
