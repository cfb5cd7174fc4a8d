"""The fence headers on the wire: names, validation, and the HMAC signature.

Both sides import this module, so a sender cannot build a header the receiver
would refuse: tokens are positive 63-bit integers (one PostgreSQL bigint
sequence), scopes and keys are 1-200 printable ASCII characters without
surrounding spaces (HTTP strips them, which would break the signature).

The signature (``v2=<hex>``) binds the fence to the request that carries it::

    HMAC-SHA256(secret, "v2\n{scope}\n{token}\n{key}\n{METHOD}\n{target}\n{sha256(body)}")

so a captured header set cannot be replayed with a bigger token, under another
scope, on another path or query, with another method or with another body.
``target`` is the request's path, decoded (what ASGI's ``scope["path"]`` and
httpx's ``URL.path`` hold) and percent-encoded again in one canonical way, then
``?`` and the raw query string when there is one: a proxy that re-encodes the
path cannot break it, and a ``%3F`` in the path cannot pose as a query. Every
field before ``target`` is free of newlines and the body's hash has a fixed
length, so no two requests share a message.

``v1`` (scope, token and key only) is what tenure signed before; a guard
refuses it unless told ``accept_v1_signatures=True`` for an upgrade window.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack
from urllib.parse import quote

import httpx

from ._errors import BadSignature, FenceConfigError, MalformedFence

KEY_HEADER = "Idempotency-Key"
FENCE_HEADER = "X-Execution-Fence"
SCOPE_HEADER = "X-Fence-Scope"
SIGNATURE_HEADER = "X-Fence-Signature"

MAX_TOKEN = 2**63 - 1
MAX_LABEL_LENGTH = 200

_TOKEN_TEXT = re.compile(r"[1-9][0-9]{0,18}")
# Strict on purpose: exactly one version tag and 64 lower-case hex digits, nothing around.
_SIGNATURE_TEXT = re.compile(r"(v[12])=([0-9a-f]{64})")
_METHOD_TEXT = re.compile(r"[A-Z]{1,20}")


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


class SentRequest(TypedDict, total=False):
    """The request a signed fence travels with, as ``fence_headers(...)`` keywords.

    ``method``; ``path``: the URL, or the path with its query, as sent
    (percent-encoded); ``body``: the exact bytes sent.
    """

    method: str
    path: str
    body: bytes


@dataclass(frozen=True, slots=True)
class RequestDigest:
    """What a v2 signature binds besides the fence: method, canonical target, body hash.

    Build it on the receiving side with :meth:`from_parts` (the decoded path
    your framework gives you and the raw query bytes), on the sending side with
    :meth:`from_url` (the URL or path as it goes on the wire).
    """

    method: str
    target: bytes
    body_sha256: str

    @classmethod
    def from_parts(cls, method: str, path: str, query: bytes, body: bytes) -> RequestDigest:
        """``path`` decoded (ASGI ``scope["path"]``, Flask ``request.path``); ``query`` raw."""
        verb = method.upper()
        if not _METHOD_TEXT.fullmatch(verb):
            raise MalformedFence(f"an HTTP method is 1-20 letters, got {method[:40]!r}")
        if not path.startswith("/"):
            raise MalformedFence(f"a signed request's path must start with '/', got {path[:40]!r}")
        target = quote(path, safe="/", errors="surrogateescape").encode("ascii")
        if query:
            target += b"?" + bytes(query)
        return cls(verb, target, hashlib.sha256(body).hexdigest())

    @classmethod
    def from_url(cls, method: str, url: str, body: bytes) -> RequestDigest:
        """``url``: a full URL or a path with its query, percent-encoded as sent."""
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError) as exc:
            raise MalformedFence(f"cannot sign a request to {url[:80]!r}: {exc}") from None
        return cls.from_parts(method, parsed.path, parsed.query, body)

    def message(self, scope: str, token: int, key: str) -> bytes:
        """The bytes a v2 signature is computed over (see the module docstring)."""
        head = f"v2\n{scope}\n{token}\n{key}\n{self.method}\n".encode()
        return head + self.target + b"\n" + self.body_sha256.encode()


def _message_v1(scope: str, token: int, key: str) -> bytes:
    return f"v1\n{scope}\n{token}\n{key}".encode()


def _hmac(secret: bytes, message: bytes) -> str:
    if not isinstance(secret, bytes) or not secret:
        raise MalformedFence("the fence secret must be non-empty bytes")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def sign_fence(
    secret: bytes, scope: str, token: int, key: str, *, method: str, path: str, body: bytes
) -> str:
    """The ``X-Fence-Signature`` value, ``v2=<hex>``, for one fenced request.

    ``path`` is the URL or the path with its query as sent; ``body`` the exact bytes.
    """
    check_label("scope", scope)
    check_token(token)
    check_label("key", key)
    digest = RequestDigest.from_url(method, path, body)
    return "v2=" + _hmac(secret, digest.message(scope, token, key))


def sign_fence_v1(secret: bytes, scope: str, token: int, key: str) -> str:
    """The old ``v1=<hex>`` signature (scope, token, key only): for tests of the upgrade window."""
    message = _message_v1(check_label("scope", scope), check_token(token), check_label("key", key))
    return "v1=" + _hmac(secret, message)


def fence_headers(
    scope: str, token: int, key: str, secret: bytes | None = None, **request: Unpack[SentRequest]
) -> dict[str, str]:
    """The headers a worker sends with a side effect; signed when a secret is given.

    A signature covers the request itself, so with a secret ``method``, ``path``
    (the URL, or the path with its query, as sent) and ``body`` (the exact bytes
    sent) are required. httpx users never call this: ``FencedAuth`` /
    ``ctx.http_auth(op)`` read all three from the request.
    """
    headers = {
        KEY_HEADER: check_label("key", key),
        FENCE_HEADER: str(check_token(token)),
        SCOPE_HEADER: check_label("scope", scope),
    }
    if secret is not None:
        method, path, body = request.get("method"), request.get("path"), request.get("body")
        if method is None or path is None or body is None:
            missing = [name for name in ("method", "path", "body") if request.get(name) is None]
            raise MalformedFence(
                "a signed fence covers the request it travels with: pass "
                f"{', '.join(missing)} to fence_headers() (the exact method, URL or path "
                "with query, and body bytes sent), or send through FencedAuth / "
                "ctx.http_auth(op), which read them from the request"
            )
        headers[SIGNATURE_HEADER] = sign_fence(
            secret, scope, token, key, method=method, path=path, body=body
        )
    return headers


def verify_signature(
    secrets: bytes | Sequence[bytes],
    scope: str,
    token: int,
    key: str,
    signature: str | None,
    digest: RequestDigest | None = None,
    *,
    accept_v1: bool = False,
) -> None:
    """Raise BadSignature unless ``signature`` was made with one of ``secrets``.

    A v2 signature is checked against ``digest`` (the request that carried it);
    a v1 one only if ``accept_v1``. Several secrets let a receiver rotate:
    accept old and new until every sender has the new one. Comparison is
    constant-time.
    """
    if signature is None:
        raise BadSignature("the request is not signed")
    match = _SIGNATURE_TEXT.fullmatch(signature)
    if match is None:
        raise BadSignature("the signature is not of the form v2=<64 lower-case hex digits>")
    version, given = match.groups()
    if version == "v1":
        if not accept_v1:
            raise BadSignature(
                "v1 signatures cover scope, token and key only and are refused; "
                "the sender must sign v2 (method, path and body too)"
            )
        message = _message_v1(scope, token, key)
    elif digest is None:
        raise FenceConfigError(
            "a v2 signature covers the request: give the guard its method, path and body "
            "(fenced(..., digest=RequestDigest.from_parts(...)))"
        )
    else:
        message = digest.message(scope, token, key)
    candidates = [secrets] if isinstance(secrets, bytes) else list(secrets)
    valid = False
    for secret in candidates:  # no early exit: timing must not tell which secret matched
        valid |= hmac.compare_digest(_hmac(secret, message), given)
    if not valid:
        raise BadSignature(
            "the signature does not match this request's scope, token, key, method, path and body"
        )


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
