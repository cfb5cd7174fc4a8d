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

from ._errors import FenceConfigError, FingerprintMismatch, RequestInProgress
from ._signing import RequestDigest, check_label, check_token, verify_signature

Row = Mapping[str, Any]

FINAL_HEADER = "X-Fence-Final"

# The answers a guard records (and replays to every later duplicate of the key)
# unless the application says otherwise. A recorded answer is forever: the key
# is stable across attempts, so recording "not now" means "never". Final are
# the answers that say the effect happened (2xx; 303 points at its result) and
# those that are a function of the request alone, which the fingerprint pins:
# 400 (unparseable), 422 (invalid content), 410 (gone for good). Not final,
# though they are 4xx: 404/405 (a route missing on one replica during a
# rolling deploy, a resource not yet visible), 409/412 (the target's current
# state, which changes), and everything in TRANSIENT_STATUSES.
FINAL_STATUSES = frozenset(range(200, 300)) | frozenset({303, 400, 410, 422})

# "Not now" or "not you" — never "done". A guard-wide option cannot make these
# final; a single response can (slot.final = True, or X-Fence-Final: true) when
# the application knows its effect happened.
TRANSIENT_STATUSES = frozenset({401, 403, 407, 408, 425, 429}) | frozenset(range(500, 600))


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
    ends, if it is final), or :meth:`release` if nothing was applied and a
    retry may apply it. Raising out of the block rolls back (single-phase) or
    leaves the reservation ``in_progress`` (two-phase: the outcome is unknown).

    Whether an answer is final is the guard's ``final_statuses`` unless the
    application says so for this one response: ``slot.final = True/False``
    (the middleware's handler sets it on the slot in its scope), or
    ``complete(..., final=...)``.
    """

    __slots__ = (
        "_conn",
        "_final",
        "_final_statuses",
        "_released",
        "_response",
        "replay",
        "request",
        "two_phase",
    )

    def __init__(
        self,
        request: FenceRequest,
        replay: StoredResponse | None,
        conn: ConnT | None,
        final_statuses: frozenset[int] = FINAL_STATUSES,
    ) -> None:
        self.request = request
        self.replay = replay
        self.two_phase = conn is None
        self._conn = conn
        self._response: StoredResponse | None = None
        self._released = False
        self._final: bool | None = None
        self._final_statuses = final_statuses

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

    @property
    def final(self) -> bool | None:
        """The application's word on this response: final (record it) or not; None: by status."""
        return self._final

    @final.setter
    def final(self, value: bool | None) -> None:
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"slot.final is True, False or None, got {value!r}")
        self._check_open()
        self._final = value

    def complete(
        self,
        status: int,
        body: bytes = b"",
        headers: Iterable[tuple[str, str]] = (),
        *,
        final: bool | None = None,
    ) -> bool:
        """Record the response every later duplicate of this key will get — if it is final.

        An answer that is not final (by default 401, 403, 404, 409, 429, 5xx, ...:
        anything outside FINAL_STATUSES) is *released* instead, exactly like
        :meth:`release`: nothing is recorded, a single-phase transaction rolls
        back (with the effect written through ``conn``), and the next request
        with this key runs the effect. Returns True if the response is recorded.
        ``final`` and ``slot.final`` may both be given only if they agree.
        """
        self._check_open()
        if not 100 <= status <= 599:
            raise ValueError(f"HTTP status must be in 100..599, got {status}")
        if final is not None and not isinstance(final, bool):
            raise TypeError(f"final is True, False or None, got {final!r}")
        if None not in (final, self._final) and final != self._final:
            raise RuntimeError(f"final={final} contradicts slot.final={self._final}")
        declared = self._final if final is None else final
        if not (status in self._final_statuses if declared is None else declared):
            self._released = True
            return False
        self._response = StoredResponse(status, bytes(body), tuple(headers))
        return True

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


