"""The guard's decisions, written once and free of I/O.

Each operation is a *plan*: a generator that yields the named statement it
needs next (a :class:`Step`) and receives that statement's first row (or
None). The async and sync guards only drive plans over their connection, so
the rules below — stale or not, replay or mismatch, what to write at the end —
exist in exactly one copy (the same trick psycopg uses for its own protocol).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

import psycopg.errors

from tenure._errors import Conflict, StaleFence

from ._errors import FingerprintMismatch, RequestInProgress
from ._signing import check_label, check_token

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Step:
    """One named statement of ``queries.sql`` with its bound parameters."""

    query: str
    params: Mapping[str, object]


T = TypeVar("T")
Plan = Generator[Step, Row | None, T]


@dataclass(frozen=True, slots=True)
class FenceRequest:
    """What the guard judges: who sends (scope, token), which effect (key), what exactly."""

    scope: str
    token: int
    key: str
    fingerprint: str

    def __post_init__(self) -> None:
        check_label("scope", self.scope)
        check_token(self.token)
        check_label("key", self.key)
        check_label("fingerprint", self.fingerprint)


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """The response recorded for a key, replayed verbatim to every later duplicate."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class OperationRecord:
    """What the receiver knows about one key — for a sender whose outcome is unknown."""

    key: str
    scope: str
    token: int
    status: str  # 'in_progress' or 'completed'
    response_status: int | None
    created_at: datetime
    completed_at: datetime | None


def fingerprint(method: str, path: str, body: bytes) -> str:
    """SHA-256 over method, path (with query string, if any) and body.

    Method and path are length-prefixed so no choice of path and body can
    collide with another split of the same bytes.
    """
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode("utf-8", "surrogateescape")):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    digest.update(body)
    return digest.hexdigest()


def admit(request: FenceRequest, lock_timeout_ms: int | None) -> Plan[StoredResponse | None]:
    """Check the fence and reserve the key; return the stored response to replay, if any.

    Runs inside one transaction. ``raise_mark`` locks the scope's row until
    that transaction ends, so requests of one scope are judged (and, in
    single-phase mode, applied) one at a time: a concurrent duplicate waits and
    then finds the first one's completed record. Every refusal raises, and the
    caller's rollback leaves no trace of it.
    """
    try:
        if lock_timeout_ms is not None:
            yield Step("set_lock_timeout", {"lock_timeout": f"{lock_timeout_ms}ms"})
        mark = yield Step("raise_mark", {"scope": request.scope, "token": request.token})
        assert mark is not None
        if request.token < mark["highest_token"]:
            raise StaleFence(request.scope, request.token, mark["highest_token"])
        claimed = yield Step(
            "claim_key",
            {
                "key": request.key,
                "scope": request.scope,
                "token": request.token,
                "fingerprint": request.fingerprint,
            },
        )
    except psycopg.errors.LockNotAvailable as exc:
        raise RequestInProgress(request.key) from exc
    if claimed is not None:
        return None
    existing = yield Step("get_request", {"key": request.key})
    if existing is None:  # claim_key saw the row, so only a concurrent purge removes it
        raise RequestInProgress(request.key)
    return judge_existing(request, existing)


def judge_existing(request: FenceRequest, row: Row) -> StoredResponse:
    """A key seen before: the same request gets its stored response, anything else is refused."""
    if row["fingerprint"] != request.fingerprint or row["scope"] != request.scope:
        raise FingerprintMismatch(request.key)
    if row["status"] != "completed":
        raise RequestInProgress(request.key)
    return StoredResponse(
        status=row["response_status"],
        body=bytes(row["response_body"]),
        headers=tuple((str(name), str(value)) for name, value in row["response_headers"]),
    )


def lookup(key: str) -> Plan[OperationRecord | None]:
    """The stored state of a key, for ``GET /operations/{key}``-style status checks."""
    row = yield Step("get_request", {"key": key})
    if row is None:
        return None
    return OperationRecord(
        key=row["idempotency_key"],
        scope=row["scope"],
        token=row["token"],
        status=row["status"],
        response_status=row["response_status"],
        created_at=row["created_at"],
        completed_at=row["completed_at"],
    )


