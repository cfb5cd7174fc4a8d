"""The dashboard over HTTP: pages, access token, sessions, CSRF, headers (no browser needed)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from starlette.requests import Request
from tests.integration.store.helpers import new_job

from tenure._dashboard._dashboard import MAX_SESSIONS, _Sessions, create_dashboard
from tenure._dashboard._pages import pipelines_table
from tenure._observe._http import ServerThread
from tenure._store import Store

TOKEN = "dashboard-test-token-0123456789"


def serve(dsn: str, token: str | None, allowed_hosts: Sequence[str] = ()) -> Iterator[httpx.Client]:
    app = create_dashboard(dsn, access_token=token, allowed_hosts=allowed_hosts)
    server = ServerThread(app, "127.0.0.1", 0)
    url = server.start()
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            yield client
    finally:
        server.stop()


@pytest.fixture
def open_board(tenure_dsn: str) -> Iterator[httpx.Client]:
    yield from serve(tenure_dsn, None)


@pytest.fixture
def locked_board(tenure_dsn: str) -> Iterator[httpx.Client]:
    yield from serve(tenure_dsn, TOKEN)


async def _running(store: Store) -> int:
    job = await store.enqueue(new_job("held"))
    await store.claim("w-dash", {"t": 60_000}, 1)
    return job.id


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, page
    return found.group(1)


async def test_without_a_token_the_dashboard_is_read_only(
    store: Store, open_board: httpx.Client
) -> None:
    job_id = await _running(store)
    page = open_board.get("/")
    assert page.status_code == 200
    assert f'data-job="{job_id}"' in page.text and "w-dash" in page.text
    for header, value in [
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "same-origin"),
        ("cache-control", "no-store"),
    ]:
        assert page.headers[header] == value
    assert "script-src 'self'" in page.headers["content-security-policy"]
    fragments = open_board.get("/api/overview").json()
    assert set(fragments) == {"running", "waiting", "events", "charts", "pipelines"}
    job_page = open_board.get(f"/jobs/{job_id}")
    assert "need an access token" in job_page.text and 'id="cancel"' not in job_page.text
    refused = open_board.post(f"/jobs/{job_id}/cancel", data={"csrf": "x"})
    assert refused.status_code == 403 and "access token" in refused.json()["error"]
    assert (await store.get_job(job_id)).state == "running"
    assert open_board.get("/jobs/424242").status_code == 404
    assert (
        open_board.get("/static/dashboard.js").headers["content-type"].startswith("text/javascript")
    )
    assert open_board.get("/static/../_dashboard.py").status_code == 404


async def test_with_a_token_actions_need_a_session_and_its_csrf_token(
    store: Store, locked_board: httpx.Client
) -> None:
    job_id = await _running(store)
    first = locked_board.get(f"/jobs/{job_id}")
    assert (
        first.status_code == 303 and first.headers["location"] == f"/login?next=%2Fjobs%2F{job_id}"
    )
    assert locked_board.get("/api/overview").status_code == 401
    assert locked_board.get("/metrics").status_code == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert locked_board.get("/metrics", headers=bearer).status_code == 200
    assert locked_board.get("/api/overview", headers=bearer).status_code == 200
    assert locked_board.post(f"/jobs/{job_id}/cancel", data={"csrf": "x"}).status_code == 401

    wrong = locked_board.post("/login", data={"token": "not-the-token", "next": "/"})
    assert wrong.status_code == 403 and "not the access token" in wrong.text
    evil = locked_board.post("/login", data={"token": TOKEN, "next": "//evil.example/"})
    assert evil.status_code == 303 and evil.headers["location"] == "/"
    cookie = evil.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    page = locked_board.get(f"/jobs/{job_id}")
    assert page.status_code == 200 and 'id="cancel"' in page.text
    csrf = csrf_of(page.text)

    no_csrf = locked_board.post(f"/jobs/{job_id}/cancel", data={"csrf": "0" * 64})
    assert no_csrf.status_code == 403
    cross_site = locked_board.post(
        f"/jobs/{job_id}/cancel", data={"csrf": csrf}, headers={"Origin": "https://evil.example"}
    )
    assert cross_site.status_code == 403
    assert (await store.get_job(job_id)).state == "running"

    done = locked_board.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf})
    assert done.status_code == 303 and done.headers["location"].startswith(f"/jobs/{job_id}?done=")
    assert (await store.get_job(job_id)).state == "cancelled"
    told = locked_board.get(done.headers["location"]).text
    assert "Cancelled: a running call was told to stop at once" in told
    again = locked_board.post(f"/jobs/{job_id}/retry", data={"csrf": csrf})
    assert again.status_code == 303
    assert (await store.get_job(job_id)).state == "queued"
    events = [e["kind"] for e in await store.job_timeline(job_id)]
    assert events == ["job_claimed", "cancelled", "retry_requested"]

    locked_board.post("/logout", data={"csrf": csrf})
    assert locked_board.get("/").status_code == 303


def test_a_token_too_short_is_refused(tenure_dsn: str) -> None:
    with pytest.raises(Exception, match="at least 16"):
        create_dashboard(tenure_dsn, access_token="short")


async def test_pipeline_runs_show_their_stages(
    store: Store, open_board: httpx.Client, tenure_dsn: str
) -> None:
    assert "no pipeline runs yet" in open_board.get("/").text
    with psycopg.connect(tenure_dsn, autocommit=True) as conn:
        run = conn.execute(
            "INSERT INTO tenure_runs (pipeline, idempotency_key, input, input_hash, graph,"
            " context) VALUES ('review', 'run-1', '{}', 'h', '{}', '{}') RETURNING id"
        ).fetchone()
        assert run is not None
        conn.execute(
            "INSERT INTO tenure_run_stages (run_id, name, round, kind, state, decision)"
            " VALUES (%s, 'develop', 1, 'stage', 'succeeded', 'done'),"
            "        (%s, 'qa', 1, 'stage', 'waiting', NULL)",
            (run[0], run[0]),
        )
    html = open_board.get("/api/overview").json()["pipelines"]
    assert "review" in html and "develop#1 succeeded → done" in html and "qa#1 waiting" in html
    assert "no pipelines" in pipelines_table(None)  # before the pipeline tables exist


ROUTES = ["/", "/api/overview", "/jobs/{id}", "/api/jobs/{id}", "/metrics", "/login"]


async def test_only_the_names_it_is_bound_to_are_answered(tenure_dsn: str, store: Store) -> None:
    """DNS rebinding: a page on evil.example re-points its name at 127.0.0.1, and the
    browser sends ``Host: evil.example:PORT``. Every route refuses it, with no content."""
    job_id = await _running(store)
    for client in serve(tenure_dsn, None, allowed_hosts=["dash.example", "proxy.example:8443"]):
        port = urlsplit(str(client.base_url)).port
        assert port is not None
        for name in ["127.0.0.1", "localhost", "[::1]", "LocalHost", "dash.example"]:
            for route in ROUTES:
                ok = client.get(route.format(id=job_id), headers={"Host": f"{name}:{port}"})
                assert ok.status_code == 200, (name, route, ok.status_code)
        assert client.get("/", headers={"Host": "dash.example"}).status_code == 200
        assert client.get("/", headers={"Host": "proxy.example:8443"}).status_code == 200
        for host in [
            f"evil.example:{port}",
            "evil.example",
            f"localhost:{port + 1}",
            "127.0.0.1",
            f"127.0.0.1.nip.io:{port}",
            f"localhost.:{port}",
            "proxy.example:8444",
        ]:
            for route in [*ROUTES, "/static/dashboard.js"]:
                refused = client.get(route.format(id=job_id), headers={"Host": host})
                assert refused.status_code == 421, (host, route, refused.status_code)
                assert "w-dash" not in refused.text and "tenure_" not in refused.text
                assert refused.headers["cache-control"] == "no-store"
        malformed = client.get("/api/overview", headers={"Host": f"a@evil.example:{port}"})
        assert malformed.status_code == 400 and "w-dash" not in malformed.text
    with pytest.raises(Exception, match="not a host name"):
        create_dashboard(tenure_dsn, allowed_hosts=["http://dash.example/"])


FOREIGN_ORIGINS = (
    "https://evil.example",
    "null",
    "http://{host}:{port}.evil.example",
    "http://{host}:{other}",
    "http://localhost:{port}",  # a different origin than the page's own, though loopback
    "http://{host}:{port}/",
    "{host}:{port}",
)


@pytest.mark.parametrize("bind", ["127.0.0.1", "127.0.0.2"])
async def test_a_foreign_origin_is_refused_on_every_bind(
    tenure_dsn: str, store: Store, bind: str
) -> None:
    """A page elsewhere cannot read the dashboard through a visitor's browser, nor send
    it a webhook answer, on any bind (127.0.0.2 too: loopback, but not one of the three
    names the MCP SDK checks). No Origin (curl, a webhook sender) and the dashboard's own
    origin pass."""
    job_id = await _running(store)
    server = ServerThread(create_dashboard(tenure_dsn, access_token=TOKEN), bind, 0)
    url = server.start()
    port = urlsplit(url).port
    assert url.startswith(f"http://{bind}:") and port is not None
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    try:
        with httpx.Client(base_url=url, timeout=10, headers=bearer) as client:
            own = {"Origin": f"http://{bind}:{port}"}
            for route in ROUTES:
                path = route.format(id=job_id)
                assert client.get(path).status_code == 200, path
                assert client.get(path, headers=own).status_code == 200, path
                for origin in FOREIGN_ORIGINS:
                    sent = origin.format(host=bind, port=port, other=port + 1)
                    refused = client.get(path, headers={"Origin": sent})
                    assert refused.status_code == 403, (sent, path, refused.status_code)
                    assert "w-dash" not in refused.text and "tenure_" not in refused.text
            answer = client.post(
                "/waitpoints/wp_x", json=1, headers={"Origin": "https://evil.example"}
            )
            assert answer.status_code == 403
            assert client.post("/waitpoints/wp_x", json=1, headers=own).status_code == 409
    finally:
        server.stop()


async def test_non_ascii_credentials_are_refused_cleanly(
    store: Store, locked_board: httpx.Client
) -> None:
    """Tokens, bearer values, cookies and CSRF fields outside ASCII: 401/403, never a 500."""
    job_id = await _running(store)
    for raw in ["Bearer тест".encode(), b"Bearer \xff\xfe", f"Bearer {TOKEN}é".encode()]:
        refused = locked_board.get("/api/overview", headers={b"Authorization": raw})
        assert refused.status_code == 401, raw
    cookie = {b"Cookie": "tenure_session=сессия.подпись".encode()}
    assert locked_board.get("/metrics", headers=cookie).status_code == 401
    wrong = locked_board.post("/login", data={"token": "токен-доступа-неверный", "next": "/"})
    assert wrong.status_code == 403 and "set-cookie" not in wrong.headers

    locked_board.post("/login", data={"token": TOKEN, "next": "/"})
    for csrf in ["подделка", "0" * 63 + "é"]:
        forged = locked_board.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf})
        assert forged.status_code == 403, csrf
    assert (await store.get_job(job_id)).state == "running"


async def test_a_non_ascii_access_token_still_signs_in(tenure_dsn: str, store: Store) -> None:
    token = "пароль-панели-управления"
    for client in serve(tenure_dsn, token):
        bearer = {b"Authorization": f"Bearer {token}".encode()}
        assert client.get("/api/overview", headers=bearer).status_code == 200
        assert client.post("/login", data={"token": token, "next": "/"}).status_code == 303
        assert client.get("/").status_code == 200


async def test_logout_revokes_the_session_and_its_cookie(
    store: Store, locked_board: httpx.Client
) -> None:
    job_id = await _running(store)
    locked_board.post("/login", data={"token": TOKEN, "next": "/"})
    cookie = locked_board.cookies["tenure_session"]
    csrf = csrf_of(locked_board.get(f"/jobs/{job_id}").text)
    assert locked_board.get("/api/overview").status_code == 200

    assert locked_board.post("/logout", data={"csrf": "0" * 64}).status_code == 403  # CSRF
    assert locked_board.get("/api/overview").status_code == 200  # ... so still signed in
    out = locked_board.post("/logout", data={"csrf": csrf})
    assert out.status_code == 303 and out.headers["location"] == "/login"

    replay = {"Cookie": f"tenure_session={cookie}"}
    locked_board.cookies.clear()
    assert locked_board.get("/api/overview", headers=replay).status_code == 401
    assert locked_board.get("/metrics", headers=replay).status_code == 401
    page = locked_board.get(f"/jobs/{job_id}", headers=replay)
    assert page.status_code == 303 and page.headers["location"].startswith("/login")
    cancel = locked_board.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf}, headers=replay)
    assert cancel.status_code == 401
    assert (await store.get_job(job_id)).state == "running"
    # Signing in again gives a new session; the old cookie stays dead.
    locked_board.post("/login", data={"token": TOKEN, "next": "/"})
    assert locked_board.cookies["tenure_session"] != cookie
    assert locked_board.get("/api/overview").status_code == 200
    locked_board.cookies.clear()
    assert locked_board.get("/api/overview", headers=replay).status_code == 401


def test_sessions_are_bounded_and_expire() -> None:
    sessions = _Sessions(TOKEN, seconds=0.0)
    assert sessions.session(_with_cookie(sessions.issue())) is None  # expired at once
    live = _Sessions(TOKEN)
    first = live.issue()
    for _ in range(MAX_SESSIONS):
        live.issue()
    assert live.session(_with_cookie(first)) is None  # the oldest made room
    assert len(live._live) == MAX_SESSIONS


def _with_cookie(cookie: str) -> Request:
    header = f"tenure_session={cookie}".encode()
    return Request({"type": "http", "method": "GET", "headers": [(b"cookie", header)]})
