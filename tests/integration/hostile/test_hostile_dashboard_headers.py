"""Hostile HTTP input to the dashboard: a clean 4xx every time, nothing shown, nothing changed.

The corpus is sent to the real app on a real uvicorn on loopback, backed by a real
PostgreSQL: DNS-rebinding Host headers, non-ASCII and overlong bearer tokens, cookies
and CSRF fields, forged, tampered, expired and logged-out session cookies, cross-origin
POSTs, odd methods, huge query strings, path traversal into the static files and job
ids that are not ids. Every case must get the status it names (a 4xx; a page that needs
a sign-in may answer 303 to /login instead), never a 500, never a body with what the
request should not see; and the jobs table and the journal are byte-for-byte unchanged,
so no cancel or retry slipped through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from starlette.applications import Starlette
from tests.integration.store.helpers import new_job
from tests.support.schemas import fresh_schema_dsn

from tenure._dashboard._dashboard import MAX_FORM_BYTES, _Sessions, create_dashboard
from tenure._observe._http import ServerThread
from tenure._store import Store, migrate

TOKEN = "hostile-dashboard-token-0123456789"
OWNER = "w-hostile"
# What a refused answer must never contain: job rows, the journal, a form's CSRF token.
SECRET_MARKS = (OWNER, "data-job", "tenure_", "<table", 'name="csrf"', "lease")
SESSION = "tenure_session"


@dataclass
class Board:
    """The servers under attack and what a signed-in operator would hold."""

    dsn: str
    urls: dict[str, str]
    values: dict[str, str] = field(default_factory=dict)

    def fill(self, text: str) -> str:
        return text.format(**self.values)


async def _jobs(dsn: str) -> tuple[int, int]:
    """A running job (the cancel target) and a cancelled one (the retry target)."""
    store = Store(dsn, max_size=1)
    await store.open()
    try:
        running = await store.enqueue(new_job("running", tool="victim"))
        await store.claim(OWNER, {"victim": 3_600_000}, 1)
        ended = await store.enqueue(new_job("ended", tool="victim"))
        await store.cancel(ended.id)
        return running.id, ended.id
    finally:
        await store.close()


def _sign_in(url: str) -> tuple[str, str]:
    """A session cookie and its CSRF token, as a browser would get them."""
    with httpx.Client(base_url=url, timeout=10) as client:
        assert client.post("/login", data={"token": TOKEN, "next": "/"}).status_code == 303
        page = client.get("/").text
        csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        return client.cookies[SESSION], csrf


@pytest.fixture(scope="module")
def board(database_dsn: str) -> Iterator[Board]:
    dsn = fresh_schema_dsn(database_dsn, "hostile_dash")
    migrate(dsn)
    running, ended = asyncio.run(_jobs(dsn))
    short: Starlette = create_dashboard(dsn, access_token=TOKEN)
    short.state.sessions = _Sessions(TOKEN, seconds=0.0)  # every session expires at once
    servers = {
        "open": ServerThread(create_dashboard(dsn), "127.0.0.1", 0),
        "locked": ServerThread(create_dashboard(dsn, access_token=TOKEN), "127.0.0.1", 0),
        "short": ServerThread(short, "127.0.0.1", 0),
    }
    try:
        urls = {name: server.start() for name, server in servers.items()}
        cookie, csrf = _sign_in(urls["locked"])
        revoked, revoked_csrf = _sign_in(urls["locked"])
        with httpx.Client(base_url=urls["locked"], cookies={SESSION: revoked}) as client:
            assert client.post("/logout", data={"csrf": revoked_csrf}).status_code == 303
        expired, expired_csrf = _sign_in_expired(urls["short"])
        sid, _, mac = cookie.rpartition(".")
        values = {
            "running": str(running),
            "ended": str(ended),
            "cookie": cookie,
            "csrf": csrf,
            "revoked": revoked,
            "revoked_csrf": revoked_csrf,
            "expired": expired,
            "expired_csrf": expired_csrf,
            "tampered_mac": f"{sid}.{mac[:-1]}{'0' if mac[-1] != '0' else '1'}",
            "tampered_sid": f"{sid[:-1]}{'A' if sid[-1] != 'A' else 'B'}.{mac}",
            "old_format": f"{sid}.1700000000.{mac}",
        }
        values.update({f"{name}_port": str(urlsplit(url).port) for name, url in urls.items()})
        yield Board(dsn, urls, values)
    finally:
        for server in servers.values():
            server.stop()


def _sign_in_expired(url: str) -> tuple[str, str]:
    """A cookie the short-lived board signed (valid MAC, but its session already ended)."""
    with httpx.Client(base_url=url, timeout=10) as client:
        response = client.post("/login", data={"token": TOKEN, "next": "/"})
        assert response.status_code == 303
        return client.cookies[SESSION], "0" * 64


def _state(dsn: str) -> tuple[list[Any], list[Any]]:
    with psycopg.connect(dsn) as conn:
        jobs = conn.execute("SELECT * FROM tenure_jobs ORDER BY id").fetchall()
        events = conn.execute("SELECT * FROM tenure_events ORDER BY id").fetchall()
    return jobs, events


Header = tuple[str, str | bytes]


@dataclass(frozen=True)
class Case:
    """One hostile request. Strings may name the board's values: {running}, {csrf}, ..."""

    id: str
    method: str
    path: str
    expect: int
    board: str = "locked"
    headers: tuple[Header, ...] = ()
    form: str | bytes | None = None  # an urlencoded body

    def send(self, board: Board) -> httpx.Response:
        # As bytes: httpx sends a str header as ASCII, so one outside ASCII goes as UTF-8.
        headers = [
            (k.encode(), _raw(board.fill(v)) if isinstance(v, str) else v) for k, v in self.headers
        ]
        if self.form is not None:
            headers.append((b"Content-Type", b"application/x-www-form-urlencoded"))
        body = board.fill(self.form).encode() if isinstance(self.form, str) else self.form
        with httpx.Client(base_url=board.urls[self.board], timeout=30) as client:
            return client.request(self.method, board.fill(self.path), headers=headers, content=body)


