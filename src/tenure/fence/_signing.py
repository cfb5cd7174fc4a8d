"""The fence headers on the wire: names, validation, and the optional HMAC signature.

Both sides import this module, so a sender cannot build a header the receiver
would refuse: tokens are positive 63-bit integers (one PostgreSQL bigint
sequence), scopes and keys are 1-200 printable ASCII characters without
surrounding spaces (HTTP strips them, which would break the signature).

The signature binds scope, token and key together —
``HMAC-SHA256(secret, "v1\\n{scope}\\n{token}\\n{key}")`` — so a leaked
request cannot be replayed with a bigger token or under another scope.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ._errors import BadSignature, MalformedFence

KEY_HEADER = "Idempotency-Key"
FENCE_HEADER = "X-Execution-Fence"
SCOPE_HEADER = "X-Fence-Scope"
SIGNATURE_HEADER = "X-Fence-Signature"

MAX_TOKEN = 2**63 - 1
MAX_LABEL_LENGTH = 200

_TOKEN_TEXT = re.compile(r"[1-9][0-9]{0,18}")
_SIGNATURE_TEXT = re.compile(r"v1=([0-9a-f]{64})")


@dataclass(frozen=True, slots=True)
class FenceHeaders:
    """The fence a request carries, validated (the signature is checked by the guard)."""

    scope: str
    token: int
    key: str
    signature: str | None


def check_token(token: object) -> int:
    """Return ``token`` if it is a positive int that fits a bigint; bools are not tokens."""
    if type(token) is not int or not 1 <= token <= MAX_TOKEN:
        raise MalformedFence(f"fencing token must be an integer in 1..2**63-1, got {token!r}")
    return token


def check_label(what: str, value: object) -> str:
    """Return ``value`` if it can travel as a scope or key header unchanged."""
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_LABEL_LENGTH
        or any(not " " <= ch <= "~" for ch in value)
        or value != value.strip(" ")
    ):
        raise MalformedFence(
            f"{what} must be 1-{MAX_LABEL_LENGTH} printable ASCII characters "
            f"without leading or trailing spaces, got {value!r}"
        )
    return value


def parse_token(text: str) -> int:
    """Parse a header's decimal token strictly: no sign, spaces, underscores or leading zeros."""
    if not _TOKEN_TEXT.fullmatch(text):
        raise MalformedFence(
            f"{FENCE_HEADER} must be a positive decimal integer, got {text[:40]!r}"
        )
    return check_token(int(text))


def _message(scope: str, token: int, key: str) -> bytes:
    return f"v1\n{scope}\n{token}\n{key}".encode()


def sign_fence(secret: bytes, scope: str, token: int, key: str) -> str:
    """The ``X-Fence-Signature`` value, ``v1=<hex>``, for one fenced request."""
    if not isinstance(secret, bytes) or not secret:
        raise MalformedFence("the fence secret must be non-empty bytes")
    message = _message(check_label("scope", scope), check_token(token), check_label("key", key))
    return "v1=" + hmac.new(secret, message, hashlib.sha256).hexdigest()


def fence_headers(scope: str, token: int, key: str, secret: bytes | None = None) -> dict[str, str]:
    """The headers a worker sends with a side effect; signed when a secret is given."""
    headers = {
        KEY_HEADER: check_label("key", key),
        FENCE_HEADER: str(check_token(token)),
        SCOPE_HEADER: check_label("scope", scope),
    }
    if secret is not None:
        headers[SIGNATURE_HEADER] = sign_fence(secret, scope, token, key)
    return headers


def verify_signature(
    secrets: bytes | Sequence[bytes], scope: str, token: int, key: str, signature: str | None
) -> None:
    """Raise BadSignature unless ``signature`` was made with one of ``secrets``.

    Several secrets let a receiver rotate: accept old and new until every
    sender has the new one. Comparison is constant-time.
    """
    if signature is None:
        raise BadSignature("the request is not signed")
    match = _SIGNATURE_TEXT.fullmatch(signature.strip().lower())
    if match is None:
        raise BadSignature("the signature is not of the form v1=<64 hex digits>")
    candidates = [secrets] if isinstance(secrets, bytes) else list(secrets)
    message = _message(scope, token, key)
    valid = False
    for secret in candidates:  # no early exit: timing must not tell which secret matched
        expected = hmac.new(secret, message, hashlib.sha256).hexdigest()
        valid |= hmac.compare_digest(expected, match.group(1))
    if not valid:
        raise BadSignature("the signature does not match scope, token and key")


def parse_fence_headers(headers: Iterable[tuple[str, str]]) -> FenceHeaders | None:
    """Read the fence from request headers (names in any case).

    None means the request carries no fence at all (the caller decides whether
    that is allowed); a partial, repeated or invalid fence is MalformedFence.
    """
    wanted = {h.lower(): h for h in (KEY_HEADER, FENCE_HEADER, SCOPE_HEADER, SIGNATURE_HEADER)}
    found: dict[str, str] = {}
    for name, value in headers:
        canonical = wanted.get(name.lower())
        if canonical is None:
            continue
        if canonical in found:
            raise MalformedFence(f"{canonical} appears more than once")
        found[canonical] = value
    if not found:
        return None
    missing = [h for h in (KEY_HEADER, FENCE_HEADER, SCOPE_HEADER) if h not in found]
    if missing:
        raise MalformedFence(f"incomplete fence: missing {', '.join(missing)}")
    return FenceHeaders(
        scope=check_label("scope", found[SCOPE_HEADER]),
        token=parse_token(found[FENCE_HEADER]),
        key=check_label("key", found[KEY_HEADER]),
        signature=found.get(SIGNATURE_HEADER),
    )
