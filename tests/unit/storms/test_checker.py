"""The checker on synthetic histories: a clean run passes, and each violation class is flagged.

Each test starts from one clean history of three jobs (job 2 was orphaned by a
kill and taken over; its first owner's late request was refused by the
receiver) and breaks exactly one thing, so each assertion can only fail for
the reason it names.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from tests.support.storm.checker import Evidence, Fault, check

T0 = 1_000.0  # Unix seconds of the synthetic run
LEASE = 3.0
OFFSET = 900.0  # wall - monotonic on the synthetic machine


def job(
    job_id: int, token: int, *, state: str = "succeeded", result_token: int | None = None
) -> dict[str, Any]:
    return {
        "id": job_id,
        "idempotency_key": f"k{job_id}",
        "state": state,
        "token": token,
        "attempt": 1,
        "result": {
            "token": token if result_token is None else result_token,
            "effect_key": f"tool-job:{job_id}:case",
        }
        if state == "succeeded"
        else None,
    }


def event(
    kind: str, job_id: int, token: int, at: float, worker: str, **extra: Any
) -> dict[str, Any]:
    return {"kind": kind, "job_id": job_id, "token": token, "at": at, "worker": worker, **extra}


def decision(outcome: str, job_id: int, token: int, at: float) -> dict[str, Any]:
    return {
        "decision": outcome,
        "scope": f"tool-job:{job_id}",
        "key": f"tool-job:{job_id}:case",
        "token": token,
        "arrived_wall": at,
    }


def clean() -> Evidence:
    jobs = [job(1, 1), job(2, 4), job(3, 3)]
    journal = [
        event("job_claimed", 1, 1, T0 + 0.1, "a", detail={}),
        event("job_claimed", 2, 2, T0 + 0.1, "b", detail={}),
        event("job_claimed", 3, 3, T0 + 0.2, "a", detail={}),
        event("succeeded", 1, 1, T0 + 0.5, "a"),
        event("succeeded", 3, 3, T0 + 0.6, "a"),
        # b was killed at T0 + 1; its lease (last beat T0 + 0.9) ran out at T0 + 3.9
        event("lease_expired", 2, 2, T0 + 4.0, "b", duration_ms=100),
        event(
            "job_claimed",
            2,
            4,
            T0 + 4.0,
            "a",
            detail={"previous_token": 2, "reclaimed_from": "b"},
        ),
        event("succeeded", 2, 4, T0 + 4.5, "a"),
    ]
    effects = [
        {"id": 1, "idempotency_key": "tool-job:1:case", "scope": "tool-job:1", "token": 1},
        {"id": 2, "idempotency_key": "tool-job:3:case", "scope": "tool-job:3", "token": 3},
        {"id": 3, "idempotency_key": "tool-job:2:case", "scope": "tool-job:2", "token": 4},
    ]
    decisions = [
        decision("accepted", 1, 1, T0 + 0.4),
        decision("accepted", 3, 3, T0 + 0.5),
        decision("accepted", 2, 4, T0 + 4.3),
        decision("stale", 2, 2, T0 + 4.4),
    ]
    mono = T0 - OFFSET
    history = [
        {"ev": "clock", "worker": "b", "pid": 20, "wall": T0, "mono": mono},
        {
            "ev": "job_claimed",
            "worker": "b",
            "pid": 20,
            "token": 2,
            "wall": T0 + 0.1,
            "mono": mono + 0.1,
            "deadline_monotonic": mono + 3.1,
        },
        {
            "ev": "heartbeat_ok",
            "worker": "b",
            "pid": 20,
            "token": 2,
            "wall": T0 + 0.9,
            "mono": mono + 0.9,
            "deadline_monotonic": mono + 3.9,
        },
        {
            "ev": "tool_request_started",
            "worker": "b",
            "pid": 20,
            "token": 2,
            "key": "tool-job:2:case",
            "wall": T0 + 0.95,
            "mono": mono + 0.95,
        },
    ]
    return Evidence(
        acknowledged=["k1", "k2", "k3"],
        jobs=jobs,
        journal=journal,
        decisions=decisions,
        effects=effects,
        history=history,
        faults=[Fault("kill", "b", T0 + 1.0, T0 + 1.0, "start", True, "rc=-9")],
        lease=LEASE,
        sweep=0.2,
        clock_offset=OFFSET,
        expected_faults=("kill",),
    )


def broken(**changes: Any) -> Evidence:
    return replace(copy.deepcopy(clean()), **changes)


def test_a_clean_history_passes_with_its_figures() -> None:
    report = check(clean())
    assert report.violations == []
    assert report.verdict == "pass"
    summary = report.summary()
    assert summary["succeeded"] == 3
    assert summary["reclaims"] == 1 and summary["reexecutions"] == 1
    assert summary["fence_rejections"] == 1 and summary["stale_sends"] == 1
    assert summary["orphans"] == 1
    assert summary["orphan_age_max"] == pytest.approx(LEASE + 0.1)
    assert summary["recovery_max"] == pytest.approx(3.0)  # kill at +1, taken over at +4
    assert summary["recovery_bound"] == pytest.approx(LEASE + 0.2 + 1.0)
    assert summary["coverage"] == {"kill": {"injected": 1, "fired": 1, "effective": 1}}


def test_an_acknowledged_job_that_is_missing_is_lost() -> None:
    evidence = clean()
    report = check(replace(evidence, jobs=[j for j in evidence.jobs if j["id"] != 3]))
    assert report.lost == ["acknowledged key k3 has no job"]
    assert report.verdict == "fail"


def test_an_acknowledged_job_that_never_ended_is_lost() -> None:
    evidence = clean()
    jobs = [job(1, 1), job(2, 4), job(3, 3, state="running")]
    report = check(replace(evidence, jobs=jobs))
    assert report.lost == ["acknowledged key k3 (job 3 running) never ended"]


def test_a_success_whose_effect_was_never_applied_is_lost() -> None:
    evidence = clean()
    effects = [e for e in evidence.effects or [] if e["scope"] != "tool-job:3"]
    report = check(replace(evidence, effects=effects))
    assert report.lost == ["job 3 succeeded but its effect tool-job:3:case was never applied"]


def test_two_outcomes_for_one_job_are_a_double_commit() -> None:
    evidence = clean()
    journal = [*evidence.journal, event("succeeded", 2, 2, T0 + 5.0, "b")]
    report = check(replace(evidence, journal=journal))
    assert report.double_commits == ["job 2: 2 outcomes succeeded@4, succeeded@2"]


def test_a_result_of_another_token_is_a_double_commit() -> None:
    evidence = clean()
    jobs = [job(1, 1), job(2, 4, result_token=2), job(3, 3)]
    report = check(replace(evidence, jobs=jobs))
    assert report.double_commits == ["job 2: result of token 2 committed under token 4"]


def test_an_effect_applied_twice_is_a_duplicate() -> None:
    evidence = clean()
    extra = {"id": 4, "idempotency_key": "tool-job:1:case", "scope": "tool-job:1", "token": 1}
    report = check(replace(evidence, effects=[*(evidence.effects or []), extra]))
    assert report.duplicate_effects == ["tool-job:1:case applied 2 times (tokens [1, 1])"]


def test_a_lower_token_applied_after_a_higher_one_is_a_stale_acceptance() -> None:
    evidence = clean()
    extra = {"id": 4, "idempotency_key": "tool-job:2:other", "scope": "tool-job:2", "token": 2}
    report = check(replace(evidence, effects=[*(evidence.effects or []), extra]))
    assert report.stale_accepted == [
        "tool-job:2:other applied under token 2 after token 4 of tool-job:2"
    ]


def test_a_replay_to_the_stale_owner_is_a_stale_acceptance() -> None:
    """Without the high-water check the receiver answers the old owner's repeat with the
    stored success instead of 409: the stale owner is told 'done'."""
    evidence = clean()
    decisions = [
        d if d["decision"] != "stale" else {**d, "decision": "replayed"} for d in evidence.decisions
    ]
    report = check(replace(evidence, decisions=decisions))
    assert report.stale_accepted == [
        "tool-job:2:case replayed to token 2 although token 4 applied it"
    ]


def test_without_an_effects_table_decisions_alone_catch_a_stale_acceptance() -> None:
    evidence = clean()
    decisions = [*evidence.decisions, decision("accepted", 2, 2, T0 + 4.6)]
    report = check(replace(evidence, effects=None, decisions=decisions))
    assert "tool-job:2:case accepted under token 2 after token 4" in report.stale_accepted
    assert report.duplicate_effects == ["tool-job:2:case applied 2 times (tokens [4, 2])"]


def test_a_token_drawn_twice_is_flagged() -> None:
    evidence = clean()
    journal = [*evidence.journal, event("job_claimed", 3, 1, T0 + 5, "a", detail={})]
    report = check(replace(evidence, journal=journal))
    assert report.token_problems == ["tokens drawn more than once: 1"]


def test_a_token_a_worker_was_given_but_the_database_lost_is_flagged() -> None:
    evidence = clean()
    told = {"ev": "job_claimed", "worker": "a", "pid": 1, "token": 9, "wall": T0, "mono": 0}
    report = check(replace(evidence, history=[*evidence.history, told]))
    assert report.token_problems == [
        "tokens workers were given that the database never recorded: 9"
    ]


def test_tokens_that_did_not_increase_across_a_restart_are_flagged() -> None:
    evidence = clean()
    assert check(replace(evidence, restarts=[T0 + 0.15])).token_problems == []
    journal = [dict(e) for e in evidence.journal]
    journal[0]["at"] = T0 + 0.3  # token 1 drawn after the restart, token 2 before it
    report = check(replace(evidence, journal=journal, restarts=[T0 + 0.15]))
    assert report.token_problems == [
        f"after the restart at {T0 + 0.15:.3f} a token 1 was drawn, not above 2 from before it"
    ]


def test_a_holder_who_believed_in_its_lease_after_the_takeover_is_flagged() -> None:
    evidence = clean()
    history = [dict(e) for e in evidence.history]
    history[2]["deadline_monotonic"] += 0.5  # b believed in the lease until T0 + 4.4
    report = check(replace(evidence, history=history))
    assert report.deadline_problems == [
        "job 2: token 2's holder believed it owned the job until 0.400 s after token 4 took it"
    ]


def test_a_request_sent_past_the_senders_own_deadline_is_flagged() -> None:
    evidence = clean()
    history = [dict(e) for e in evidence.history]
    history[3]["mono"] = history[2]["deadline_monotonic"] + 0.25
    report = check(replace(evidence, history=history))
    assert report.deadline_problems == [
        "token 2 sent tool-job:2:case 0.250 s past its own deadline"
    ]


def test_a_lease_declared_lost_right_after_its_grant_is_flagged() -> None:
    """A claim that waited out an outage for a connection, its clock started before it was
    sent: the worker threw the lease away the moment it was granted."""
    evidence = clean()
    journal = [dict(e) for e in evidence.journal]
    lost_later = event("heartbeat_lost", 2, 2, T0 + 0.1 + LEASE, "b", code="deadline_passed")
    assert check(replace(evidence, journal=[*journal, lost_later])).deadline_problems == []
    thrown_away = event("heartbeat_lost", 3, 3, T0 + 0.248, "a", code="deadline_passed")
    report = check(replace(evidence, journal=[*journal, thrown_away]))
    assert report.deadline_problems == [
        "job 3: token 3's lease was declared lost (deadline_passed) 0.048 s after it was granted"
    ]


def test_a_faked_monotonic_clock_is_only_compared_with_itself() -> None:
    evidence = clean()
    history = [dict(e) for e in evidence.history]
    history[0]["faketime"] = "+0 x1.5"
    history[2]["deadline_monotonic"] += 0.5
    assert check(replace(evidence, history=history)).deadline_problems == []


def test_a_late_takeover_breaks_the_recovery_bound() -> None:
    evidence = clean()
    journal = [dict(e) for e in evidence.journal]
    for e in journal:
        if e["job_id"] == 2 and e["at"] == T0 + 4.0:
            e["at"] = T0 + 6.0  # the lease ended at +3.9; nobody took the job for 2.1 s
            if e["kind"] == "lease_expired":
                e["duration_ms"] = 2100
    report = check(replace(evidence, journal=journal))
    assert report.recovery_problems == [
        f"kill on b at {T0 + 1.0:.3f}: orphans taken over after 5.000 s (bound 4.200 s)"
    ]
    assert report.orphan_age_max == pytest.approx(LEASE + 2.1)


def test_a_run_that_settles_too_late_breaks_the_bound() -> None:
    evidence = clean()
    journal = [*evidence.journal, event("failed", 3, 3, T0 + 9.0, "a")]
    jobs = evidence.jobs
    report = check(replace(evidence, journal=journal, jobs=jobs, drain_allowance=1.0))
    assert report.settled_after_last_fault == pytest.approx(8.0)
    assert any("settled 8.000 s after its last fault" in p for p in report.recovery_problems)
    assert check(replace(evidence, journal=journal, drain_allowance=5.0)).recovery_problems == [
        r for r in report.recovery_problems if "settled" not in r
    ]


def test_a_fault_that_never_fired_makes_the_run_unknown() -> None:
    evidence = clean()
    fault = Fault("kill", "b", T0 + 1.0, T0 + 1.0, "start", False, "already exited")
    report = check(replace(evidence, faults=[fault]))
    assert report.violations == []
    assert report.uncovered == ["kill: never fired (1 injected)"]
    assert report.verdict == "unknown"


def test_a_fault_that_touched_no_job_makes_the_run_unknown() -> None:
    evidence = clean()
    fault = Fault("pause", "c", T0 + 1.0, T0 + 2.0, "start", True, "state T")
    report = check(replace(evidence, faults=[fault], expected_faults=("pause",)))
    assert report.uncovered == ["pause: fired 1 times but touched no job"]
    assert report.verdict == "unknown"


def test_an_expected_fault_that_was_never_injected_makes_the_run_unknown() -> None:
    report = check(replace(clean(), expected_faults=("kill", "pause")))
    assert report.uncovered == ["pause: never fired (0 injected)"]


def test_a_worker_that_noticed_a_fault_makes_it_effective() -> None:
    evidence = clean()
    noticed = {"ev": "ownership_unknown", "worker": "c", "pid": 3, "wall": T0 + 1.5, "mono": 0}
    fault = Fault("blackhole", "c", T0 + 1.0, T0 + 2.0, "start", True, "dropped=10")
    report = check(
        replace(evidence, faults=[fault], history=[*evidence.history, noticed], expected_faults=())
    )
    assert report.coverage == {"blackhole": {"injected": 1, "fired": 1, "effective": 1}}
    assert report.uncovered == []


def test_a_clock_fault_is_effective_once_the_skewed_worker_claimed() -> None:
    evidence = clean()
    fault = Fault("clock_plus30s", "a", T0, T0 + 9, "start", True, "offset +30.00 s")
    assert check(replace(evidence, faults=[fault], expected_faults=())).uncovered == []
    idle = Fault("clock_plus30s", "z", T0, T0 + 9, "start", True, "offset +30.00 s")
    assert check(replace(evidence, faults=[idle], expected_faults=())).uncovered == [
        "clock_plus30s: fired 1 times but touched no job"
    ]


def test_a_fault_with_grace_widens_its_own_recovery_bound() -> None:
    """Lost responses let the holder's unanswered extensions land: one more lease is fair."""
    evidence = clean()
    journal = [dict(e) for e in evidence.journal]
    for e in journal:
        if e["job_id"] == 2 and e["at"] == T0 + 4.0:
            e["at"] = T0 + 6.1  # an unanswered extension at +3.0 kept the lease until +6.0
            if e["kind"] == "lease_expired":
                e["duration_ms"] = 100
    fault = Fault("drop_responses", "b", T0 + 1.0, T0 + 4.6, "start", True, "", grace=LEASE)
    report = check(replace(evidence, journal=journal, faults=[fault], expected_faults=()))
    assert report.recovery_problems == []
    assert report.recovery == [pytest.approx(5.1)]
    assert report.unattributed_orphans == 0
    # Without the grace, that orphan is not this fault's doing (its lease was extended
    # well after the fault began): counted apart, not measured against the bound.
    bare = replace(fault, grace=0.0)
    report = check(replace(evidence, journal=journal, faults=[bare], expected_faults=()))
    assert report.recovery == [] and report.unattributed_orphans == 1
    # With the grace but a takeover later than lease + sweep + 1 + grace: a violation.
    for e in journal:
        if e["job_id"] == 2 and e["at"] == T0 + 6.1:
            e["at"] = T0 + 9.5
            if e["kind"] == "lease_expired":
                e["duration_ms"] = 3500
    report = check(replace(evidence, journal=journal, faults=[fault], expected_faults=()))
    assert report.recovery_problems == [
        f"drop_responses on b at {T0 + 1.0:.3f}: orphans taken over after 8.500 s (bound 7.200 s)"
    ]
