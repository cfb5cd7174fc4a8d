"""Durable agent runs, pydantic-ai's (`TenureDurability`) and the OpenAI Agents SDK's
(`TenureRunner`), with real worker processes, a fake model and a fenced receiver that counts
effects.

The run's worker is SIGKILLed at each boundary (inside a model request, after the model's
answer and before the tool, after the tool's effect and before it returned, after the tool
and inside the next model request, inside a child job's tool) and SIGSTOPped past its
lease; another worker resumes the run. Each time: the model answered once per step (a
replay never asks it again; a request cut off before it answered is asked again), each
intended tool call has exactly one applied effect, the answer is the uninterrupted run's,
and the paused old owner's requests and checkpoints are refused. Tool-call ids are fresh
random ones on every model call, or ``call_0`` on every turn: the run's keys never use
them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.apps import agent_run_app, openai_run_app
from tests.apps.agent_run_app import EXPECTED
from tests.integration.fence.helpers import Receiver, Receivers
from tests.support.schemas import fresh_schema_dsn
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup, wait_job

import tenure
from tenure.examples.case_service import effects_summary

INTENDED_EFFECTS = 3  # two cases (post, twice) and one capture (charge)


@pytest.fixture
def receiver_dsn(database_dsn: str) -> str:
    return fresh_schema_dsn(database_dsn, "r")


@pytest.fixture
def receiver(receiver_dsn: str, tmp_path: Path) -> Iterator[Receiver]:
    pool = Receivers(receiver_dsn, tmp_path / "receiver")
    (tmp_path / "receiver").mkdir()
    yield pool.start()
    pool.stop_all()


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "agent"
    folder.mkdir()
    return folder


@pytest.fixture(params=["pydantic_ai", "openai_agents"])
def framework(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def workers(
    tenure_dsn: str, tmp_path: Path, receiver: Receiver, notes: Path, framework: str
) -> Iterator[WorkerGroup]:
    module = {"pydantic_ai": "agent_run_app", "openai_agents": "openai_run_app"}[framework]
    with WorkerGroup(tenure_dsn, tmp_path, app=f"tests.apps.{module}:app") as group:
        group.env.update({"RECEIVER_URL": receiver.url, "AGENT_NOTES": str(notes)})
        yield group


@pytest.fixture
def producer(tenure_dsn: str, framework: str) -> Iterator[tenure.App]:
    build = {"pydantic_ai": agent_run_app.build, "openai_agents": openai_run_app.build}
    app, _ = build[framework](tenure_dsn)
    yield app
    app.close()


def lines(notes: Path, first: str) -> list[list[str]]:
    path = notes / "notes.txt"
    if not path.exists():
        return []
    return [w for w in (ln.split() for ln in path.read_text().splitlines()) if w[:1] == [first]]


def only_fresh_ids_for_openai(framework: str, ids: str) -> None:
    if framework == "openai_agents" and ids == "call_0":
        pytest.skip("the OpenAI Agents SDK itself fails a run whose model reuses a call id")


def start(producer: tenure.App, prompt: str, key: str = "ticket-7") -> tenure.Job:
    return producer.sync.enqueue("agent:desk", {"prompt": prompt}, idempotency_key=key)


def finish(journal: Journal, job: tenure.Job, workers: WorkerGroup) -> dict[str, object]:
    return wait_job(
        journal, job.id, lambda j: j["state"] in ("succeeded", "failed"), "run", workers, 90
    )


def check_run(
    journal: Journal, job: tenure.Job, receiver_dsn: str, notes: Path, workers: WorkerGroup
) -> dict[str, object]:
    """The run succeeded with the uninterrupted answer; the model answered each step once;
    each intended effect was applied once."""
    done = finish(journal, job, workers)
    assert done["state"] == "succeeded", (done, workers.logs()[-4000:])
    assert done["result"] == EXPECTED
    answered = Counter(step for _, step, _ in lines(notes, "answer"))
    model_steps = journal._rows(
        "SELECT count(*) AS n FROM tenure_steps WHERE job_id = %(id)s AND kind = 'model'",
        {"id": job.id},
    )[0]["n"]
    assert answered == Counter({"1": 1, "2": 1, "3": 1}) and model_steps == 3
    assert effects_summary(receiver_dsn) == (INTENDED_EFFECTS, 0)
    return done


@pytest.mark.parametrize("ids", ["random", "call_0"])
def test_an_uninterrupted_run_answers_with_one_effect_per_tool_call(
    workers: WorkerGroup,
    producer: tenure.App,
    journal: Journal,
    receiver_dsn: str,
    notes: Path,
    ids: str,
    framework: str,
) -> None:
    only_fresh_ids_for_openai(framework, ids)
    workers.spawn("a", concurrency=4).wait_started()
    job = start(producer, f"ids={ids}")
    again = start(producer, f"ids={ids}")  # started twice with one key: one run
    assert again.id == job.id and not again.created
    check_run(journal, job, receiver_dsn, notes, workers)
    keys = [
        r["idempotency_key"]
        for r in journal._rows("SELECT idempotency_key FROM tenure_jobs ORDER BY id", {})
    ]
    assert keys == ["ticket-7", f"tool-job:{job.id}:tool.1.1"]  # the run and its child


@pytest.mark.parametrize(
    ("point", "ids"),
    [
        ("model1", "random"),
        ("before_tool", "random"),
        ("in_tool", "random"),
        ("in_tool", "call_0"),
        ("model2", "random"),
        ("in_child", "random"),
    ],
)
def test_a_run_killed_at_a_boundary_is_resumed_by_another_worker(
    workers: WorkerGroup,
    producer: tenure.App,
    journal: Journal,
    receiver_dsn: str,
    notes: Path,
    point: str,
    ids: str,
    framework: str,
) -> None:
    only_fresh_ids_for_openai(framework, ids)
    if point == "in_child":
        (notes / "hold_child").touch()
    first = workers.spawn("a", concurrency=4)
    first.wait_started()
    (notes / "hold").write_text(point)
    job = start(producer, f"ids={ids}")
    wait_until(lambda: lines(notes, "held"), timeout=30, message=f"never held at {point}")
    assert first.kill() == -9
    (notes / "release").touch()
    workers.spawn("b", concurrency=4).wait_started()
    done = check_run(journal, job, receiver_dsn, notes, workers)
    assert done["owner"] == "b"
    calls = Counter(step for _, step, _ in lines(notes, "call"))
    # A replay never asks the model: only a request cut off before its answer is asked again.
    assert calls == Counter(
        {"1": 2 if point == "model1" else 1, "2": 2 if point == "model2" else 1, "3": 1}
    )


@pytest.mark.parametrize("point", ["sending", "model2"])
def test_a_paused_owners_requests_and_checkpoints_are_refused(
    workers: WorkerGroup,
    producer: tenure.App,
    journal: Journal,
    receiver: Receiver,
    receiver_dsn: str,
    notes: Path,
    point: str,
) -> None:
    first = workers.spawn("a", concurrency=4)
    first.wait_started()
    (notes / "hold").write_text(point)
    job = start(producer, "ids=random")
    wait_until(lambda: lines(notes, "held"), timeout=30, message=f"never held at {point}")
    first.pause()  # SIGSTOP, past its lease
    workers.spawn("b", concurrency=4).wait_started()
    done = check_run(journal, job, receiver_dsn, notes, workers)
    (notes / "release").touch()
    first.resume()
    if point == "sending":
        # The old owner's request reached the receiver with its old token: refused.
        wait_until(
            lambda: [p for p in lines(notes, "posted") if p[2] == "a"],
            timeout=30,
            message="the paused owner never sent its request",
        )
        (stale,) = [p for p in lines(notes, "posted") if p[2] == "a"]
        assert stale[4] == "409" and int(stale[3]) < int(str(done["token"]))
        refused = [int(d["token"]) for d in receiver.decisions() if d["decision"] == "stale"]
        # a's request was refused once; under load b may have lost a lease too, and a
        # request under that token been refused as well: every refusal is of an older one.
        assert refused.count(int(stale[3])) == 1, refused
        assert all(t < int(str(done["token"])) for t in refused), (refused, done)
    else:
        # The old owner's model step finished after the takeover: its checkpoint is refused.
        rejected = first.wait_event("step_rejected", timeout=30, job=job.id)
        assert rejected["step"].startswith("model.2")
    assert effects_summary(receiver_dsn) == (INTENDED_EFFECTS, 0)  # nothing of a's applied
    assert journal.kinds(job.id).count("succeeded") == 1