def _raw(value: str) -> bytes:
    """A header value as its UTF-8 bytes (the same bytes as ASCII where it is ASCII)."""
    return value.encode()


def _cookie(value: str) -> Header:
    return ("Cookie", f"{SESSION}={value}")


SIGNED_IN = (_cookie("{cookie}"),)
CSRF = "csrf={csrf}"
READS = ("/", "/api/overview", "/jobs/{running}", "/api/jobs/{running}", "/metrics", "/login")
ACTIONS = ("/jobs/{running}/cancel", "/jobs/{ended}/retry")

# Names a rebinding page could make a browser send; {port} is the board's own port.
REBINDING = (
    "evil.example",
    "evil.example:{port}",
    "localhost.evil.example:{port}",
    "127.0.0.1.nip.io:{port}",
    "localhost.:{port}",
    "localhost:1",
    "127.0.0.1",
    "[::1]:1",
    "0.0.0.0:{port}",
)
MALFORMED_HOSTS = ("", "127.0.0.1:{port}@evil.example", "evil.example:99999", "a b", "[zz]")


def _hosts() -> Iterator[Case]:
    for host in REBINDING:
        opened = host.replace("{port}", "{open_port}")
        locked = host.replace("{port}", "{locked_port}")
        for path in (*READS, "/static/dashboard.js"):
            yield Case(f"open {opened} {path}", "GET", path, 421, "open", (("Host", opened),))
        bearer = (("Host", locked), ("Authorization", f"Bearer {TOKEN}"))
        for path in ("/api/overview", "/metrics"):
            yield Case(f"bearer {locked} {path}", "GET", path, 421, headers=bearer)
        session = (("Host", locked), *SIGNED_IN)  # the operator's cookie and CSRF do not help
        for path in ACTIONS:
            yield Case(f"session {locked} {path}", "POST", path, 421, headers=session, form=CSRF)
    for host in MALFORMED_HOSTS:
        sent = (("Host", host.replace("{port}", "{open_port}")),)
        yield Case(f"malformed {host}", "GET", "/api/overview", 400, "open", sent)
    yield Case("non-ascii host", "GET", "/", 400, "open", (("Host", "évil:1".encode()),))


BAD_BEARERS: tuple[str | bytes, ...] = (
    "Bearer тест-токен",
    b"Bearer \xff\xfe\xfd",
    f"Bearer {TOKEN}é",
    f"Bearer  {TOKEN}",
    f"bearer {TOKEN}",
    f"Bearer {TOKEN[:-1]}",
    f"Basic {TOKEN}",
    "Bearer " + "A" * 8_000,
    "Bearer " + "A" * 60_000,
    "",
)
BAD_COOKIES = (
    "{revoked}",  # logged out
    "{expired}",  # a valid MAC from another server, whose session is over
    "{tampered_mac}",
    "{tampered_sid}",
    "{old_format}",  # sid.issued.mac: the format before sessions were kept server-side
    "forged." + "0" * 64,
    ".",
    "....",
    "сессия.подпись",
    "A" * 8_000,
    "{cookie}é",
)


