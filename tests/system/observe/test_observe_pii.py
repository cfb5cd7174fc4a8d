"""PII canaries: what a tool was given or returned appears nowhere an operator looks.

Payloads, results and error messages carry unique canary strings through the
success, failure, retry and rejection paths. They must appear in tenure_jobs
(where they belong, until pruned) and nowhere else: not in the journal, not in
any worker's log (at DEBUG), not on /metrics, not in the CLI's output, not in
the dashboard's HTML or JSON. Neither may the job's unkeyed payload hash,
which a dictionary of likely payloads would reverse.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import httpx
import psycopg
import pytest
from tests.integration.observe.helpers import spawn_with_metrics, wait_done, wait_events
from tests.integration.observe.observe_app import LEASE
from tests.support.workers import Journal, WorkerGroup

from tenure import App
from tenure._cli import main
from tenure._dashboard._dashboard import create_dashboard
from tenure._observe._http import ServerThread


def leaks(secrets: Iterable[str], where: str, text: str) -> list[str]:
    return [f"{secret!r} in {where}" for secret in secrets if secret in text]


def test_canaries_stay_in_the_jobs_table(
    workers: WorkerGroup,
    ops: App,
    journal: Journal,
    tenure_dsn: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    canary = f"CANARY-{uuid.uuid4().hex}"
    debug = {"env": {"TENURE_LOG_LEVEL": "DEBUG"}}
    _, metrics_url = spawn_with_metrics(workers, "first", concurrency=4, **debug)
    # Attempt 1 of block_loop stalls its worker's loop past the lease; the other worker
    # takes the job over, and the first one's late result is rejected by the fenced commit.
    blocked = ops.sync.enqueue("block_loop", {"seconds": 2 * LEASE, "text": f"{canary}-rejected"})
    wait_events(journal, blocked.id, "job_claimed")
    workers.spawn("second", env={"TENURE_LOG_LEVEL": "DEBUG"})
    jobs = [
        blocked,
        ops.sync.enqueue("echo", {"text": f"{canary}-ok"}),
        ops.sync.enqueue("refuse", {"text": f"{canary}-failed"}),
        ops.sync.enqueue("flaky", {"text": f"{canary}-retried"}),
        ops.sync.enqueue("slow", {"seconds": 1.0, "text": f"{canary}-beats"}),
    ]
    rows = [wait_done(journal, job.id, workers) for job in jobs]
    assert [r["state"] for r in rows] == ["succeeded", "succeeded", "failed"] + ["succeeded"] * 2
    wait_events(journal, blocked.id, "result_rejected")

    # The canaries did flow: they are in the rows they belong to.
    assert canary in str(rows[0]["result"]) and canary in rows[2]["error"]["message"]
    secrets = [canary, *(r["payload_hash"] for r in rows)]

    found: list[str] = []
    with psycopg.connect(tenure_dsn) as conn:
        dump = conn.execute("SELECT string_agg(e::text, E'\\n') FROM tenure_events e").fetchone()
    assert dump is not None and dump[0]
    found += leaks(secrets, "the journal", dump[0])
    for worker in workers:
        found += leaks(secrets, f"{worker.name}'s log", worker.log())
    # The DEBUG lines (every heartbeat_ok) were there to be searched.
    assert any(worker.has_event("heartbeat_ok") for worker in workers)
    found += leaks(secrets, "the worker's /metrics", httpx.get(metrics_url, timeout=10).text)

    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    commands = [["jobs", "list", "--limit", "100"], ["events", "--limit", "1000"]]
    commands += [["events", "--json", "--limit", "1000"]]
    commands += [["jobs", "show", str(r["id"])] for r in rows]
    for command in commands:
        assert main(command) == 0
        out, err = capsys.readouterr()
        found += leaks(secrets, f"`tenure {' '.join(command)}`", out + err)

    server = ServerThread(create_dashboard(tenure_dsn), "127.0.0.1", 0)
    url = server.start()
    try:
        pages = ["/", "/api/overview", "/metrics"]
        pages += [f"/jobs/{r['id']}" for r in rows] + [f"/api/jobs/{r['id']}" for r in rows]
        with httpx.Client(base_url=url, timeout=10) as client:
            for page in pages:
                response = client.get(page)
                assert response.status_code == 200, page
                found += leaks(secrets, f"the dashboard's {page}", response.text)
    finally:
        server.stop()
    assert found == []
