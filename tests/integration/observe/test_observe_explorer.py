"""The explorer, the ownership picture and the pipeline graph over HTTP (no browser needed):
filters, cursors, bad input, bulk actions under token + CSRF, everything escaped."""

from __future__ import annotations

import json
from dataclasses import replace

import httpx
import psycopg
import pytest
from tests.integration.observe.test_observe_dashboard import (
    TOKEN,
    csrf_of,
    locked_board,
    open_board,
)
from tests.integration.store.helpers import new_job

from tenure._store import Store

__all__ = ["locked_board", "open_board"]  # fixtures, imported for their side of the test

pytestmark = pytest.mark.storage

CANARY = "<script>alert(1)</script>"


async def _jobs(store: Store) -> dict[str, int]:
    """Five jobs: two queued tools, one of another tenant, one running, one hostile key."""
    ids = {}
    for name, job in [
        ("a1", new_job("a1", tool="alpha")),
        ("a2", new_job("a2", tool="alpha")),
        ("b1", new_job("b1", tool="beta")),
        ("acme", replace(new_job("shared-key", tool="alpha"), tenant="acme")),
        ("hostile", new_job(CANARY, tool="alpha")),
    ]:
        ids[name] = (await store.enqueue(job)).id
    claimed = await store.claim("w-explore", {"beta": 60_000}, 1)
    assert [c.id for c in claimed] == [ids["b1"]]
    return ids


async def test_the_api_filters_pages_by_cursor_and_refuses_bad_input(
    store: Store, open_board: httpx.Client, tenure_dsn: str
) -> None:
    ids = await _jobs(store)
    everything = open_board.get("/api/jobs").json()
    assert [j["id"] for j in everything["jobs"]] == sorted(ids.values(), reverse=True)
    assert everything["next_cursor"] is None
    assert all("payload" not in j and "result" not in j for j in everything["jobs"])

    running = open_board.get("/api/jobs", params={"state": "running"}).json()["jobs"]
    assert [(j["id"], j["owner"]) for j in running] == [(ids["b1"], "w-explore")]
    acme = open_board.get("/api/jobs", params={"tenant": "acme"}).json()["jobs"]
    assert [j["id"] for j in acme] == [ids["acme"]]
    by_key = open_board.get("/api/jobs", params={"key": "shared-key", "tenant": "acme"}).json()
    assert [j["id"] for j in by_key["jobs"]] == [ids["acme"]]
    assert open_board.get("/api/jobs", params={"key": "shared-key"}).json()["jobs"] == []
    by_id = open_board.get("/api/jobs", params={"id": str(ids["a2"])}).json()["jobs"]
    assert [j["id"] for j in by_id] == [ids["a2"]]

    with psycopg.connect(tenure_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE tenure_jobs SET created_at = '2026-01-01T10:00:00+00' WHERE id = %s",
            (ids["a1"],),
        )
    window = {"since": "2026-01-01T09:00", "until": "2026-01-01T11:00"}  # UTC, as typed
    in_window = open_board.get("/api/jobs", params=window).json()["jobs"]
    assert [(j["id"], j["created_at"]) for j in in_window] == [
        (ids["a1"], "2026-01-01T10:00:00+00:00")
    ]
    after = open_board.get("/api/jobs", params={"since": "2026-01-01T10:00:01Z"}).json()
    assert ids["a1"] not in [j["id"] for j in after["jobs"]] and len(after["jobs"]) == 4

    seen, cursor = [], None
    while True:
        params = {"tool": "alpha", "limit": "2", **({"cursor": cursor} if cursor else {})}
        page = open_board.get("/api/jobs", params=params).json()
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted([ids["a1"], ids["a2"], ids["acme"], ids["hostile"]], reverse=True)

    for bad, why in [
        ({"state": "finished"}, "unknown state"),
        ({"cursor": "bm90LWEtY3Vyc29y"}, "not a cursor"),
        ({"id": "12abc"}, "positive integer"),
        ({"id": "99999999999999999999"}, "positive integer"),
        ({"since": "yesterday"}, "since must be a time"),
        ({"since": "2026-01-02T00:00", "until": "2026-01-01T00:00"}, "before until"),
        ({"limit": "100000"}, "limit"),
    ]:
        answer = open_board.get("/api/jobs", params=bad)
        assert answer.status_code == 400 and why in answer.json()["error"], (bad, answer.text)
        page = open_board.get("/jobs", params=bad)
        assert page.status_code == 400 and 'id="search-error"' in page.text


