"""The job explorer's statement on a real table: every filter combination reads the index
made for it (bench/explorer_plans.py's cases, on 20,000 rows), and paging by cursor visits
every matching job exactly once, newest first, through `App.admin.search`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from bench.explorer_plans import FILL, START, WEEK, cases, indexes_and_scans, plan_of

from tenure import App, InvalidSearch, JobPage
from tenure._search import job_search

pytestmark = pytest.mark.storage

ROWS = 20_000


@pytest.fixture
def filled(tenure_dsn: str) -> str:
    with psycopg.connect(tenure_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE tenure_jobs DISABLE TRIGGER USER")
        conn.execute(FILL, {"total": ROWS, "start": START})
        conn.execute("ALTER TABLE tenure_jobs ENABLE TRIGGER USER")
        conn.execute("VACUUM ANALYZE tenure_jobs")
    return tenure_dsn


@pytest.fixture
def app(filled: str) -> Iterator[App]:
    app = App(filled)
    try:
        yield app
    finally:
        app.close()


def test_every_filter_combination_reads_its_index_first_page_and_deep(filled: str) -> None:
    with psycopg.connect(filled, autocommit=True) as conn:
        row = conn.execute(
            "SELECT created_at, id FROM tenure_jobs ORDER BY created_at DESC, id DESC"
            " OFFSET 5000 LIMIT 1"
        ).fetchone()
        assert row is not None
        at, job_id = row
        for case in cases(ROWS):
            first = job_search(**case.filters)
            deep = replace(first, after=(at, job_id))  # 5,000 rows down, whatever the filter
            for search in (first, deep):
                used, scanned = indexes_and_scans(plan_of(conn, search))
                assert case.acceptable(used) and not scanned, (case.name, used, scanned)


def walk(app: App, **filters: Any) -> list[int]:
    """Every page, cursor to cursor; returns the ids in the order seen."""
    seen: list[int] = []
    cursor = None
    while True:
        page = app.sync.admin.search(**filters, cursor=cursor, limit=97)
        assert isinstance(page, JobPage) and len(page.jobs) <= 97
        seen += [job["id"] for job in page.jobs]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


def test_paging_visits_each_matching_job_once_newest_first(app: App, filled: str) -> None:
    day = START + WEEK * (5 / 7)
    filters: dict[str, Any] = {
        "state": "failed",
        "since": day,
        "until": day + timedelta(days=1),
    }
    with psycopg.connect(filled, autocommit=True) as conn:
        expected = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM tenure_jobs WHERE state = 'failed' AND created_at >= %s"
                " AND created_at < %s ORDER BY created_at DESC, id DESC",
                (filters["since"], filters["until"]),
            ).fetchall()
        ]
        tenant = conn.execute(
            "SELECT tenant, count(*) FROM tenure_jobs WHERE tenant <> '' GROUP BY 1"
            " ORDER BY 2 DESC LIMIT 1"
        ).fetchone()
    assert len(expected) > 97  # more than one page
    assert walk(app, **filters) == expected
    assert tenant is not None and len(walk(app, tenant=tenant[0], tool=None)) == tenant[1]


def test_find_by_id_and_by_key_within_its_tenant(app: App, filled: str) -> None:
    with psycopg.connect(filled, autocommit=True) as conn:
        row = conn.execute(
            "SELECT id, idempotency_key, tenant FROM tenure_jobs WHERE tenant <> '' LIMIT 1"
        ).fetchone()
    assert row is not None
    job_id, key, tenant = row
    assert [j["id"] for j in app.sync.admin.search(job_id=job_id).jobs] == [job_id]
    found = app.sync.admin.search(key=key, tenant=tenant).jobs
    assert [(j["id"], j["tenant"]) for j in found] == [(job_id, tenant)]
    assert "payload" not in found[0] and "result" not in found[0]
    assert app.sync.admin.search(key=key).jobs == ()  # tenant '' holds no such key
    with pytest.raises(InvalidSearch, match="unknown state"):
        app.sync.admin.search(state="finished")
