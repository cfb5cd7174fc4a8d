"""The fence on the wire: header validation, signatures, fingerprints, exports (no database)."""

from __future__ import annotations

import hashlib
import hmac
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenure.fence
from tenure._errors import IdempotencyConflict, TenureError
from tenure.fence import (
    FENCE_HEADER,
    KEY_HEADER,
    SCOPE_HEADER,
    SIGNATURE_HEADER,
    BadSignature,
    FingerprintMismatch,
    MalformedFence,
    fence_headers,
    fingerprint,
    sign_fence,
    verify_signature,
)
from tenure.fence._core import FenceRequest, FenceSlot, StoredResponse
from tenure.fence._signing import MAX_TOKEN, parse_fence_headers

SECRET = b"receiver-secret"


def test_headers_carry_key_token_scope_and_a_signature_only_with_a_secret() -> None:
    plain = fence_headers("tool-job:7", 42, "tool-job:7:create_case")
    assert plain == {
        KEY_HEADER: "tool-job:7:create_case",
        FENCE_HEADER: "42",
        SCOPE_HEADER: "tool-job:7",
    }
    signed = fence_headers("tool-job:7", 42, "tool-job:7:create_case", SECRET)
    expected = hmac.new(
        SECRET, b"v1\ntool-job:7\n42\ntool-job:7:create_case", hashlib.sha256
    ).hexdigest()
    assert signed[SIGNATURE_HEADER] == f"v1={expected}"
    assert sign_fence(SECRET, "tool-job:7", 42, "tool-job:7:create_case") == f"v1={expected}"


@pytest.mark.parametrize("token", [0, -1, MAX_TOKEN + 1, True, 1.0, "5", None])
def test_tokens_outside_a_positive_bigint_are_refused(token: object) -> None:
    with pytest.raises(MalformedFence):
        fence_headers("tool-job:1", token, "tool-job:1:op")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "label", ["", "x" * 201, "tab\there", "new\nline", "ünïcode", " padded", "padded ", "\x7f"]
)
def test_scopes_and_keys_must_survive_an_http_header_unchanged(label: str) -> None:
    with pytest.raises(MalformedFence):
        fence_headers(label, 1, "tool-job:1:op")
    with pytest.raises(MalformedFence):
        fence_headers("tool-job:1", 1, label)


def test_malformed_fence_is_also_a_value_error_for_callers() -> None:
    assert issubclass(MalformedFence, ValueError)
    assert issubclass(MalformedFence, TenureError)
    assert issubclass(FingerprintMismatch, IdempotencyConflict)


@pytest.mark.parametrize("text", ["0", "-5", "+5", " 5", "5 ", "1_000", "05", "٣", "9" * 20])
def test_header_tokens_are_parsed_strictly(text: str) -> None:
    with pytest.raises(MalformedFence):
        parse_fence_headers([(KEY_HEADER, "k"), (FENCE_HEADER, text), (SCOPE_HEADER, "s")])


def test_header_parsing_is_case_insensitive_and_refuses_partial_or_repeated_fences() -> None:
    assert parse_fence_headers([("accept", "*/*")]) is None
    parsed = parse_fence_headers(
        [("idempotency-key", "k"), ("x-execution-fence", str(MAX_TOKEN)), ("X-FENCE-SCOPE", "s")]
    )
    assert parsed is not None
    assert (parsed.scope, parsed.token, parsed.key, parsed.signature) == ("s", MAX_TOKEN, "k", None)
    with pytest.raises(MalformedFence, match="missing X-Fence-Scope"):
        parse_fence_headers([(KEY_HEADER, "k"), (FENCE_HEADER, "1")])
    with pytest.raises(MalformedFence, match="more than once"):
        parse_fence_headers(
            [(KEY_HEADER, "k"), (FENCE_HEADER, "1"), (FENCE_HEADER, "2"), (SCOPE_HEADER, "s")]
        )


def test_signatures_bind_scope_token_and_key() -> None:
    signature = sign_fence(SECRET, "tool-job:1", 5, "tool-job:1:op")
    verify_signature(SECRET, "tool-job:1", 5, "tool-job:1:op", signature)
    verify_signature([b"new-secret", SECRET], "tool-job:1", 5, "tool-job:1:op", signature)
    for scope, token, key in [
        ("tool-job:2", 5, "tool-job:1:op"),
        ("tool-job:1", 6, "tool-job:1:op"),
        ("tool-job:1", 5, "tool-job:1:other"),
    ]:
        with pytest.raises(BadSignature, match="does not match"):
            verify_signature(SECRET, scope, token, key, signature)
    with pytest.raises(BadSignature, match="not signed"):
        verify_signature(SECRET, "tool-job:1", 5, "tool-job:1:op", None)
    with pytest.raises(BadSignature, match="not of the form"):
        verify_signature(SECRET, "tool-job:1", 5, "tool-job:1:op", "v2=" + "0" * 64)
    with pytest.raises(BadSignature, match="does not match"):
        verify_signature(b"other", "tool-job:1", 5, "tool-job:1:op", signature)


@given(
    st.sampled_from(["POST", "PUT"]),
    st.text(max_size=20),
    st.binary(max_size=40),
    st.text(max_size=20),
    st.binary(max_size=40),
)
def test_fingerprints_differ_whenever_path_or_body_differ(
    method: str, path_a: str, body_a: bytes, path_b: str, body_b: bytes
) -> None:
    same = (path_a, body_a) == (path_b, body_b)
    assert (fingerprint(method, path_a, body_a) == fingerprint(method, path_b, body_b)) == same


def test_fingerprint_covers_the_method_and_is_stable() -> None:
    assert fingerprint("post", "/cases", b"{}") == fingerprint("POST", "/cases", b"{}")
    assert fingerprint("POST", "/cases", b"{}") != fingerprint("PUT", "/cases", b"{}")
    # moving bytes between path and body must not collide
    assert fingerprint("POST", "/a", b"bc") != fingerprint("POST", "/ab", b"c")


def test_a_slot_refuses_misuse() -> None:
    request = FenceRequest(scope="s", token=1, key="k", fingerprint="f")
    replayed = FenceSlot[object](request, StoredResponse(200, b"", ()), object())
    with pytest.raises(RuntimeError, match="already applied"):
        replayed.complete(200)
    assert replayed.closing_plan() is None
    fresh = FenceSlot[object](request, None, None)
    with pytest.raises(RuntimeError, match="two-phase"):
        _ = fresh.conn
    with pytest.raises(RuntimeError, match="without complete"):
        fresh.closing_plan()
    with pytest.raises(ValueError, match=r"100\.\.599"):
        fresh.complete(42)
    fresh.complete(201, b"{}")
    with pytest.raises(RuntimeError, match="already called"):
        fresh.release()


def test_exports_are_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(tenure.fence).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(tenure.fence.__all__) == public | tenure.fence._LAZY
    assert len(tenure.fence.__all__) == len(set(tenure.fence.__all__))