def _credentials() -> Iterator[Case]:
    for i, bearer in enumerate(BAD_BEARERS):
        for path in ("/api/overview", "/api/jobs/{running}", "/metrics"):
            yield Case(f"bearer {i} {path}", "GET", path, 401, headers=(("Authorization", bearer),))
    for i, cookie in enumerate(BAD_COOKIES):
        sent = (_cookie(cookie),)
        for path in ("/api/overview", "/metrics"):
            yield Case(f"cookie {i} {path}", "GET", path, 401, headers=sent)
        yield Case(f"cookie {i} page", "GET", "/jobs/{running}", 303, headers=sent)
        for path in ACTIONS:
            yield Case(f"cookie {i} {path}", "POST", path, 401, headers=sent, form=CSRF)
    revoked, form = (_cookie("{revoked}"),), "csrf={revoked_csrf}"
    yield Case("revoked with its csrf", "POST", ACTIONS[0], 401, headers=revoked, form=form)
    expired = (_cookie("{expired}"),)
    yield Case("expired on its board", "GET", "/api/overview", 401, "short", expired)


BAD_CSRF: tuple[str | bytes, ...] = (
    "csrf=",
    "",
    "csrf=%D0%BF%D0%BE%D0%B4%D0%B4%D0%B5%D0%BB%D0%BA%D0%B0",  # подделка
    b"csrf=\xff\xfe\xfd",
    "csrf={revoked_csrf}",  # another session's token
    "csrf={csrf}%C3%A9",
    "csrf=" + "0" * 64,
    "csrf=x&csrf={csrf}",  # the first value counts
    "next=/&" + "a" * MAX_FORM_BYTES + "&csrf={csrf}",  # past the form cap
    "csrf={csrf}\x00",
    "&".join(["a=1"] * 11) + "&csrf={csrf}",  # past the field cap
    "csrf={csrf}&" + "&".join(["a=1"] * 11),
    "csrf={csrf}&pad=" + "a" * 60_000,  # a body far past the cap is not read to its end
)
CROSS_ORIGINS = (
    "https://evil.example",
    "null",
    "http://127.0.0.1:{locked_port}.evil.example",
    "http://localhost:1",
    "http://127.0.0.1:{locked_port}@evil.example",
    "http://[",
    "http://127.0.0.1:{locked_port}/",
    "127.0.0.1:{locked_port}",
    "http://127.0.0.1:{locked_port}é",
)
BAD_LOGINS: tuple[str | bytes, ...] = (
    "token=%D1%82%D0%BE%D0%BA%D0%B5%D0%BD-%D0%B4%D0%BE%D1%81%D1%82%D1%83%D0%BF%D0%B0&next=/",
    b"token=\xff\xfe\xfd&next=/",
    f"token={TOKEN}%C3%A9&next=/",
    "token=" + "A" * 5_000 + "&next=/",
    f"token=wrong&token={TOKEN}&next=/",
    f"token={TOKEN}\x00&next=/",
    f"token={TOKEN}&" + "&".join(["a=1"] * 11),
)


def _forms() -> Iterator[Case]:
    for i, form in enumerate(BAD_CSRF):
        for path in ACTIONS:
            yield Case(f"csrf {i} {path}", "POST", path, 403, headers=SIGNED_IN, form=form)
    yield Case("logout with a wrong csrf", "POST", "/logout", 403, headers=SIGNED_IN, form="csrf=x")
    for origin in CROSS_ORIGINS:
        cross = (*SIGNED_IN, ("Origin", origin))
        for path in (*ACTIONS, "/logout"):
            yield Case(f"origin {origin} {path}", "POST", path, 403, headers=cross, form=CSRF)
        login = f"token={TOKEN}&next=/"
        yield Case(f"origin {origin} login", "POST", "/login", 403, headers=cross[1:], form=login)
    bearer = (("Authorization", f"Bearer {TOKEN}"),)  # a bearer token reads; it never acts
    for path in ACTIONS:
        yield Case(f"bearer acts {path}", "POST", path, 403, headers=bearer, form=CSRF)
        yield Case(f"read-only acts {path}", "POST", path, 403, "open", form=CSRF)
    for i, form in enumerate(BAD_LOGINS):
        yield Case(f"login {i}", "POST", "/login", 403, form=form)