async def test_the_page_escapes_every_value_and_offers_no_actions_without_a_token(
    store: Store, open_board: httpx.Client
) -> None:
    ids = await _jobs(store)
    page = open_board.get("/jobs", params={"tool": CANARY, "key": CANARY})
    assert CANARY not in page.text and "&lt;script&gt;" in page.text
    listed = open_board.get("/jobs").text
    assert f'data-job="{ids["hostile"]}"' in listed and CANARY not in listed
    assert 'id="bulk"' not in listed and "need an access" in listed
    refused = open_board.post("/jobs/bulk", data={"csrf": "x", "action": "cancel", "job": "1"})
    assert refused.status_code == 403


async def test_bulk_cancel_needs_a_session_and_its_csrf_and_reports_each_job(
    store: Store, locked_board: httpx.Client
) -> None:
    ids = await _jobs(store)
    await store.cancel(ids["a1"])  # already ended: the bulk cancel must say so, not fail
    chosen = [ids["a1"], ids["a2"], ids["b1"], 987654321]
    form = {"action": "cancel", "job": [str(i) for i in chosen]}
    assert locked_board.post("/jobs/bulk", data={**form, "csrf": "x"}).status_code == 401

    locked_board.post("/login", data={"token": TOKEN, "next": "/jobs"})
    page = locked_board.get("/jobs")
    assert page.status_code == 200 and 'id="bulk-cancel"' in page.text
    csrf = csrf_of(page.text)
    assert locked_board.post("/jobs/bulk", data={**form, "csrf": "0" * 64}).status_code == 403
    cross = locked_board.post(
        "/jobs/bulk", data={**form, "csrf": csrf}, headers={"Origin": "https://evil.example"}
    )
    assert cross.status_code == 403
    assert (await store.get_job(ids["a2"])).state == "queued"
    too_many = {"action": "cancel", "job": [str(i) for i in range(1, 102)], "csrf": csrf}
    assert locked_board.post("/jobs/bulk", data=too_many).status_code == 400
    unknown = locked_board.post("/jobs/bulk", data={**form, "action": "delete", "csrf": csrf})
    assert unknown.status_code == 404

    done = locked_board.post("/jobs/bulk", data={**form, "csrf": csrf})
    assert done.status_code == 200
    assert "2 of 4 jobs" in done.text
    for job_id, text in [
        (ids["a1"], "Not cancelled: the job had already ended."),
        (ids["a2"], "Cancelled"),
        (ids["b1"], "Cancelled"),
        (987654321, "No such job."),
    ]:
        row = done.text.split(f'<tr data-job="{job_id}"', 1)[1].split("</tr>", 1)[0]
        assert text in row, (job_id, row)
    assert (await store.get_job(ids["a2"])).state == "cancelled"
    assert (await store.get_job(ids["b1"])).state == "cancelled"
    assert (await store.get_job(ids["acme"])).state == "queued"  # not selected, untouched

    retried = locked_board.post(
        "/jobs/bulk", data={"action": "retry", "job": [str(ids["a2"])], "csrf": csrf}
    )
    assert "1 of 1 jobs" in retried.text
    assert (await store.get_job(ids["a2"])).state == "queued"


