"""A real PostgreSQL stopped and started again under a running worker.

After an outage the worker must keep what it is granted: a claim that waited out the
outage for a connection starts its lease's clock when it is sent, so its lease is not
declared lost the moment it arrives. And what the worker saw while the server was away
(ownership unknown) is journaled at the moment it saw it, not when it could write.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.apps.fault_app import LEASE, build_app
from tests.support.schemas import db_now
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup

from tenure._embedded import EmbeddedPostgres
from tenure._store import migrate

pytestmark = pytest.mark.slow

QUICK_JOBS = 20
OUTAGE = 2.5  # how long the server stays down: the fault itself, not a wait for anything


@pytest.fixture
def server() -> Iterator[EmbeddedPostgres]:
    root = Path(tempfile.mkdtemp(prefix="tenure-restart-"))
    os.chmod(root, 0o755)
    server = EmbeddedPostgres(root / "data", port=5434)
    try:
        migrate(server.start())
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_after_an_outage_a_worker_keeps_the_leases_it_is_granted(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    dsn = server.dsn
    journal = Journal(dsn)
    producer = build_app(dsn)
    with WorkerGroup(dsn, tmp_path) as workers:
        worker = workers.spawn("a", concurrency=QUICK_JOBS + 1)
        worker.wait_started()
        held = producer.sync.enqueue("sleepy", {"seconds": 30})
        wait_until(lambda: journal.job(held.id)["state"] == "running", timeout=20)
        # Due while the server is away: the worker's claims then wait for a connection.
        quick = [
            producer.sync.enqueue("sleepy", {"seconds": 0.05}, delay=1.0).id
            for _ in range(QUICK_JOBS)
        ]
        producer.close()

        server.stop()
        worker.wait_event("ownership_unknown", timeout=20)
        time.sleep(OUTAGE)
        server.start()
        back_at = db_now(dsn)

        wait_until(
            lambda: all(journal.job(j)["state"] == "succeeded" for j in quick),
            timeout=60,
            interval=0.1,
            message=f"the quick jobs did not all succeed:\n{workers.logs()[-4000:]}",
        )

    print(workers.logs()[-20000:])
    lost_too_soon = []
    for job_id in [held.id, *quick]:
        claims = {e["token"]: e["at"] for e in journal.events(job_id, "job_claimed")}
        for lost in journal.events(job_id, "heartbeat_lost"):
            granted = claims[lost["token"]]
            if (lost["at"] - granted).total_seconds() < LEASE / 2:
                lost_too_soon.append((job_id, lost["token"], lost["code"], lost["at"] - granted))
    assert lost_too_soon == [], lost_too_soon
    # No quick job needed a second attempt: none had its lease thrown away.
    assert [journal.job(j)["attempt"] for j in quick] == [1] * QUICK_JOBS

    unknown = journal.events(held.id, "ownership_unknown")
    assert unknown, journal.kinds(held.id)
    assert all(row["at"] < back_at for row in unknown), (unknown, back_at)
