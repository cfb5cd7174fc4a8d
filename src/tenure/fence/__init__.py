"""tenure.fence — the receiver kit: reject stale owners, replay repeated requests.

It runs inside the service that receives side effects, on that service's own
PostgreSQL. Per scope (a job) it keeps the highest fencing token accepted; per
idempotency key, the request's fingerprint and the response that was sent.

Receiver::

    migrate_fence(dsn)                       # once per start; idempotent
    guard = FenceGuard(dsn, secret=b"...")   # or insecure=True behind your own authentication
    app.add_middleware(FenceMiddleware, guard=guard)
    app.add_middleware(YourAuthentication)   # added last = runs first, before the fence

Sender (a tool with tenure's Context, or any FenceSource)::

    client.post(url, json=..., auth=FencedAuth(ctx, "create_case"))

Telemetry (metrics, log lines and journal rows of the receiver's decisions)::

    observer = FenceObserver(journal_dsn=..., receiver="cases")
    app.add_middleware(FenceMiddleware, guard=guard, on_decision=observer)

`FenceObserver` is imported on first use: it needs prometheus-client and
Starlette, which a receiver that does not ask for it never loads.

Module map (these modules import tenure's error tree, its event log and the store's
migration runner and SQL parser, nothing of the worker side):

    _core       the guard's decisions, free of I/O: each operation a plan of named steps
    _guard      FenceGuard / SyncFenceGuard: drive those plans on the receiver's database
    _asgi       FenceMiddleware: the guard in front of any ASGI app
    _httpx      FencedAuth: the sending side (headers on, ownership checked, then send)
    _signing    the fence headers on the wire: names, validation, the HMAC signature
    _errors     the kit's own refusals, on tenure's error tree
    _schema     the kit's named statements (queries.sql) and migrations (migrations/*.sql)
    _observer   FenceObserver: the receiver's decisions as metrics, log lines and journal rows
                (stale_fence_rejected), on tenure's journal writer and metrics
"""

import typing as _typing

from ._asgi import FenceDecision, FenceMiddleware
from ._core import (
    FINAL_HEADER,
    FINAL_STATUSES,
    TRANSIENT_STATUSES,
    FenceSlot,
    OperationRecord,
    StoredResponse,
    fingerprint,
)
from ._errors import (
    BadSignature,
    FenceConfigError,
    FingerprintMismatch,
    MalformedFence,
    RequestInProgress,
)
from ._guard import FenceGuard, SyncFenceGuard
from ._httpx import FencedAuth, FenceSource, raise_for_fence
from ._schema import migrate_fence
from ._signing import (
    FENCE_HEADER,
    KEY_HEADER,
    SCOPE_HEADER,
    SIGNATURE_HEADER,
    RequestDigest,
    fence_headers,
    sign_fence,
    verify_signature,
)

if _typing.TYPE_CHECKING:
    from ._observer import FenceObserver as FenceObserver

# Exported, but imported only when first asked for (PEP 562).
_LAZY = frozenset({"FenceObserver"})

__all__ = [
    "FENCE_HEADER",
    "FINAL_HEADER",
    "FINAL_STATUSES",
    "KEY_HEADER",
    "SCOPE_HEADER",
    "SIGNATURE_HEADER",
    "TRANSIENT_STATUSES",
    "BadSignature",
    "FenceConfigError",
    "FenceDecision",
    "FenceGuard",
    "FenceMiddleware",
    "FenceObserver",
    "FenceSlot",
    "FenceSource",
    "FencedAuth",
    "FingerprintMismatch",
    "MalformedFence",
    "OperationRecord",
    "RequestDigest",
    "RequestInProgress",
    "StoredResponse",
    "SyncFenceGuard",
    "fence_headers",
    "fingerprint",
    "migrate_fence",
    "raise_for_fence",
    "sign_fence",
    "verify_signature",
]


def __getattr__(name: str) -> object:
    if name == "FenceObserver":
        from ._observer import FenceObserver

        return FenceObserver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
