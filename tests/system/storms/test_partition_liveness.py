"""After a partition heals, a worker's new results must be committed promptly.

The proxy in ``blackhole`` reads and discards bytes (a middlebox that lost its
state): a statement in flight then never gets an answer, even after the link
heals. Every statement of the worker therefore runs under a local deadline that
shuts the socket (heartbeat, claim, commit): before that, a batch of commits
whose answer was swallowed held every later commit back for 10 s, while the
heartbeat thread kept extending the leases of calls that only waited for their
commit. Found by the network storm (a worker resumed 13.7 s after a 3.6 s
blackhole). Safety holds throughout (the fenced commit); this is liveness.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.apps.fault_app import LEASE, build_app

from tenure import App
from tenure._chaos._harness import Supervisor, wait_for
from tenure._chaos._history import read_history

REPO_ROOT = Path(__file__).resolve().parents[3]
POLL = 0.2
BOUND = LEASE + POLL + 1.0  # the storms' recovery bound: lease + sweep + 1 s


def succeed(app: App, job_id: int, timeout: float) -> None:
    wait_for(
        lambda: app.sync.get(job_id).state == "succeeded",
        timeout,
        f"job {job_id} did not succeed within {timeout:g} s",
        interval=0.05,
    )


def test_a_call_finished_after_the_heal_is_committed_within_the_recovery_bound(
    tenure_dsn: str, storm_dir: Path
) -> None:
    """The cut call ends when the test opens its gate, once the partition is in place: it
    used to sleep 0.6 s and, on a starved machine, could finish (and commit) before the
    partition began; the test then skipped itself, silently in CI (issue 22, item 17)."""
    app = build_app(tenure_dsn)
    supervisor = Supervisor(
        tenure_dsn,
        storm_dir,
        "tests.apps.fault_app:app",
        concurrency=2,
        poll_interval=POLL,
        cwd=REPO_ROOT,
    )
    gate = storm_dir / "gate"
    try:
        handle = supervisor.spawn("w1", proxy=True)
        supervisor.wait_started()
        proxy = handle.proxy
        assert proxy is not None
        cut = app.sync.enqueue("gated", {"gate": str(gate)})
        wait_for(lambda: app.sync.get(cut.id).state == "running", 20.0, "never ran")
        proxy.set_mode("blackhole")
        cut_at = time.monotonic()
        gate.touch()  # the call ends now, inside the partition: its commit goes into the void
        wait_for(
            lambda: any(_finished(e, cut.id) for e in read_history(supervisor.history_dir)),
            60.0,
            f"job {cut.id} never finished its call",
            interval=0.05,
        )
        time.sleep(max(0.0, 1.2 * LEASE - (time.monotonic() - cut_at)))  # the partition's length
        dropped = proxy.bytes_dropped
        proxy.set_mode("pass")
        healed = time.monotonic()
        assert dropped > 0  # the fault fired
        after = app.sync.enqueue("sleepy", {"seconds": 0.05})
        succeed(app, after.id, 60.0)
        took = time.monotonic() - healed
        succeed(app, cut.id, 60.0)  # the cut call itself is not lost either
        assert took < BOUND, f"a call after the heal waited {took:.1f} s for its commit"
    finally:
        supervisor.close()
        app.close()


def _finished(event: dict[str, Any], job_id: int) -> bool:
    return event.get("ev") == "call_finished" and event.get("job") == job_id
