"""The receiving side as the pages show it, run as written: the receivers guide's case
service (docs/guides/receivers.md) and the metrics page's receiver with its
FenceObserver (docs/reference/metrics.md).

Each page's block is saved as the module a service would run, loaded with its
environment, served by uvicorn on loopback and sent real fenced requests: the guide's
own sending side (the ``fence-tool`` example, run by a worker that signs with the
receiver's secret), then replays, a stale token, a forged signature and no fence.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from tests.integration.fence.helpers import serve
from tests.support.docs import imported
from tests.support.schemas import fresh_schema_dsn
from tests.support.waiting import wait_until
from tests.support.workers import Journal

import tenure
from tenure.fence import fence_headers

pytestmark = pytest.mark.storage

SECRET = "the-cases-secret"


def load(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> Any:
    """The example NAME saved as ``cases.py`` and run as a server imports it (not as
    ``__main__``), with ENV set: its module-level ``app``."""
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    return imported(name, tmp_path, "cases")["app"]


def load_sender(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, dsn: str
) -> dict[str, Any]:
    """The guide's sending side, loaded as ``tenure worker`` loads it, signing with the
    receiver's secret (the workers' TENURE_SIGNING_KEY) and sending to URL."""
    monkeypatch.setenv("TENURE_DSN", dsn)
    monkeypatch.setenv("TENURE_SIGNING_KEY", SECRET)
    monkeypatch.setenv("CASES_URL", url)
    return imported("fence-tool", tmp_path, "cases_tool")


def post(url: str, scope: str, token: int, key: str, secret: str = SECRET) -> httpx.Response:
    """``POST /cases`` for customer c-1 with a fence signed by SECRET (the body encoded as
    httpx encodes the tool's ``json=``, so that the same key is the same request)."""
    body = httpx.Request("POST", url, json={"customer": "c-1"}).content
    headers = fence_headers(
        scope, token, key, secret.encode(), method="POST", path="/cases", body=body
    )
    return httpx.post(
        f"{url}/cases", content=body, headers={**headers, "content-type": "application/json"}
    )


async def test_the_receiver_applies_a_workers_request_once_and_refuses_the_rest(
    tenure_dsn: str, database_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases_dsn = fresh_schema_dsn(database_dsn, "cases")
    service = load(
        "receiver", tmp_path, monkeypatch, CASES_DSN=cases_dsn, CASES_FENCE_SECRET=SECRET
    )
    with serve(service) as url:
        names = load_sender(tmp_path, monkeypatch, url, tenure_dsn)
        app: tenure.App = names["app"]
        worker = app.worker()
        running = asyncio.create_task(worker.run(handle_signals=False))
        try:
            job = await app.enqueue("open_case", {"customer_id": "c-1"})
            assert await app.wait(job.id, timeout=60) == {"case_id": 1}
        finally:
            worker.stop()
            await running
            await names["cases"]().aclose()  # the module's one client (runpy copies globals)
            await app.aclose()
        done = await asyncio.to_thread(Journal(tenure_dsn).job, job.id)
        scope, key = f"tool-job:{job.id}", f"tool-job:{job.id}:create_case"

        replay = await asyncio.to_thread(post, url, scope, done["token"], key)
        assert (replay.status_code, replay.json()) == (201, {"case_id": 1})
        assert replay.headers["x-idempotent-replay"] == "true"
        # A newer owner (the next token) is accepted; from then on the worker's is stale.
        newer = await asyncio.to_thread(post, url, scope, done["token"] + 1, f"{scope}:next")
        assert (newer.status_code, newer.json()) == (201, {"case_id": 2}), newer.text
        stale = await asyncio.to_thread(post, url, scope, done["token"], f"{scope}:late")
        assert stale.status_code == 409 and stale.json()["error"] == "stale_fence", stale.text
        forged = await asyncio.to_thread(post, url, scope, 10**6, f"{scope}:x", "not-it")
        assert forged.status_code == 403, forged.text
        bare = await asyncio.to_thread(httpx.post, f"{url}/cases", json={"customer": "c-2"})
        assert bare.status_code == 428, bare.text
    with psycopg.connect(cases_dsn) as db:
        rows = db.execute("SELECT id, customer FROM cases ORDER BY id").fetchall()
        assert rows == [(1, "c-1"), (2, "c-1")]


def test_the_observer_counts_a_stale_fence_and_journals_it_next_to_the_job(
    tenure_dsn: str, database_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = load(
        "fence-observer",
        tmp_path,
        monkeypatch,
        CASES_DSN=fresh_schema_dsn(database_dsn, "cases"),
        CASES_FENCE_SECRET=SECRET,
        TENURE_DSN=tenure_dsn,
    )
    with serve(service) as url:
        assert post(url, "tool-job:9", 5, "tool-job:9:create_case").status_code == 201
        assert post(url, "tool-job:9", 4, "tool-job:9:again").status_code == 409
        metrics = httpx.get(f"{url}/metrics").text.splitlines()
        assert "tenure_stale_fences_rejected_total 1.0" in metrics, metrics
        assert 'tenure_fence_decisions_total{outcome="accepted"} 1.0' in metrics, metrics
        journal = Journal(tenure_dsn)
        wait_until(
            lambda: journal.events(9, "stale_fence_rejected"),
            timeout=30,
            message="no stale_fence_rejected row in tenure's journal",
        )
    (row,) = journal.events(9, "stale_fence_rejected")
    assert row["token"] == 4
    assert row["detail"] == {
        "key": "tool-job:9:again",
        "status": 409,
        "receiver": "cases",
        "operation": "again",
    }