def split_final_declaration(
    response: StoredResponse,
) -> tuple[StoredResponse, bool | None]:
    """The response without its ``X-Fence-Final`` header, and what that header declared.

    The header is the application's word to the middleware, never the
    client's business, so it is neither sent nor stored. A value other than
    ``true``/``false`` is an application bug and raises.
    """
    declared: bool | None = None
    kept: list[tuple[str, str]] = []
    for name, value in response.headers:
        if name.lower() != FINAL_HEADER.lower():
            kept.append((name, value))
            continue
        word = value.strip().lower()
        if word not in ("true", "false") or declared is not None:
            raise RuntimeError(f"{FINAL_HEADER} must appear once, as true or false, got {value!r}")
        declared = word == "true"
    return StoredResponse(response.status, response.body, tuple(kept)), declared


@dataclass(frozen=True, slots=True)
class GuardPolicy:
    """A guard's options, validated once: who may write, which answers are final."""

    secrets: tuple[bytes, ...]
    final_statuses: frozenset[int]
    accept_v1: bool
    lock_timeout_ms: int | None

    @classmethod
    def build(
        cls,
        *,
        secret: bytes | Sequence[bytes] | None,
        insecure: bool,
        final_statuses: Iterable[int],
        accept_v1_signatures: bool,
        lock_timeout: float | None,
    ) -> GuardPolicy:
        if lock_timeout is not None and not lock_timeout > 0:
            raise FenceConfigError(
                f"lock_timeout must be positive seconds or None, got {lock_timeout}"
            )
        secrets = _secrets_tuple(secret)
        if not secrets and insecure is not True:
            raise FenceConfigError(
                "a fence guard needs secret=... (the workers' TENURE_SIGNING_KEY): without "
                "one, anyone who can reach this receiver can lock a job out with a forged "
                "huge X-Execution-Fence or take its predictable idempotency key first. Pass "
                "insecure=True only behind authentication that runs before the fence "
                '(see docs/guides/receivers.md, "Insecure mode")'
            )
        if secrets and insecure:
            raise FenceConfigError("secret=... and insecure=True contradict each other")
        if accept_v1_signatures and not secrets:
            raise FenceConfigError("accept_v1_signatures=True needs a secret to check them with")
        lock_ms = None if lock_timeout is None else max(1, round(lock_timeout * 1000))
        return cls(secrets, _final_set(final_statuses), accept_v1_signatures, lock_ms)

    def request(
        self,
        scope: str,
        token: int,
        key: str,
        fingerprint: str,
        signature: str | None,
        digest: RequestDigest | None,
    ) -> FenceRequest:
        """Validate the fence and, if signed, its signature — before any database work."""
        request = FenceRequest(scope=scope, token=token, key=key, fingerprint=fingerprint)
        if self.secrets:
            verify_signature(
                self.secrets, scope, token, key, signature, digest, accept_v1=self.accept_v1
            )
        return request

    def admit(self, request: FenceRequest) -> Plan[StoredResponse | None]:
        return admit(request, self.lock_timeout_ms)

    def slot(
        self, request: FenceRequest, replay: StoredResponse | None, conn: ConnT | None
    ) -> FenceSlot[ConnT]:
        return FenceSlot(request, replay, conn, self.final_statuses)


def _secrets_tuple(secret: bytes | Sequence[bytes] | None) -> tuple[bytes, ...]:
    """Normalise the guard's secret option; empty secrets are a configuration bug."""
    if secret is None:
        return ()
    found = (secret,) if isinstance(secret, bytes) else tuple(secret)
    if not found or any(not isinstance(s, bytes) or not s for s in found):
        raise FenceConfigError("fence secrets must be non-empty bytes")
    return found


def _final_set(statuses: Iterable[int]) -> frozenset[int]:
    """A guard's final statuses: answers in 200..499, none that only says "not now"."""
    found = frozenset(statuses)
    wrong = [
        s for s in found if type(s) is not int or not 200 <= s <= 499 or s in TRANSIENT_STATUSES
    ]
    if wrong:
        raise FenceConfigError(
            f"final_statuses may hold 200..499 except {sorted(TRANSIENT_STATUSES)[:6]} "
            f"and 5xx, got {sorted(map(repr, wrong))}: a recorded answer is replayed to "
            "every later attempt, so one that means 'not now' would stop the effect forever "
            "(declare single responses final with slot.final or the X-Fence-Final header)"
        )
    return found
