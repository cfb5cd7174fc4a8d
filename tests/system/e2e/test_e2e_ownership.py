"""Ownership unknown, end to end: an owner in doubt sends nothing after its deadline.

W1 runs a tool that wants to send a fenced request every 50 ms, whatever
happens (``keep_sending``: each request goes through ``ctx.http_auth``, which
calls ``ensure_owned()`` right before the send). Then W1's link to PostgreSQL
is cut. The receiver's decision log says when each request *arrived*
(CLOCK_MONOTONIC); W1's own log says until when it had a confirmed lease
(``deadline_monotonic`` of its last ``job_claimed``/``heartbeat_ok``, same
clock) and when it learned that the database did not answer
(``ownership_unknown``). No request may arrive after the deadline, and none
may *start* once ownership is unknown — so none arrives later than that moment
plus one request's transit, which on this path is well before the deadline
minus the safety margin.

The second test checks how soon a well-behaved tool of such an owner is told
to stop: by its conservative deadline, even while the heartbeat thread is stuck
reconnecting (a regression test for a bug it found).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from tests.apps.fence_app import HEARTBEAT, MARGIN
from tests.integration.fence.helpers import Receivers
from tests.support.waiting import wait_until
from tests.support.workers import WorkerGroup, WorkerProcess
from tests.system.e2e.helpers import (
    effects,
    last_deadline,
    notes,
    pg_proxy,
    wait_notes,
    worker_env,
)

from tenure import App
from tenure._chaos._proxy import rewrite_dsn

# Between ensure_owned() and the request's arrival lie one write on a kept-alive
# loopback connection and some scheduling on a busy machine.
TRANSIT = 0.5
ATTEMPTS_BEFORE_CUT = 5
ATTEMPTS_AFTER_DEADLINE = 5


def spawn_w1(workers: WorkerGroup, tenure_dsn: str, port: int) -> WorkerProcess:
    """W1, logging every confirmed lease, connected to PostgreSQL through ``port``."""
    return workers.spawn(
        "w1",
        dsn=rewrite_dsn(tenure_dsn, "127.0.0.1", port),
        poll_interval=0.1,
        env=worker_env(debug=True),
    )


def confirmed_beats(w1: WorkerProcess, job_id: int) -> int:
    return len(w1.events("heartbeat_ok", job=job_id))


@pytest.mark.parametrize("cut", ["blackhole", "reset"])
def test_an_owner_in_doubt_sends_nothing_after_its_conservative_deadline(
    receivers: Receivers,  # first: set up before the workers, so stopped after them
    workers: WorkerGroup,
    ops: App,
    receiver_dsn: str,
    tenure_dsn: str,
    tmp_path: Path,
    cut: str,
) -> None:
    with pg_proxy(tenure_dsn) as pg:
        w1 = spawn_w1(workers, tenure_dsn, pg.port)
        receiver = receivers.start()
        w1.wait_started()
        job = ops.sync.enqueue(
            "keep_sending",
            {"workdir": str(tmp_path), "receivers": {"*": receiver.url}, "period": 0.05},
        )
        t1 = int(w1.wait_event("job_claimed", job=job.id)["token"])
        scope = f"tool-job:{job.id}"

        def arrivals() -> list[dict[str, Any]]:
            return [d for d in receiver.decisions() if d["scope"] == scope]

        wait_until(
            lambda: len(arrivals()) >= ATTEMPTS_BEFORE_CUT,
            message=f"W1's requests never arrived: {notes(tmp_path, 'w1')[-3:]}\n{w1.log()}",
        )
        beats = confirmed_beats(w1, job.id)
        wait_until(lambda: confirmed_beats(w1, job.id) > beats, message=w1.log())
        cut_at = time.monotonic()
        pg.set_mode(cut)

        # The tool keeps wanting to send well past the deadline (what happens to those
        # attempts is asserted below).
        def tried_after_deadline() -> int:
            deadline = last_deadline(w1, job.id)
            return sum(1 for n in notes(tmp_path, "w1") if n["at"] > deadline)

        wait_until(
            lambda: tried_after_deadline() >= ATTEMPTS_AFTER_DEADLINE,
            message=f"W1's tool stopped trying: {notes(tmp_path, 'w1')[-5:]}\n{w1.log()}",
        )
        (tmp_path / "stop").touch()
        wait_until(
            lambda: any(n["step"] == "stopped" for n in notes(tmp_path, "w1")),
            message="W1's tool never stopped",
        )

    deadline = last_deadline(w1, job.id)
    seen = [n for n in notes(tmp_path, "w1") if n["step"] != "stopped"]
    arrived = arrivals()
    times = [d["arrived_monotonic"] for d in arrived]

    # The test can fail: requests did arrive, under W1's token, before the cut.
    assert sum(1 for t in times if t < cut_at) >= ATTEMPTS_BEFORE_CUT, (cut_at, times)
    assert all(d["token"] == t1 and d["decision"] == "accepted" for d in arrived), arrived
    # Nothing arrived after the conservative deadline, nor (but for the request already
    # past its check) after W1 learned that the database did not answer: in doubt, no
    # new irreversible step. That moment normally comes well before the deadline minus
    # the safety margin, so here it is the doubt, not the margin, that stops W1.
    assert max(times) < deadline, (deadline, max(times))
    (unknown,) = w1.events("ownership_unknown", job=job.id, reason="db_error")
    unknown_at = deadline - float(unknown["remaining"])  # at or just after the moment
    assert cut_at < unknown_at < deadline, (cut_at, unknown_at, deadline)
    assert max(times) < min(unknown_at, deadline - MARGIN) + TRANSIT, (unknown_at, max(times))
    # The same from the sender's side, exactly: an attempt that began after W1 knew it was
    # in doubt (``at`` is taken before the ownership check) never left the worker.
    in_doubt = [n for n in seen if n["at"] > unknown_at + 0.002]
    assert in_doubt and all("error" in n for n in in_doubt), in_doubt
    # Every request W1 let out arrived and was applied once; every other one was refused
    # before it left: "unknown" while the lease might still hold, "lost" past the deadline.
    sent = [n for n in seen if "status" in n]
    assert len(sent) == len(arrived) == len(effects(receiver_dsn)), (sent, arrived)
    refused = [n for n in seen if "error" in n]
    assert refused and all(n["at"] > cut_at for n in refused), refused
    assert {n["error"] for n in refused} <= {"OwnershipUnknown", "LeaseLost"}, refused
    assert any(n["error"] == "OwnershipUnknown" and n["at"] < deadline for n in refused), refused
    assert all(n["error"] == "LeaseLost" for n in refused if n["at"] > deadline), refused


@pytest.mark.parametrize("tool", ["watch_cancelled", "await_cancel"])
def test_a_blackholed_owner_stops_its_tool_by_its_conservative_deadline(
    workers: WorkerGroup,
    ops: App,
    tenure_dsn: str,
    tmp_path: Path,
    tool: str,
) -> None:
    """``ctx.cancelled`` (threaded) or CancelledError (async) by deadline + one heartbeat."""
    with pg_proxy(tenure_dsn) as pg:
        w1 = spawn_w1(workers, tenure_dsn, pg.port)
        w1.wait_started()
        job = ops.sync.enqueue(tool, {"workdir": str(tmp_path)})
        w1.wait_event("job_claimed", job=job.id)
        wait_notes(tmp_path, "w1", 1)
        beats = confirmed_beats(w1, job.id)
        wait_until(lambda: confirmed_beats(w1, job.id) > beats, message=w1.log())
        pg.set_mode("blackhole")
        (started, stopped) = wait_notes(tmp_path, "w1", 2, timeout=15.0)[:2]
    assert stopped["step"] == "cancelled", (started, stopped)
    deadline = last_deadline(w1, job.id)
    assert stopped["at"] <= deadline + HEARTBEAT, (
        f"the tool was stopped {stopped['at'] - deadline:.3f} s after W1's deadline"
    )