ODD_METHODS = ("PUT", "DELETE", "PATCH", "TRACE", "OPTIONS", "PROPFIND", "FOO")
# Names under /static/ that are not its two files (%2f, %5c: slash and backslash).
TRAVERSALS = [
    f"/static/{name}"
    for name in (
        "%2e%2e/_dashboard.py ..%2f_dashboard.py %2e%2e%2f%2e%2e%2f%2e%2e%2fpyproject.toml "
        "..%5c_dashboard.py dashboard.js%00.py dashboard.js%2f __init__.py _dashboard.py "
        "%2fetc%2fpasswd DASHBOARD.JS"
    ).split()
] + ["/static/"]


def _odd_requests() -> Iterator[Case]:
    for method in ODD_METHODS:
        for path in ("/", "/api/overview", ACTIONS[0]):
            yield Case(f"{method} {path}", method, path, 401)
            yield Case(f"{method} {path} signed in", method, path, 405, headers=SIGNED_IN)
            yield Case(f"{method} {path} read-only", method, path, 405, "open")
        yield Case(f"{method} static", method, "/static/dashboard.js", 405, "open")
    yield Case("GET an action", "GET", ACTIONS[0], 405, headers=SIGNED_IN)
    for size in (4_200, 15_000):
        query = "?next=" + "%2F" * (size // 3)
        for path in ("/", "/login", "/api/overview", "/metrics", "/static/dashboard.js"):
            yield Case(f"query {size} {path}", "GET", path + query, 414, "open")
        action = ACTIONS[0] + query
        yield Case(f"query {size} action", "POST", action, 414, headers=SIGNED_IN, form=CSRF)
    for path in TRAVERSALS:
        for name in ("open", "locked"):
            yield Case(f"{name} {path}", "GET", path, 404, name)


BAD_JOB_IDS = (
    "-1",
    "1e9",
    "99999999999999999999",
    "9223372036854775808",  # one past a bigint
    "abc",
    "0x10",
    "%EF%BC%91",  # a fullwidth 1
    "1.0",
    "0",
    "1%00",
    "",
)


def _job_ids() -> Iterator[Case]:
    for job in BAD_JOB_IDS:
        for path in (f"/jobs/{job}", f"/api/jobs/{job}"):
            yield Case(f"read-only {path}", "GET", path, 404, "open")
            yield Case(f"signed in {path}", "GET", path, 404, headers=SIGNED_IN)
        for action in ("cancel", "retry"):
            path = f"/jobs/{job}/{action}"
            yield Case(f"signed in {path}", "POST", path, 404, headers=SIGNED_IN, form=CSRF)
    for action in ("explode", "cancel%00", "CANCEL", "retry%2F"):
        path = f"/jobs/{{running}}/{action}"
        yield Case(f"action {action}", "POST", path, 404, headers=SIGNED_IN, form=CSRF)


CASES = [*_hosts(), *_credentials(), *_forms(), *_odd_requests(), *_job_ids()]


@pytest.mark.parametrize("case", CASES, ids=[c.id[:80] for c in CASES])
def test_hostile_request_gets_a_clean_refusal(board: Board, case: Case) -> None:
    before = _state(board.dsn)
    response = case.send(board)
    assert response.status_code == case.expect, (response.status_code, response.text[:200])
    if response.status_code == 303:
        assert response.headers["location"].startswith("/login")
    for mark in SECRET_MARKS:
        assert mark not in response.text, mark
    assert "max-age=0" in response.headers.get("set-cookie", "max-age=0").lower()
    assert _state(board.dsn) == before


def test_the_corpus_left_the_operator_signed_in(board: Board) -> None:
    """The refusals above were refusals: the same session and CSRF token still act."""
    headers = {"Cookie": board.fill(f"{SESSION}={{cookie}}")}
    with httpx.Client(base_url=board.urls["locked"], headers=headers, timeout=10) as client:
        assert client.get("/api/overview").status_code == 200
        retried = client.post(board.fill(ACTIONS[1]), data={"csrf": board.values["csrf"]})
        assert retried.status_code == 303 and retried.headers["location"].endswith("retried")


@pytest.mark.parametrize(
    "next_url",
    ["//evil.example/", "/\\evil.example", "/\t/evil.example", "https://evil.example/", "/\u2215x"],
)
def test_signing_in_never_redirects_off_site(board: Board, next_url: str) -> None:
    with httpx.Client(base_url=board.urls["locked"], timeout=10) as client:
        response = client.post("/login", data={"token": TOKEN, "next": next_url})
        assert response.status_code == 303 and response.headers["location"] == "/"
