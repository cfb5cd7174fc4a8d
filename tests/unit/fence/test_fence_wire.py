"""The fence on the wire: header validation, signatures, fingerprints, exports (no database)."""

from __future__ import annotations

import hashlib
import hmac
import types
from urllib.parse import quote, unquote

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.integration.fence.helpers import Wire

import tenure.fence
from tenure._errors import IdempotencyConflict, TenureError
from tenure.fence import (
    FENCE_HEADER,
    KEY_HEADER,
    SCOPE_HEADER,
    SIGNATURE_HEADER,
    BadSignature,
    FenceConfigError,
    FingerprintMismatch,
    MalformedFence,
    RequestDigest,
    fence_headers,
    fingerprint,
    sign_fence,
    verify_signature,
)
from tenure.fence._core import FenceRequest, FenceSlot, StoredResponse
from tenure.fence._signing import MAX_TOKEN, parse_fence_headers, sign_fence_v1

SECRET = b"receiver-secret"
BODY = b'{"title":"Refund"}'
SCOPE, KEY = "tool-job:1", "tool-job:1:op"


def hand_made_v2(secret: bytes, fence: str, method: str, target: bytes, body: bytes) -> str:
    """The v2 signature computed from its documented definition, not from the kit's code."""
    message = f"v2\n{fence}\n{method}\n".encode() + target + b"\n"
    message += hashlib.sha256(body).hexdigest().encode()
    return "v2=" + hmac.new(secret, message, hashlib.sha256).hexdigest()


def request(method: str = "POST", url: str = "/cases", body: bytes = BODY) -> RequestDigest:
    return RequestDigest.from_url(method, url, body)


def test_headers_carry_key_token_scope_and_a_signature_only_with_a_secret() -> None:
    plain = fence_headers("tool-job:7", 42, "tool-job:7:create_case")
    assert plain == {
        KEY_HEADER: "tool-job:7:create_case",
        FENCE_HEADER: "42",
        SCOPE_HEADER: "tool-job:7",
    }
    on_the_wire: Wire = {"method": "post", "path": "http://cases.internal/cases?x=1", "body": BODY}
    signed = fence_headers("tool-job:7", 42, "tool-job:7:create_case", SECRET, **on_the_wire)
    fence = "tool-job:7\n42\ntool-job:7:create_case"
    expected = hand_made_v2(SECRET, fence, "POST", b"/cases?x=1", BODY)
    assert signed[SIGNATURE_HEADER] == expected
    assert sign_fence(SECRET, "tool-job:7", 42, "tool-job:7:create_case", **on_the_wire) == expected


@pytest.mark.parametrize("missing", ["method", "path", "body"])
def test_a_signed_fence_without_its_request_is_a_clear_error(missing: str) -> None:
    parts: dict[str, object] = {"method": "POST", "path": "/cases", "body": BODY}
    del parts[missing]
    with pytest.raises(MalformedFence, match=f"pass {missing} to fence_headers"):
        fence_headers(SCOPE, 1, KEY, SECRET, **parts)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("method", "url"), [("GET /", "/cases"), ("POST", "cases"), ("POST", "http://[::1")]
)
def test_an_unsignable_request_is_malformed(method: str, url: str) -> None:
    with pytest.raises(MalformedFence):
        sign_fence(SECRET, SCOPE, 1, KEY, method=method, path=url, body=b"")


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


def test_signatures_bind_the_fence_and_the_request_it_travels_with() -> None:
    signature = sign_fence(SECRET, SCOPE, 5, KEY, method="POST", path="/cases", body=BODY)
    verify_signature(SECRET, SCOPE, 5, KEY, signature, request())
    verify_signature([b"new-secret", SECRET], SCOPE, 5, KEY, signature, request())
    for scope, token, key, other in [
        ("tool-job:2", 5, KEY, request()),
        (SCOPE, 6, KEY, request()),
        (SCOPE, 5, "tool-job:1:other", request()),
        (SCOPE, 5, KEY, request(method="PUT")),
        (SCOPE, 5, KEY, request(url="/payments/capture")),
        (SCOPE, 5, KEY, request(url="/cases?dry_run=0")),
        (SCOPE, 5, KEY, request(url="/cases/")),
        (SCOPE, 5, KEY, request(body=BODY + b" ")),
        (SCOPE, 5, KEY, request(body=b"")),
    ]:
        with pytest.raises(BadSignature, match="does not match"):
            verify_signature(SECRET, scope, token, key, signature, other)
    with pytest.raises(BadSignature, match="does not match"):
        verify_signature(b"other", SCOPE, 5, KEY, signature, request())
    with pytest.raises(BadSignature, match="not signed"):
        verify_signature(SECRET, SCOPE, 5, KEY, None, request())
    with pytest.raises(FenceConfigError, match="method, path and body"):
        verify_signature(SECRET, SCOPE, 5, KEY, signature)  # a receiver that forgot the request