async def test_the_job_page_draws_each_claim_as_a_lane_with_its_token(
    store: Store, open_board: httpx.Client, tenure_dsn: str
) -> None:
    ids = await _jobs(store)
    job = await store.get_job(ids["b1"])
    page = open_board.get(f"/jobs/{ids['b1']}").text
    assert 'class="ownership"' in page
    assert f'<g class="lane" data-token="{job.token}" data-worker="w-explore"' in page
    assert 'data-outcome="running"' in page and 'class="lease-rest"' in page
    fragments = open_board.get(f"/api/jobs/{ids['b1']}").json()
    assert set(fragments) == {"summary", "picture", "timeline"}
    assert f'data-token="{job.token}"' in fragments["picture"]
    unclaimed = open_board.get(f"/jobs/{ids['a1']}").text
    assert "not claimed yet" in unclaimed

    # The lease runs out and another worker takes over: two lanes, the first one expired.
    with psycopg.connect(tenure_dsn, autocommit=True) as conn:
        conn.execute(
            # lease_ms = NULL: a lease of its own row (migration 0023), which has run out.
            "UPDATE tenure_jobs SET lease_until = clock_timestamp() - interval '1 second',"
            " lease_ms = NULL WHERE id = %s",
            (ids["b1"],),
        )
    reclaimed = await store.claim("w-heir", {"beta": 60_000}, 1)
    assert [c.id for c in reclaimed] == [ids["b1"]]
    picture = open_board.get(f"/api/jobs/{ids['b1']}").json()["picture"]
    first = picture.split(f'data-token="{job.token}"', 1)[1].split("</g>", 1)[0]
    assert 'data-outcome="expired"' in first
    assert 'data-kind="lease_expired"' in picture and "reclaimed by w-heir" in picture
    assert f'data-token="{reclaimed[0].token}" data-worker="w-heir"' in picture


async def test_a_pipeline_run_is_drawn_as_its_graph(
    store: Store, open_board: httpx.Client, tenure_dsn: str
) -> None:
    graph = {
        "version": 1,
        "start": ["develop"],
        "stages": [
            {
                "name": "develop",
                "tool": "w",
                "next": ["qa"],
                "on": None,
                "after": [],
                "outbox": [],
                "arguments": {"secret": CANARY},
            },
            {
                "name": "qa",
                "tool": "g",
                "next": [],
                "on": {"approve": ["ship"], "reject": ["develop"]},
                "after": [],
                "outbox": [],
                "arguments": None,
            },
            {
                "name": "ship",
                "tool": "w",
                "next": [],
                "on": None,
                "after": [],
                "outbox": [],
                "arguments": None,
            },
        ],
        "tools": {},
    }
    with psycopg.connect(tenure_dsn, autocommit=True) as conn:
        run = conn.execute(
            "INSERT INTO tenure_runs (pipeline, idempotency_key, input, input_hash, graph,"
            " context) VALUES ('review', 'run-g', '{}', 'h', %s, '{}') RETURNING id",
            (json.dumps(graph),),
        ).fetchone()
        assert run is not None
        conn.execute(
            "INSERT INTO tenure_run_stages (run_id, name, round, kind, state, decision)"
            " VALUES (%(r)s, 'develop', 1, 'stage', 'succeeded', NULL),"
            "        (%(r)s, 'qa', 1, 'stage', 'succeeded', 'reject'),"
            "        (%(r)s, 'develop', 2, 'stage', 'succeeded', NULL),"
            "        (%(r)s, 'qa', 2, 'stage', 'waiting', NULL)",
            {"r": run[0]},
        )
    overview = open_board.get("/api/overview").json()["pipelines"]
    assert f'href="/pipelines/{run[0]}"' in overview and "run-graph" not in overview
    listing = open_board.get("/api/pipelines").json()["pipelines"]
    assert f'<tr data-run="{run[0]}">' in listing and "run-graph" not in listing
    html = open_board.get(f"/api/pipelines/{run[0]}").json()["run"]  # the run's own page
    assert f'<svg class="run-graph" data-run="{run[0]}"' in html
    assert 'data-stage="qa" data-state="waiting" data-round="2"' in html
    assert 'data-stage="develop" data-state="succeeded" data-round="2"' in html
    assert 'data-stage="ship" data-state="not-reached"' in html
    assert "#1 succeeded → reject" in html
    for verdict in ("approve", "reject"):
        assert f'<g class="edge" data-verdict="{verdict}">' in html
    assert "secret" not in html and CANARY not in html  # a stage's arguments never show
    page = open_board.get(f"/pipelines/{run[0]}")
    assert page.status_code == 200 and f'data-run="{run[0]}"' in page.text
    assert CANARY not in page.text
    for missing in (run[0] + 1, 2**63):  # no such run; past a bigint
        assert open_board.get(f"/pipelines/{missing}").status_code == 404
        assert open_board.get(f"/api/pipelines/{missing}").status_code == 404