def highest_token(scope: str) -> Plan[int | None]:
    """The scope's high-water mark, or None if the scope was never seen."""
    row = yield Step("get_scope", {"scope": scope})
    return None if row is None else int(row["highest_token"])


ConnT = TypeVar("ConnT")


class FenceSlot(Generic[ConnT]):
    """One admitted request, handed to the code that applies its effect.

    If ``replay`` is set, the key was already applied: return that response
    and do nothing else. Otherwise apply the effect and call
    :meth:`complete` with the response (it is written when the ``with`` block
    ends), or :meth:`release` if nothing was applied and a retry may apply it.
    Raising out of the block rolls back (single-phase) or leaves the
    reservation ``in_progress`` (two-phase: the outcome is unknown).
    """

    __slots__ = ("_conn", "_released", "_response", "replay", "request", "two_phase")

    def __init__(
        self,
        request: FenceRequest,
        replay: StoredResponse | None,
        conn: ConnT | None,
    ) -> None:
        self.request = request
        self.replay = replay
        self.two_phase = conn is None
        self._conn = conn
        self._response: StoredResponse | None = None
        self._released = False

    @property
    def conn(self) -> ConnT:
        """The connection whose open transaction also records this request.

        Write the effect through it and both commit or neither does. Use a
        nested ``conn.transaction()`` (a savepoint) around statements that may
        fail, or the whole transaction is lost with them.
        """
        if self._conn is None:
            raise RuntimeError(
                "a two-phase slot has no shared transaction: its effect lives outside "
                "this database (use the single-phase mode to write in the same transaction)"
            )
        return self._conn

    @property
    def released(self) -> bool:
        return self._released

    def complete(
        self, status: int, body: bytes = b"", headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        """Record the response every later duplicate of this key will get."""
        self._check_open()
        if not 100 <= status <= 599:
            raise ValueError(f"HTTP status must be in 100..599, got {status}")
        self._response = StoredResponse(status, bytes(body), tuple(headers))

    def release(self) -> None:
        """Declare that nothing was applied: record nothing and let a retry apply the key."""
        self._check_open()
        self._released = True

    def _check_open(self) -> None:
        if self.replay is not None:
            raise RuntimeError("this key was already applied; return slot.replay instead")
        if self._response is not None or self._released:
            raise RuntimeError("complete() or release() was already called on this slot")

    def closing_plan(self) -> Plan[None] | None:
        """What to write when the block ends cleanly (None: nothing, just commit)."""
        if self.replay is not None:
            return None
        if self._released:
            return _finish("release_request", self._key_params())
        if self._response is None:
            raise RuntimeError(
                f"fenced block for key {self.request.key!r} ended without complete() or release()"
            )
        return _finish(
            "complete_request",
            {
                **self._key_params(),
                "response_status": self._response.status,
                "response_headers": json.dumps([list(h) for h in self._response.headers]),
                "response_body": self._response.body,
            },
        )

    def _key_params(self) -> dict[str, object]:
        return {"key": self.request.key, "token": self.request.token}


def _finish(query: str, params: Mapping[str, object]) -> Plan[None]:
    row = yield Step(query, params)
    if row is None:  # zero rows is never ignored: someone removed our reservation
        raise Conflict(
            f"the reservation of idempotency key {params['key']!r} (token {params['token']}) "
            "is gone; the response was not recorded"
        )


def secrets_tuple(secret: bytes | Sequence[bytes] | None) -> tuple[bytes, ...]:
    """Normalise the guard's secret option; empty secrets are a configuration bug."""
    if secret is None:
        return ()
    found = (secret,) if isinstance(secret, bytes) else tuple(secret)
    if not found or any(not isinstance(s, bytes) or not s for s in found):
        raise ValueError("fence secrets must be non-empty bytes")
    return found
