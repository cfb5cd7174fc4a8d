"""Checks on what goes into and out of a job: JSON only, bounded size and depth.

Payloads are checked before anything is written, so bad input gets a typed
`PayloadError` and changes nothing. PostgreSQL's jsonb cannot hold NUL
characters and UTF-8 cannot hold lone surrogates; both are caught here rather
than surfacing as a driver error half-way through a batch.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from itertools import accumulate
from typing import Any

from ._errors import PayloadError

MAX_PAYLOAD_BYTES = 1 << 20
MAX_RESULT_BYTES = 4 << 20
MAX_DEPTH = 64
_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # a backslash and the byte it escapes
_STRING = re.compile(rb'"[^"]*"')  # once escapes are gone, a string has no quote inside
_NOT_BRACKET = bytes(set(range(256)) - set(b"[]{}"))
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def _check(value: Any, what: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise PayloadError(f"{what} is nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"{what} holds {value!r}, which JSON cannot represent")
        return
    if isinstance(value, str):
        if "\x00" in value:
            raise PayloadError(f"{what} holds a NUL character, which PostgreSQL jsonb refuses")
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check(item, what, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise PayloadError(f"{what} has a non-string key of type {type(key).__name__}")
            _check(key, what, depth + 1)
            _check(item, what, depth + 1)
        return
    raise PayloadError(f"{what} holds a {type(value).__name__}, which is not JSON")


def encode(value: Any, what: str = "payload", limit: int = MAX_PAYLOAD_BYTES) -> str:
    """Canonical JSON text of ``value``, or PayloadError saying what is wrong."""
    if value is None:
        return "null"  # most tools return nothing; this is a busy worker's every job
    _check(value, what, 0)
    try:
        text = json.dumps(
            value, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
        )
    except (ValueError, TypeError, RecursionError) as exc:
        # An integer past Python's 4,300-digit conversion limit, a subclass whose __str__
        # or __repr__ raises, a sort of keys that cannot be compared: not storable JSON.
        raise PayloadError(f"{what} cannot be written as JSON ({type(exc).__name__})") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise PayloadError(f"{what} holds text that is not valid Unicode ({exc.reason})") from None
    if size > limit:
        raise PayloadError(f"{what} is {size} bytes; the limit is {limit} bytes")
    return text


def decode(body: bytes, what: str = "payload", limit: int = MAX_PAYLOAD_BYTES) -> Any:
    """The JSON value of ``body`` (text from outside: a webhook's request), or PayloadError.

    Its size and its nesting are checked before it is parsed, so a body 100,000 brackets
    deep is refused in linear time instead of exhausting the parser's recursion. The
    value is then checked as `encode` checks one (NaN, NUL).
    """
    if len(body) > limit:
        raise PayloadError(f"{what} is {len(body)} bytes; the limit is {limit} bytes")
    depth = _depth(body)
    if depth > MAX_DEPTH:
        raise PayloadError(f"{what} is nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(body or b"null")
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise PayloadError(f"{what} is not JSON") from None
    _check(value, what, 0)
    return value


def _depth(body: bytes) -> int:
    """How deeply ``body``'s arrays and objects nest (exact for JSON; for text that is not,
    the parser stops at the first byte that breaks the grammar, before it nests deeper)."""
    brackets = _STRING.sub(b"", _ESCAPE.sub(b"", body)).translate(None, _NOT_BRACKET)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def fingerprint(text: str) -> str:
    """A digest of canonical JSON, used to tell a repeated enqueue from a different one."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
