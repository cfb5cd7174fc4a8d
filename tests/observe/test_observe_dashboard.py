"""The dashboard over HTTP: pages, access token, sessions, CSRF, headers (no browser needed)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from tests.store.helpers import new_job

from tenure._observe._dashboard import create_dashboard
from tenure._observe._http import ServerThread
from tenure._observe._pages import pipelines_table
from tenure._store._store import Store

pytestmark = pytest.mark.storage

TOKEN = "dashboard-test-token-0123456789"


def serve(dsn: str, token: str | None) -> Iterator[httpx.Client]:
    server = ServerThread(create_dashboard(dsn, access_token=token), "127.0.0.1", 0)
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
    assert set(fragments) == {"running", "events", "charts", "pipelines"}
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
    assert "Cancelled: a running call stops" in locked_board.get(done.headers["location"]).text
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
