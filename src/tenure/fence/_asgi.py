"""FenceMiddleware: the guard in front of any ASGI app (Starlette, FastAPI, ...).

``app.add_middleware(FenceMiddleware, guard=guard)`` is the whole setup. For
each write request (POST, PUT, PATCH, DELETE by default) the middleware:

1. parses the fence headers — none on a protected path is 428, a broken fence 400;
2. reads the body and fingerprints method, path, query string and body;
3. enters ``guard.fenced(...)`` — refusals become JSON errors (409 stale or in
   progress, 422 key reused for another request, 403 bad signature: a signed
   guard checks the signature over the fence, method, path, query and body);
4. replays a stored response with ``X-Idempotent-Replay: true``, or runs the
   app with the slot at ``scope["tenure.fence"]`` (a handler writes its effect
   through ``slot.conn`` to commit it with the record, see FenceSlot);
5. buffers the app's response and sends it only after the record committed, so
   a client never sees a success the receiver could still forget. Only a
   *final* answer is recorded (the guard's ``final_statuses``; a handler
   overrides it for one response with ``slot.final = True/False`` or an
   ``X-Fence-Final: true|false`` header, which is stripped). Any other answer
   — 5xx, 429, 401, 408, 404, ... — is sent but not recorded (released): the
   handler said "not done", so a retry with the same key must be able to do
   it. An exception rolls back.

Authentication belongs *outside* this middleware (added after it with
``add_middleware``, so it runs first): a request that fails it must never
reach the high-water mark or take a key.

Every decision is reported to ``on_decision`` (a FenceDecision) before the
response goes out, with the request's arrival time on both clocks.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from tenure._errors import StaleFence
from tenure._intercept import Interceptor, Interceptors

from ._core import FenceSlot, StoredResponse, fingerprint, split_final_declaration
from ._errors import BadSignature, FingerprintMismatch, MalformedFence, RequestInProgress
from ._guard import AsyncConn, FenceGuard
from ._signing import FenceHeaders, RequestDigest, parse_fence_headers

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SLOT_SCOPE_KEY = "tenure.fence"
REPLAY_HEADER = "X-Idempotent-Replay"

Outcome = Literal[
    "accepted",  # applied and recorded (committed before the response was sent)
    "replayed",  # the key was applied before; its stored response was sent again
    "stale",  # a higher token was already accepted for the scope
    "in_progress",  # the key's first application has not finished
    "mismatch",  # the key was used for a different request
    "bad_signature",
    "malformed",  # the fence headers are broken
    "missing",  # a protected path without fence headers
    "too_large",  # the body exceeds max_body_bytes
    "aborted",  # the app raised or answered 5xx: no response recorded (see FenceSlot)
    "released",  # the app's answer was not final (429, 401, ...): sent, not recorded
]

_HOP_BY_HOP = frozenset({"content-length", "transfer-encoding", "connection"})
_log = logging.getLogger("tenure.fence")


@dataclass(frozen=True, slots=True)
class FenceDecision:
    """One request's fate, for logs and metrics.

    ``arrived_monotonic`` is ``time.monotonic()`` when the request reached the
    middleware (comparable across processes of one host on Linux);
    ``arrived_wall`` is ``time.time()`` at the same moment.
    """

    outcome: Outcome
    status: int
    method: str
    path: str
    scope: str | None
    token: int | None
    key: str | None
    arrived_monotonic: float
    arrived_wall: float
    detail: str | None = None


class FenceMiddleware:
    """Pure ASGI middleware that fences write requests with a FenceGuard.

    ``required_paths`` are path prefixes whose write requests must carry a
    fence (default: all); on other paths a fence is checked if present.
    ``two_phase`` switches the guard to its two-phase mode for apps whose
    effect lives outside the guard's database (see tenure.fence._guard).
    ``interceptors`` (`tenure.telemetry.Interceptor`) wrap each fenced request and hear
    each verdict; `tenure.otel.instrument()` adds its tracer to every middleware's chain.
    """

    def __init__(
        self,
        app: ASGIApp,
        guard: FenceGuard,
        *,
        required_paths: Iterable[str] = ("/",),
        methods: Iterable[str] = ("POST", "PUT", "PATCH", "DELETE"),
        two_phase: bool = False,
        max_body_bytes: int = 1024 * 1024,
        on_decision: Callable[[FenceDecision], None] | None = None,
        interceptors: Sequence[Interceptor] = (),
    ) -> None:
        self.app = app
        self._interceptors = Interceptors(interceptors)
        self._guard = guard
        self._required = tuple(p.rstrip("/") + "/" for p in required_paths)
        self._methods = frozenset(m.upper() for m in methods)
        self._two_phase = two_phase
        self._max_body = max_body_bytes
        self._on_decision = on_decision

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in self._methods:
            await self.app(scope, receive, send)
            return
        chain = self._interceptors.chain()
        if chain is None:
            await self._fence(scope, receive, send)
        else:  # e.g. a span continuing the sender's trace (its traceparent), the app's inside
            await chain.fence_request(scope, functools.partial(self._fence, scope, receive, send))

    async def _fence(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrival = (time.monotonic(), time.time())
        try:
            fence = parse_fence_headers(
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in scope["headers"]
            )
        except MalformedFence as exc:
            await self._finish(scope, send, arrival, None, _malformed(exc))
            return
        if fence is None:
            if not self._is_required(scope["path"]):
                await self.app(scope, receive, send)
                return
            response = _json(428, {"error": "fence_required", "detail": "send the fence headers"})
            await self._finish(scope, send, arrival, None, _Verdict("missing", response))
            return
        body = await _read_body(receive, self._max_body)
        if body is _Unread.DISCONNECTED:  # nobody to answer, nothing decided
            return
        if body is _Unread.TOO_LARGE:
            response = _json(413, {"error": "body_too_large", "limit": self._max_body})
            await self._finish(scope, send, arrival, fence, _Verdict("too_large", response))
            return
        try:
            verdict = await self._guarded(scope, receive, fence, body)
        except Exception as exc:
            self._report(scope, arrival, fence, "aborted", 500, type(exc).__name__)
            raise
        await self._finish(scope, send, arrival, fence, verdict)

    async def _guarded(
        self, scope: Scope, receive: Receive, fence: FenceHeaders, body: bytes
    ) -> _Verdict:
        """Run the request in its slot; the slot's record commits before this returns."""
        query: bytes = scope.get("query_string", b"")
        target = scope["path"] + ("?" + query.decode("latin-1") if query else "")
        async with contextlib.AsyncExitStack() as stack:
            try:
                slot: FenceSlot[AsyncConn] = await stack.enter_async_context(
                    self._guard.fenced(
                        scope=fence.scope,
                        token=fence.token,
                        key=fence.key,
                        fingerprint=fingerprint(scope["method"], target, body),
                        signature=fence.signature,
                        digest=RequestDigest.from_parts(scope["method"], scope["path"], query, body)
                        if self._guard.signed
                        else None,
                        two_phase=self._two_phase,
                    )
                )
            except (StaleFence, RequestInProgress, FingerprintMismatch, BadSignature) as exc:
                return _refusal(exc)
            except MalformedFence as exc:
                return _malformed(exc)
            if slot.replay is not None:
                return _Verdict("replayed", slot.replay)
            scope[SLOT_SCOPE_KEY] = slot
            captured = await _capture(self.app, scope, _body_then(body, receive))
            response, declared = split_final_declaration(captured)
            if not slot.complete(response.status, response.body, response.headers, final=declared):
                if response.status >= 500:
                    return _Verdict("aborted", response, "the app answered 5xx; nothing recorded")
                detail = f"the app's {response.status} is not final; nothing recorded"
                return _Verdict("released", response, detail)
        return _Verdict("accepted", response)

    def _is_required(self, path: str) -> bool:
        return any((path.rstrip("/") + "/").startswith(prefix) for prefix in self._required)

    async def _finish(
        self,
        scope: Scope,
        send: Send,
        arrival: tuple[float, float],
        fence: FenceHeaders | None,
        verdict: _Verdict,
    ) -> None:
        """Report the decision, then send the response (recorded or not, it is final now)."""
        response = verdict.response
        self._report(scope, arrival, fence, verdict.outcome, response.status, verdict.detail)
        headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in response.headers
            if name.lower() not in _HOP_BY_HOP
        ]
        headers.append((b"content-length", str(len(response.body)).encode()))
        if verdict.outcome == "replayed":
            headers.append((REPLAY_HEADER.lower().encode(), b"true"))
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": response.body})

    def _report(
        self,
        scope: Scope,
        arrival: tuple[float, float],
        fence: FenceHeaders | None,
        outcome: Outcome,
        status: int,
        detail: str | None,
    ) -> None:
        chain = self._interceptors.chain()
        if chain is not None:
            scope_token = (None, None) if fence is None else (fence.scope, fence.token)
            chain.fence_decided(outcome, status, *scope_token)
        if self._on_decision is None:
            return
        decision = FenceDecision(
            outcome=outcome,
            status=status,
            method=scope["method"],
            path=scope["path"],
            scope=None if fence is None else fence.scope,
            token=None if fence is None else fence.token,
            key=None if fence is None else fence.key,
            arrived_monotonic=arrival[0],
            arrived_wall=arrival[1],
            detail=detail,
        )
        try:
            self._on_decision(decision)
        except Exception:  # the request's fate is already sealed; a broken log must not change it
            _log.exception("on_decision hook failed for %s", decision)


