"""Hostile fence headers against a real receiver: every one is a typed 4xx that changes nothing.

The receiver is the example case service (FenceMiddleware, a signed FenceGuard,
effects in the same transaction) under uvicorn on loopback, on the run's real
PostgreSQL. An honest owner has taken the scope with token 5 and applied one
key first, so a refusal that slipped through would show: a raised high-water
mark, a new reservation, a changed stored response or a new case. Header values
go out as raw bytes (non-ASCII, duplicates and all) through a real HTTP client
and server; the only thing left out is what HTTP itself cannot carry (NUL,
CR/LF, leading or trailing blanks, which the server strips).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from tests.integration.fence.helpers import fence_tables, serve, unique

from tenure.examples.case_service import create_app
from tenure.fence import (
    FENCE_HEADER,
    KEY_HEADER,
    SCOPE_HEADER,
    SIGNATURE_HEADER,
    FencedAuth,
    fence_headers,
    sign_fence,
)
from tenure.fence._signing import MAX_TOKEN, sign_fence_v1

SECRET = b"hostile-corpus-secret"
SCOPE = unique("tool-job")  # one job for the whole corpus; the honest owner holds token 5
HONEST_TOKEN = 5
KEY = f"{SCOPE}:open"  # a key nobody applied yet: the prize
DONE = f"{SCOPE}:done"  # a key the honest owner applied
PATH = "/cases"
BODY = b'{"title":"Hostile"}'
TYPED_ERRORS = {"malformed_fence", "bad_signature", "fence_required"}

Headers = list[tuple[bytes, bytes]]


def signed(
    token: int = HONEST_TOKEN + 1,
    *,
    scope: str = SCOPE,
    key: str = KEY,
    method: str = "POST",
    path: str = PATH,
    body: bytes = BODY,
    secret: bytes = SECRET,
) -> str:
    return sign_fence(secret, scope, token, key, method=method, path=path, body=body)


def fence(
    token: str | bytes = str(HONEST_TOKEN + 1),
    *,
    scope: str | bytes = SCOPE,
    key: str | bytes = KEY,
    signature: str | bytes | None = None,
) -> Headers:
    """A fence with any of its parts replaced; signed correctly for token 6 unless told."""
    if signature is None:
        signature = signed()
    parts = [(KEY_HEADER, key), (FENCE_HEADER, token), (SCOPE_HEADER, scope)]
    parts.append((SIGNATURE_HEADER, signature))
    return [(n.encode(), v.encode() if isinstance(v, str) else v) for n, v in parts]


def without(*names: str) -> Headers:
    drop = {n.lower().encode() for n in names}
    return [(n, v) for n, v in fence() if n.lower() not in drop]


def twice(name: str, second: bytes | None = None) -> Headers:
    """``name`` sent twice: once as in the valid fence, then again (the same or ``second``)."""
    headers = fence()
    value = next(v for n, v in headers if n == name.encode())
    return [*headers, (name.lower().encode(), value if second is None else second)]


@dataclass(frozen=True)
class Case:
    name: str
    headers: Headers
    status: int
    error: str
    method: str = "POST"
    path: str = PATH
    body: bytes = BODY


def malformed(name: str, headers: Headers) -> Case:
    return Case(name, headers, 400, "malformed_fence")


def forged(name: str, headers: Headers, **request: Any) -> Case:
    return Case(name, headers, 403, "bad_signature", **request)


def hand_signature(version: str, digest: str) -> bytes:
    return f"{version}={digest}".encode()


GOOD = signed()
GOOD_HEX = GOOD.removeprefix("v2=")

TOKENS: list[str | bytes] = [
    str(2**63),  # one past a bigint
    "9" * 19,
    "9" * 40,
    "0",
    "-1",
    "-9223372036854775807",
    "+6",
    "6.0",
    "5.5",
    "1e3",
    "0x10",
    "0b110",
    "0o7",
    "006",
    "05",
    "6 6",
    "6\t6",
    "6_0",
    "inf",
    "NaN",
    "six",
    "",
    "\u0666".encode(),  # ARABIC-INDIC DIGIT SIX, as UTF-8
    "\uff16".encode(),  # FULLWIDTH DIGIT SIX
    b"6\xff",
]

CORPUS: list[Case] = [
    # -- forged huge tokens, well-formed: only the signature stands in the way
    forged("max-token-unsigned", fence(str(MAX_TOKEN))[:3]),
    forged("max-token-honest-signature", fence(str(MAX_TOKEN), signature=signed(HONEST_TOKEN))),
    forged(
        "max-token-guessed-secret",
        fence(str(MAX_TOKEN), signature=signed(MAX_TOKEN, secret=b"guessed")),
    ),
    forged(
        "max-token-signature-of-another-scope",
        fence(str(MAX_TOKEN), signature=signed(MAX_TOKEN, scope="tool-job:1")),
    ),
    # -- tokens that are no token
    *(malformed(f"token-{i}:{token!r}", fence(token)) for i, token in enumerate(TOKENS)),
    # -- scopes and keys that cannot be a fence
    malformed("scope-non-ascii", fence(scope="tool-j\u00f6b:1".encode())),
    malformed("scope-latin1-byte", fence(scope=b"tool-job:\xff")),
    malformed("scope-emoji", fence(scope="tool-job:\U0001f4a3".encode())),
    malformed("scope-overlong", fence(scope="s" * 201)),
    malformed("scope-8k", fence(scope="s" * 8000)),
    malformed("scope-empty", fence(scope="")),
    malformed("scope-inner-tab", fence(scope="tool-job\t1")),
    malformed("key-non-ascii", fence(key=f"{SCOPE}:\u00f6ffnen".encode())),
    malformed("key-overlong", fence(key="k" * 201)),
    malformed("key-8k", fence(key="k" * 8000)),
    malformed("key-empty", fence(key="")),
    malformed("key-inner-tab", fence(key=f"{SCOPE}:\topen")),
    # -- a header twice (the same value, another value, another spelling of the name)
    malformed("token-twice-same", twice(FENCE_HEADER)),
    malformed("token-twice-lower-then-higher", twice(FENCE_HEADER, str(MAX_TOKEN).encode())),
    malformed("key-twice", twice(KEY_HEADER, DONE.encode())),
    malformed("scope-twice", twice(SCOPE_HEADER, b"tool-job:1")),
    malformed("signature-twice-same", twice(SIGNATURE_HEADER)),
    malformed("signature-twice-other", twice(SIGNATURE_HEADER, b"v2=" + b"0" * 64)),
    # -- signatures of the wrong version, length or case
    forged("signature-missing", without(SIGNATURE_HEADER)),
    forged("signature-empty", fence(signature=b"")),
    forged("signature-v1-valid", fence(signature=sign_fence_v1(SECRET, SCOPE, 6, KEY))),
    forged("signature-v0", fence(signature=hand_signature("v0", GOOD_HEX))),
    forged("signature-v3", fence(signature=hand_signature("v3", GOOD_HEX))),
    forged("signature-no-version", fence(signature=GOOD_HEX)),
    forged("signature-63-hex", fence(signature=GOOD[:-1])),
    forged("signature-65-hex", fence(signature=GOOD + "0")),
    forged("signature-128-hex", fence(signature=GOOD + GOOD_HEX)),
    forged("signature-upper-hex", fence(signature="v2=" + GOOD_HEX.upper())),
    forged("signature-upper-version", fence(signature="V2=" + GOOD_HEX)),
    forged("signature-inner-space", fence(signature="v2= " + GOOD_HEX)),
    forged("signature-comma-list", fence(signature=f"{GOOD},{GOOD}")),
    forged("signature-not-hex", fence(signature="v2=" + "g" * 64)),
    forged("signature-base64", fence(signature="v2=" + "A" * 43 + "=")),
    forged(
        "signature-sha1",
        fence(signature="v2=" + hmac.new(SECRET, b"x", hashlib.sha1).hexdigest()),
    ),
    forged("signature-non-ascii", fence(signature="v2=\u00e9".encode())),
    # -- a valid signature, for another request
    forged("signature-for-another-body", fence(), body=b'{"title":"Other"}'),
    forged("signature-for-an-empty-body", fence(), body=b""),
    forged("signature-for-another-path", fence(), path="/payments/capture"),
    forged("signature-for-another-query", fence(), path="/cases?x=1"),
    forged("signature-for-a-trailing-slash", fence(), path="/cases/"),
    forged("signature-for-another-method", fence(), method="PUT"),
    forged("signature-for-another-token", fence("7")),
    forged("signature-for-another-key", fence(key=f"{SCOPE}:other")),
    forged("signature-for-another-scope", fence(scope=unique("tool-job"))),
    forged("signature-for-the-applied-key", fence(key=DONE)),
    # -- missing pieces
    malformed("only-token", [(FENCE_HEADER.encode(), b"6")]),
    malformed("only-key", [(KEY_HEADER.encode(), KEY.encode())]),
    malformed("only-scope", [(SCOPE_HEADER.encode(), SCOPE.encode())]),
    malformed("only-signature", [(SIGNATURE_HEADER.encode(), GOOD.encode())]),
    malformed("no-scope", without(SCOPE_HEADER)),
    malformed("no-token", without(FENCE_HEADER)),
    malformed("no-key", without(KEY_HEADER)),
    Case("no-fence-at-all", [], 428, "fence_required"),
]


def everything(dsn: str) -> tuple[object, ...]:
    """The receiver's fence tables and its effects: what no hostile request may change."""
    with psycopg.connect(dsn) as conn:
        cases = conn.execute("SELECT count(*), max(id) FROM example_cases").fetchone()
        payments = conn.execute("SELECT count(*), max(id) FROM example_payments").fetchone()
    return (*fence_tables(dsn), cases, payments)