@pytest.mark.parametrize(
    "mangle",
    [
        str.upper,  # V2=ABC...: the format is exact, not case-insensitive
        lambda s: s[:3] + s[3:].upper(),
        lambda s: " " + s,
        lambda s: s + " ",
        lambda s: s[:-1],
        lambda s: s + "0",
        lambda s: "v3" + s[2:],
        lambda s: s[3:],
        lambda s: f"{s},{s}",
        lambda s: "",
    ],
)
def test_signature_text_is_exact(mangle: object) -> None:
    signature = sign_fence(SECRET, SCOPE, 5, KEY, method="POST", path="/cases", body=BODY)
    with pytest.raises(BadSignature, match="not of the form"):
        verify_signature(SECRET, SCOPE, 5, KEY, mangle(signature), request())  # type: ignore[operator]


def test_v1_signatures_are_refused_unless_the_upgrade_window_is_open() -> None:
    old = sign_fence_v1(SECRET, SCOPE, 5, KEY)
    expected = hmac.new(SECRET, f"v1\n{SCOPE}\n5\n{KEY}".encode(), hashlib.sha256).hexdigest()
    assert old == f"v1={expected}"
    with pytest.raises(BadSignature, match="v1 signatures"):
        verify_signature(SECRET, SCOPE, 5, KEY, old, request())
    verify_signature(SECRET, SCOPE, 5, KEY, old, request(), accept_v1=True)
    verify_signature(SECRET, SCOPE, 5, KEY, old, None, accept_v1=True)  # v1 needs no request
    with pytest.raises(BadSignature, match="does not match"):
        verify_signature(SECRET, SCOPE, 6, KEY, old, request(), accept_v1=True)


def test_the_signed_target_is_canonical_and_a_path_cannot_pose_as_a_query() -> None:
    # the receiver sees the decoded path (ASGI scope["path"]) and the raw query bytes
    assert request(url="/cases?x=1").target == b"/cases?x=1"
    assert request(url="http://h:8080/cases").target == b"/cases"
    assert RequestDigest.from_parts("post", "/c\u00e4se", b"", b"").target == b"/c%C3%A4se"
    assert request(url="/c%C3%A4se") == RequestDigest.from_parts("POST", "/c\u00e4se", b"", BODY)
    assert request(url="/a%3Fb").target != request(url="/a?b").target
    assert request(url="/a%0Ab").target == b"/a%0Ab"  # no raw newline in the message


@given(
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30),
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
    st.binary(max_size=40),
)
def test_the_sender_and_the_receiver_agree_on_any_url(
    path: str, params: dict[str, str], body: bytes
) -> None:
    """What httpx sends, decoded as uvicorn decodes it, gives the digest the sender signed."""
    url = httpx.URL("http://receiver.internal/" + quote(path), params=params)
    wire_path, _, wire_query = url.raw_path.partition(b"?")
    decoded = unquote(wire_path.decode("ascii"))  # what uvicorn puts in scope["path"]
    received = RequestDigest.from_parts("POST", decoded, wire_query, body)
    assert RequestDigest.from_url("POST", str(url), body) == received


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
    assert fresh.complete(201, b"{}") is True
    with pytest.raises(RuntimeError, match="already called"):
        fresh.release()
    with pytest.raises(RuntimeError, match="already called"):
        fresh.final = False


@pytest.mark.parametrize(
    ("status", "declared", "recorded"),
    [
        (200, None, True),
        (201, None, True),
        (204, None, True),
        (303, None, True),
        (400, None, True),
        (410, None, True),
        (422, None, True),
        *((status, None, False) for status in (301, 307, 401, 403, 404, 405, 407, 408)),
        *((status, None, False) for status in (409, 412, 425, 429, 500, 502, 503, 504)),
        (201, False, False),  # the app says: nothing was done after all
        (404, True, True),  # the app says: this resource will never exist
        (503, True, True),  # the app knows the outside effect happened
    ],
)
def test_only_final_answers_are_recorded(
    status: int, declared: bool | None, recorded: bool
) -> None:
    request = FenceRequest(scope="s", token=1, key="k", fingerprint="f")
    by_argument = FenceSlot[object](request, None, None)
    assert by_argument.complete(status, b"{}", final=declared) is recorded
    assert by_argument.released is not recorded
    by_attribute = FenceSlot[object](request, None, None)
    by_attribute.final = declared
    assert by_attribute.complete(status, b"{}") is recorded
    plan = by_attribute.closing_plan()
    assert plan is not None
    assert next(plan).query == ("complete_request" if recorded else "release_request")


def test_final_declarations_must_be_booleans() -> None:
    slot = FenceSlot[object](FenceRequest(scope="s", token=1, key="k", fingerprint="f"), None, None)
    with pytest.raises(TypeError):
        slot.final = "yes"  # type: ignore[assignment]
    with pytest.raises(TypeError):
        slot.complete(200, final=1)  # type: ignore[arg-type]
    assert not slot.released and slot.final is None
    slot.final = False
    with pytest.raises(RuntimeError, match="contradicts"):
        slot.complete(200, final=True)
    assert slot.complete(200, final=False) is False  # agreeing twice is fine


def test_exports_are_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(tenure.fence).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(tenure.fence.__all__) == public | tenure.fence._LAZY
    assert len(tenure.fence.__all__) == len(set(tenure.fence.__all__))
