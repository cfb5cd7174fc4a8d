"""The "unpleasant test", end to end, with real processes and a real receiver.

W1 claims a job and sends its request to the example case service; then W1 is
cut off from PostgreSQL (a FaultProxy in ``blackhole`` or ``reset``) or frozen
with SIGSTOP; its lease runs out; W2 (connected directly) claims the same job
under a higher token, sends the *same* request (same idempotency key, same
body) and commits; then W1 gets its link back. What W1's request did is the
variant:

``late`` (a)
    A second FaultProxy between W1 and the receiver holds W1's request until
    W2's was accepted; released, it arrives late → 409 stale_fence.
``lost_response`` (b)
    W1's request is applied but the proxy drops the answer, so W1 times out
    (outcome unknown); W2 repeats it with the same key → replayed, not applied
    again. After the heal, W1's honest repeat (through ``ctx.http_auth``) is
    stopped before it leaves the worker; a repeat that skips the check is
    refused as stale, although the receiver applied that very key for W1.
``retry`` (c)
    W1's request is applied and answered; after the heal W1 repeats it with
    its old token, skipping its own ownership check → 409 stale_fence.

Always: W1 never extends or commits after the cut, the effect exists exactly
once, the job ends ``succeeded`` with W2's result and token, and at no moment
did W1's conservative deadline reach past W2's claim. Every combination runs
under two seeds, which move the cut to a different point of W1's heartbeat
cycle and change how often W2 polls for work.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from tests.apps.fence_app import HEARTBEAT, case_key
from tests.integration.fence.helpers import Receiver, Receivers, Wire
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup, WorkerProcess, wait_job
from tests.system.e2e.helpers import (
    TERMINAL,
    command,
    confirmations,
    effects,
    highest_token,
    last_deadline,
    notes,
    pg_proxy,
    wait_decision,
    wait_notes,
    worker_env,
)

from tenure import App
from tenure._chaos._proxy import FaultProxy, rewrite_dsn
from tenure.fence import fence_headers

CUTS = ("blackhole", "reset")
VARIANTS = ("late", "lost_response", "retry")
SEEDS = (1, 2)
WIRE_MODE = {"late": "hold", "lost_response": "drop_responses", "retry": "pass"}
# W1 must wait out the hold in (a); in (b) its timeout is the "outcome unknown".
W1_TIMEOUT = {"late": 30.0, "lost_response": 1.0, "retry": 10.0}
SECRET = b"e2e-fence-secret"
OUTCOMES = {"succeeded", "failed", "retried", "released", "cancelled"}  # journal kinds


def case_title(variant: str, seed: int) -> str:
    return f"{variant} seed {seed}"


@dataclass
class Stage:
    """Everything one scenario runs on (all of it cleaned up by the fixtures)."""

    workers: WorkerGroup
    ops: App
    journal: Journal
    receivers: Receivers
    receiver_dsn: str
    tenure_dsn: str
    workdir: Path


@dataclass
class Run:
    """What a scenario did, for the assertions."""

    fault: str
    variant: str
    job_id: int
    key: str
    t1: int
    t2: int
    cut_at: float
    receiver: Receiver
    w1: WorkerProcess
    w2: WorkerProcess


@pytest.fixture
def stage(
    receivers: Receivers,  # first: set up before the workers, so stopped after them
    workers: WorkerGroup,
    ops: App,
    journal: Journal,
    receiver_dsn: str,
    tenure_dsn: str,
    tmp_path: Path,
) -> Stage:
    return Stage(workers, ops, journal, receivers, receiver_dsn, tenure_dsn, tmp_path)


def unpleasant(
    stage: Stage,
    *,
    fault: str,
    variant: str,
    seed: int,
    secret: bytes | None = None,
    before_cut: Callable[[Receiver, int, int], None] | None = None,
) -> Run:
    """Play the scenario (see the module docstring) and return what happened."""
    rng = random.Random(f"{fault}/{variant}/{seed}")
    with ExitStack() as stack:
        w1_dsn = stage.tenure_dsn
        pg = None
        if fault != "sigstop":
            pg = stack.enter_context(pg_proxy(stage.tenure_dsn))
            w1_dsn = rewrite_dsn(stage.tenure_dsn, pg.host, pg.port)
        w1 = stage.workers.spawn(  # it starts while the receiver does
            "w1",
            dsn=w1_dsn,
            poll_interval=0.1,
            env=worker_env(
                scripted=True, debug=True, timeout=W1_TIMEOUT[variant], signing_key=secret
            ),
        )
        receiver = stage.receivers.start(secret=secret)
        wire = stack.enter_context(FaultProxy("127.0.0.1", receiver.port))
        wire.set_mode(WIRE_MODE[variant])
        w1.wait_started()
        job = stage.ops.sync.enqueue(
            "create_case",
            {
                "workdir": str(stage.workdir),
                "title": case_title(variant, seed),
                "receivers": {"w1": f"http://127.0.0.1:{wire.port}", "*": receiver.url},
            },
        )
        key = case_key(job.id)
        t1 = int(w1.wait_event("job_claimed", job=job.id)["token"])
        # W2 starts now, as any other worker of the pool would be running: it polls
        # (at a seed-chosen pace) and can only claim the job once W1's lease expired.
        w2 = stage.workers.spawn(
            "w2",
            poll_interval=rng.choice((0.05, 0.1, 0.2)),
            env=worker_env(signing_key=secret),
        )

        # W1's request is on the wire before anything breaks.
        if variant == "late":
            wait_until(lambda: wire.bytes_held > 0, message="W1's request never reached the proxy")
        else:
            wait_decision(receiver, key, "accepted", t1)
            first = wait_notes(stage.workdir, "w1", 1)[0]
            if variant == "lost_response":
                assert first["error"] == "timeout", first  # W1 cannot know it was applied
                wire.set_mode("pass")  # the HTTP path heals; only the database stays cut
            else:
                assert first["status"] == 201 and not first["replayed"], first
        if before_cut is not None:
            before_cut(receiver, job.id, t1)

        # Cut at a seed-chosen point of W1's heartbeat cycle (a deliberate phase shift,
        # not a wait for anything).
        beats = len(w1.events("heartbeat_ok", job=job.id))
        wait_until(
            lambda: len(w1.events("heartbeat_ok", job=job.id)) > beats,
            message=f"W1 stopped confirming its lease:\n{w1.log()}",
        )
        time.sleep(rng.uniform(0, HEARTBEAT))
        cut_at = time.monotonic()
        if pg is None:
            w1.pause()
        else:
            pg.set_mode(fault)

        taken = wait_job(
            stage.journal, job.id, lambda j: j["token"] > t1, "was never reclaimed", stage.workers
        )
        assert taken["owner"] == "w2", taken
        t2 = int(taken["token"])
        wait_job(
            stage.journal, job.id, lambda j: j["state"] in TERMINAL, "never ended", stage.workers
        )
        if variant == "late":
            wait_decision(receiver, key, "accepted", t2)  # W2's request is in ...
            wire.release()  # ... and only now does W1's arrive
            wait_decision(receiver, key, "stale", t1)

        # W1 gets its link back (or wakes up) believing nothing happened.
        if pg is None:
            w1.resume()
        else:
            pg.set_mode("pass")
        w1_moves = {"late": [], "lost_response": ["post", "raw"], "retry": ["raw"]}[variant]
        command(stage.workdir, "w1", *w1_moves, "return")
        wait_notes(stage.workdir, "w1", 2 + len(w1_moves))
        wait_until(
            lambda: (
                w1.has_event("call_abandoned", job=job.id)
                or w1.has_event("result_rejected", job=job.id)
            ),
            timeout=10.0,
            message=f"W1 neither abandoned nor was refused its commit:\n{w1.log()}",
        )
        if w1.has_event("result_rejected", job=job.id):  # logged just before it is journaled
            wait_until(
                lambda: any(
                    e["token"] == t1 for e in stage.journal.events(job.id, "result_rejected")
                ),
                message="W1's refused commit never reached the journal",
            )
        if "raw" in w1_moves:
            wait_decision(receiver, key, "stale", t1)
    return Run(fault, variant, job.id, key, t1, t2, cut_at, receiver, w1, w2)


def check(stage: Stage, run: Run) -> None:
    """What the test demands (W1 neither extends, nor commits, nor causes a second effect;
    W2's result stands under W2's token), checked from every independent source."""
    t1, t2, w1, w2 = run.t1, run.t2, run.w1, run.w2
    logs = stage.workers.logs()

    # The job: W2's result under W2's token; W1 committed nothing.
    row = stage.journal.job(run.job_id)
    assert row["state"] == "succeeded", (row, logs)
    assert row["owner"] == "w2" and row["token"] == t2 and t2 > t1 and row["attempt"] == 2, row
    events = stage.journal.events(run.job_id)
    trail = [(e["kind"], e["token"], e["worker"]) for e in events]
    assert [(e[1], e[2]) for e in trail if e[0] == "succeeded"] == [(t2, "w2")], trail
    # The journal records W1's loss under W1's token (the reclaim journals the expired
    # lease; a refused commit is journaled too), and no outcome under W1's token.
    w1_kinds = {kind for kind, token, _ in trail if token == t1}
    assert w1_kinds & {"lease_expired", "heartbeat_lost", "result_rejected"}, trail
    assert not w1_kinds & OUTCOMES, trail
    (reclaim,) = [e for e in events if e["kind"] == "job_claimed" and e["token"] == t2]
    assert reclaim["detail"] == {"reclaimed_from": "w1", "previous_token": t1}, reclaim

    # The effect: exactly one case, made by W2 only if W1's request never got in.
    (case,) = effects(stage.receiver_dsn)
    assert case["idempotency_key"] == run.key
    assert case["token"] == (t2 if run.variant == "late" else t1), case
    assert row["result"] == {
        "worker": "w2",
        "token": t2,
        "status": 201,
        "replayed": run.variant != "late",
        "case_id": case["id"],
    }, row["result"]

    # The receiver's log: every request of this key, in the order it was decided.
    expected = {
        "late": [("accepted", t2), ("stale", t1)],
        "lost_response": [("accepted", t1), ("replayed", t2), ("stale", t1)],
        "retry": [("accepted", t1), ("replayed", t2), ("stale", t1)],
    }[run.variant]
    log = [d for d in run.receiver.decisions(run.key) if d["decision"] != "bad_signature"]
    assert [(d["decision"], d["token"]) for d in log] == expected, log
    assert all(d["status"] == 409 for d in log if d["decision"] == "stale"), log
    assert highest_token(stage.receiver_dsn, f"tool-job:{run.job_id}") == t2

    # What W1 saw: a stale refusal naming both tokens (and a local refusal first, in b).
    seen = notes(stage.workdir, "w1")
    stale_answers = [n for n in seen if n.get("status") == 409]
    if run.variant == "lost_response":  # its honest repeat never left the worker
        assert seen[0]["error"] == "timeout", seen
        assert seen[1]["step"] == "post" and seen[1]["error"] == "LeaseLost", seen
    (stale,) = stale_answers
    assert stale["step"] == ("post" if run.variant == "late" else "raw"), seen
    assert stale["body"] == {
        "error": "stale_fence",
        "scope": f"tool-job:{run.job_id}",
        "token": t1,
        "highest": t2,
    }, stale
    assert seen[-1]["step"] == "return", seen

    # W1 never extended after the cut, and it knew it had lost.
    assert all(sent < run.cut_at + 0.002 for sent, _ in confirmations(w1, run.job_id)), (
        run.cut_at,
        confirmations(w1, run.job_id),
    )
    # W1 learned it had lost: its heartbeat thread said so (the deadline passed, or the
    # database answered zero rows), or the database refused its commit.
    lost = w1.events("heartbeat_lost", job=run.job_id, token=t1)
    rejected = w1.events("result_rejected", job=run.job_id, token=t1)
    assert lost or rejected, w1.log()
    assert all(e["reason"] in ("deadline_passed", "zero_rows") for e in lost), lost
    if rejected:
        assert "result_rejected" in w1_kinds, trail
    if run.fault != "sigstop":
        assert w1.has_event("ownership_unknown", job=run.job_id, reason="db_error"), w1.log()

    # No overlap: W1's last conservative deadline passed before W2 even asked for the
    # job, and before W2's request reached the receiver (all on CLOCK_MONOTONIC).
    # (The claim runs a few milliseconds after W2 sent it; 0.5 s absorbs a slow statement.)
    w1_deadline = last_deadline(w1, run.job_id)
    (w2_claim_sent, _) = confirmations(w2, run.job_id)[0]
    assert w1_deadline < w2_claim_sent + 0.5, (w1_deadline, w2_claim_sent)
    (w2_arrival,) = [d["arrived_monotonic"] for d in log if d["token"] == t2]
    assert w1_deadline < w2_arrival, (w1_deadline, w2_arrival)
    assert all(
        d["arrived_monotonic"] < w1_deadline
        for d in log
        if d["decision"] == "accepted" and d["token"] == t1
    ), log


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("cut", CUTS)
def test_a_cut_off_owner_changes_nothing_after_its_lease(
    stage: Stage, cut: str, variant: str, seed: int
) -> None:
    check(stage, unpleasant(stage, fault=cut, variant=variant, seed=seed))


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_sigstopped_owner_changes_nothing_after_its_lease(stage: Stage, variant: str) -> None:
    check(stage, unpleasant(stage, fault="sigstop", variant=variant, seed=1))


def test_signed_tokens_end_to_end_and_a_forged_token_cannot_lock_out_the_new_owner(
    stage: Stage,
) -> None:
    """Workers sign, the receiver checks; a forged huge token is refused before it counts."""
    forged: list[httpx.Response] = []

    def forge(receiver: Receiver, job_id: int, t1: int) -> None:
        scope, key = f"tool-job:{job_id}", case_key(job_id)
        assert highest_token(stage.receiver_dsn, scope) == t1
        body = {"title": case_title("retry", 1)}  # the very request the owners send
        with httpx.Client(base_url=receiver.url, timeout=10) as client:
            sent = client.build_request("POST", "/cases", json=body)
            request: Wire = {"method": sent.method, "path": str(sent.url), "body": sent.content}
            honest = fence_headers(scope, t1, key, SECRET, **request)
            for headers in (
                fence_headers(scope, 2**62, key, b"not-the-secret", **request),  # forged
                fence_headers(scope, 2**62, key),  # unsigned
                {**honest, "X-Execution-Fence": str(2**62)},  # a real signature, tampered
            ):
                forged.append(client.post("/cases", json=body, headers=headers))
        assert highest_token(stage.receiver_dsn, scope) == t1  # the mark did not move

    run = unpleasant(
        stage, fault="blackhole", variant="retry", seed=1, secret=SECRET, before_cut=forge
    )
    check(stage, run)
    assert [r.status_code for r in forged] == [403, 403, 403]
    assert [r.json()["error"] for r in forged] == ["bad_signature"] * 3
    assert [d["decision"] for d in run.receiver.decisions(run.key)].count("bad_signature") == 3
    # Both owners signed (this receiver refuses anything else), and W1's late retry,
    # validly signed with its old token, was refused for being stale, not for its signature.
    late = [n for n in notes(stage.workdir, "w1") if n.get("status") == 409]
    assert [n["body"]["error"] for n in late] == ["stale_fence"], late