def _json(status: int, payload: dict[str, object]) -> StoredResponse:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return StoredResponse(status, body, (("content-type", "application/json"),))


class _Verdict(NamedTuple):
    outcome: Outcome
    response: StoredResponse
    detail: str | None = None


def _malformed(exc: MalformedFence) -> _Verdict:
    return _Verdict(
        "malformed", _json(400, {"error": "malformed_fence", "detail": str(exc)}), str(exc)
    )


def _refusal(exc: StaleFence | RequestInProgress | FingerprintMismatch | BadSignature) -> _Verdict:
    if isinstance(exc, StaleFence):
        payload = {"error": "stale_fence", "scope": exc.scope, "token": exc.token}
        response = _json(409, {**payload, "highest": exc.highest})
        return _Verdict("stale", response, str(exc))
    if isinstance(exc, RequestInProgress):
        response = _json(409, {"error": "in_progress", "key": exc.key})
        return _Verdict("in_progress", response, str(exc))
    if isinstance(exc, FingerprintMismatch):
        response = _json(422, {"error": "fingerprint_mismatch", "key": exc.key})
        return _Verdict("mismatch", response, str(exc))
    response = _json(403, {"error": "bad_signature", "detail": exc.reason})
    return _Verdict("bad_signature", response, exc.reason)


class _Unread(enum.Enum):
    TOO_LARGE = enum.auto()
    DISCONNECTED = enum.auto()


async def _read_body(receive: Receive, limit: int) -> bytes | _Unread:
    """The whole request body, or why there is none to fence."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return _Unread.DISCONNECTED
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return _Unread.TOO_LARGE
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _body_then(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body we already read, then the real channel."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _capture(app: ASGIApp, scope: Scope, receive: Receive) -> StoredResponse:
    """Run the app and keep its response instead of sending it (it is sent after the commit)."""
    status: int | None = None
    headers: list[tuple[str, str]] = []
    chunks: list[bytes] = []
    complete = False

    async def keep(message: Message) -> None:
        nonlocal status, complete
        if message["type"] == "http.response.start":
            status = int(message["status"])
            headers.extend(
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in message.get("headers", ())
                if name.decode("latin-1").lower() not in _HOP_BY_HOP
            )
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            complete = not message.get("more_body", False)

    await app(scope, receive, keep)
    if status is None or not complete:
        raise RuntimeError("the application returned without sending a complete response")
    return StoredResponse(status, b"".join(chunks), tuple(headers))
