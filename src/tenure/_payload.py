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
from typing import Any

from ._errors import PayloadError

MAX_PAYLOAD_BYTES = 1 << 20
MAX_RESULT_BYTES = 4 << 20
MAX_DEPTH = 64


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


def fingerprint(text: str) -> str:
    """A digest of canonical JSON, used to tell a repeated enqueue from a different one."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
