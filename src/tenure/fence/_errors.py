"""The receiver kit's own refusals, grafted onto tenure's one error tree.

    TenureError
    ├── ConfigError
    │   └── FenceConfigError      a guard that cannot be safe as configured  (also ValueError)
    ├── IdempotencyConflict
    │   └── FingerprintMismatch   a key reused for a different request      HTTP 422
    ├── StaleFence                (core) a token below the scope's highest   HTTP 409
    ├── RequestInProgress         the key's first application is unfinished  HTTP 409
    ├── BadSignature              missing, malformed or forged signature     HTTP 403
    └── MalformedFence            unusable token, scope or key (ValueError)   HTTP 400

FingerprintMismatch is an IdempotencyConflict, not a Conflict: it says "this
key already names another request" (the caller has a bug), while Conflict
means "you no longer own this transition". RequestInProgress is neither: the
sender should simply ask again later with the same key.
"""

from __future__ import annotations

from tenure._errors import ConfigError, IdempotencyConflict, TenureError


class FenceConfigError(ConfigError, ValueError):
    """The guard's options cannot work, or would silently trust every caller.

    Raised when the guard is built, so a receiver that would run
    unauthenticated by accident does not start at all; and when a signed guard
    is asked to judge a request without its method, path and body (a receiver
    bug: the signature covers them).
    """


class MalformedFence(TenureError, ValueError):
    """A token, scope, key or header that cannot be a fence (also a ValueError for callers)."""


class BadSignature(TenureError):
    """The guard holds a secret and the request's signature is missing, malformed or wrong.

    Checked before the high-water mark is touched: a forged huge token must not
    lock honest writers out of their own scope.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"fence signature rejected: {reason}")
        self.reason = reason


class FingerprintMismatch(IdempotencyConflict):
    """The idempotency key was first used for a request with another method, path, body or scope."""

    def __init__(self, key: str) -> None:
        super().__init__(f"idempotency key {key!r} was already used for a different request")
        self.key = key


class RequestInProgress(TenureError):
    """The key's first application has not finished; never start a second one.

    Raised for a concurrent duplicate in two-phase mode (or one that waited
    longer than the guard's lock timeout) and for a two-phase reservation whose
    effect crashed with an unknown outcome.
    """

    def __init__(self, key: str) -> None:
        super().__init__(f"idempotency key {key!r} is still being applied; ask again later")
        self.key = key
