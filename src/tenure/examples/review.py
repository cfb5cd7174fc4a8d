"""A review pipeline on tenure: developer agent → QA gate → SecOps gate.

It comes from the design notes of a review engine whose gates did not survive a
restart. That engine lost work in two windows: a crash before a gate recorded its
verdict (``in_progress``), and a crash after the verdict was recorded at the
tracker but before the in-process call that dispatched the next step
(``dispatch_pending``: the tracker then waited forever for a step nobody had
started, and no restart could tell it was missing). Here
every step is a leased job, and a gate's verdict, the record of it for the
tracker (an outbox job) and the next step's job commit in one transaction.

The agents are simulated (they think for a second instead of calling a model):

- ``develop`` writes a patch for the task;
- ``qa`` rejects a first revision without tests, with a reason and a diagnosis;
- ``correct`` is the developer agent's correction: it reads the gate's feedback;
- ``secops`` scans the patch (deterministic, no model) and approves it;
- ``signoff`` is a person: the gate waits at a waitpoint for a maintainer's
  verdict (hours, a weekend), holding no lease and no worker slot meanwhile, and
  ``app.record_verdict`` moves the run on when the maintainer decides;
- ``record_gate_status`` is the outbox of both gates: it records the decision at
  the tracker (the example case service, standing in for the tracker's API) over HTTP, fenced with
  the job's token and idempotency key, so a repeated delivery is replayed, not
  applied again.

Run it (embedded PostgreSQL, worker processes, SIGKILLs in those two
windows, and a report)::

    python -m tenure.examples.review        # the same as: tenure demo --pipeline

Use the pipeline from your own code: ``TENURE_DSN=... tenure worker
tenure.examples.review:app``, then ``app.start_run("review", {"task": "PR-1",
"seconds": 1.0, "tracker": "http://..."})``.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import httpx

from tenure import App, Context, Stage, Verdict
from tenure.fence import raise_for_fence

app = App()

# Short leases, so that a crash shows within seconds (L > R·H + J: 2 > 2·0.5 + 0.5).
agent = functools.partial(app.tool, lease=2.0, heartbeat=0.5, jitter=0.5, backoff=0.2)


@agent()
async def develop(ctx: Context, task: str, seconds: float) -> dict[str, Any]:
    """The developer agent's first attempt at the task."""
    await asyncio.sleep(seconds)
    return {"patch": f"{task}: fix the parser", "revision": 1, "tested": False}


@agent()
async def qa(ctx: Context, task: str, revision: int, tested: bool, seconds: float) -> Verdict:
    """The QA gate: a change without a test goes back with a reason and a diagnosis."""
    await asyncio.sleep(seconds)
    if not tested:
        return Verdict(
            "reject",
            reason="the change has no test",
            diagnosis=f"{task} rev {revision}: add a regression test for the parser branch",
        )
    return Verdict("approve")


@agent()
async def correct(
    ctx: Context, patch: str, revision: int, feedback: dict[str, Any], seconds: float
) -> dict[str, Any]:
    """The developer agent's correction, from the gate's feedback (no re-read of the gate)."""
    await asyncio.sleep(seconds)
    return {"patch": f"{patch} + {feedback['diagnosis']}", "revision": revision + 1, "tested": True}


@agent()
async def secops(ctx: Context, patch: str, seconds: float) -> Verdict:
    """The SecOps gate: a deterministic scan, cheap to repeat."""
    await asyncio.sleep(seconds / 2)
    if "eval(" in patch:
        return Verdict("reject", reason="dynamic code execution", diagnosis="remove eval()")
    return Verdict("approve")


@agent()
async def signoff(ctx: Context, task: str) -> Verdict:
    """A maintainer signs the merge off: the gate waits for a person, holding nothing.

    The person answers with ``app.record_verdict(run_id, "signoff", token, verdict)`` (the
    token of this job, as shown by ``tenure jobs list --state waiting``); that verdict ends
    the job, so this tool is not called again. A maintainer who never answers lets the
    waitpoint time out: the tool is then called again, and rejects.
    """
    wp = ctx.waitpoint("maintainer", timeout=7 * 24 * 3600)
    if wp.pending:
        ctx.suspend(wp, request={"task": task, "asks": "sign off the merge"})
    return Verdict("reject", reason="nobody signed off", diagnosis=f"{task}: ask again")


@agent()
async def record_gate_status(
    ctx: Context, task: str, stage: str, decision: str, next_stages: list[str], tracker: str
) -> dict[str, Any]:
    """The outbox: record the gate's decision at the tracker, fenced and idempotent.

    An answer that never came is simply retried: the idempotency key is the job's, the
    same on every attempt, so the tracker replays what it already applied.
    """
    title = f"{task}: {stage} {decision}, next: {', '.join(next_stages) or 'done'}"
    async with httpx.AsyncClient(base_url=tracker, timeout=5) as client:
        post = client.post("/cases", json={"title": title}, auth=ctx.http_auth("gate-status"))
        response = await post
    raise_for_fence(response)
    response.raise_for_status()
    return {"case_id": response.json()["case_id"]}


review = app.pipeline(
    "review",
    [
        Stage("develop", next="qa"),
        Stage("qa", on={"approve": "secops", "reject": "correct"}, outbox=["record_gate_status"]),
        Stage("correct", next="qa"),
        Stage(
            "secops",
            on={"approve": "signoff", "reject": "correct"},
            outbox=["record_gate_status"],
        ),
        Stage("signoff", on={"approve": (), "reject": "correct"}),
    ],
)


def main() -> None:
    """``tenure demo --pipeline``: this pipeline, its workers SIGKILLed as it runs."""
    import subprocess
    import sys

    raise SystemExit(subprocess.call([sys.executable, "-m", "tenure", "demo", "--pipeline"]))


if __name__ == "__main__":
    main()