class Honest:
    """The scope's rightful owner: a FenceSource with token 5 that signs with the secret."""

    token = HONEST_TOKEN

    def fence_headers(self, operation: str, **request: Any) -> dict[str, str]:
        return fence_headers(SCOPE, self.token, f"{SCOPE}:{operation}", SECRET, **request)

    def ensure_owned(self) -> None:
        """Owned: this owner is live."""


@pytest.fixture(scope="module")
def receiver(database_dsn: str) -> Iterator[httpx.Client]:
    """The signed example receiver, with the honest owner's first effect already applied."""
    with (
        serve(create_app(database_dsn, secret=SECRET)) as url,
        httpx.Client(base_url=url, timeout=10) as client,
    ):
        first = client.post(PATH, content=BODY, auth=FencedAuth(Honest(), "done"))
        assert first.status_code == 201, first.text
        yield client


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_a_hostile_fence_is_a_typed_4xx_and_changes_nothing(
    receiver: httpx.Client, database_dsn: str, case: Case
) -> None:
    before = everything(database_dsn)
    response = receiver.request(case.method, case.path, content=case.body, headers=case.headers)
    assert response.status_code == case.status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"] == case.error
    assert case.error in TYPED_ERRORS
    assert everything(database_dsn) == before


def test_the_corpus_is_not_refused_for_a_reason_of_its_own(receiver: httpx.Client) -> None:
    """The same client, path and body with an honest fence is accepted: the corpus tests the
    headers, not a broken set-up."""
    key = f"{SCOPE}:control"
    headers = fence(str(HONEST_TOKEN), key=key, signature=signed(HONEST_TOKEN, key=key))
    response = receiver.post(PATH, content=BODY, headers=headers)
    assert response.status_code == 201, response.text


def test_an_insecure_receiver_still_refuses_malformed_fences_but_trusts_any_token(
    database_dsn: str,
) -> None:
    """What ``insecure=True`` does not defend against, shown: the README's warning is real."""
    malformed_cases = [case for case in CORPUS if case.error == "malformed_fence"]
    scope = unique("tool-job")
    with (
        serve(create_app(database_dsn, insecure=True)) as url,
        httpx.Client(base_url=url, timeout=10) as client,
    ):
        for case in malformed_cases:
            before = everything(database_dsn)
            response = client.post(PATH, content=BODY, headers=case.headers)
            assert (response.status_code, response.json()["error"]) == (400, "malformed_fence")
            assert everything(database_dsn) == before, case.name
        squatter = fence_headers(scope, MAX_TOKEN, f"{scope}:open")
        assert client.post(PATH, content=BODY, headers=squatter).status_code == 201
        honest = fence_headers(scope, HONEST_TOKEN, f"{scope}:open")
        locked_out = client.post(PATH, content=BODY, headers=honest)
    assert locked_out.status_code == 409 and locked_out.json()["error"] == "stale_fence"
