"""Storms, quick tier: every fault class against real workers, a real receiver, real PostgreSQL.

Each storm feeds a few hundred jobs to four ``tenure worker`` processes while a
nemesis breaks them for about fifteen seconds, then drains and hands the
evidence to the checker (``tests/support/storm/checker.py``). Pass in every run: no
job lost, no double commit, no stale effect accepted, no effect applied twice,
tokens drawn once and increasing across restarts, no worker believing in a
lease the database had already given away, and every orphan taken over within
lease + sweep + 1 s of its fault (the whole queue within that plus the drain).
A storm whose faults never fired or never touched a job is *unknown* and fails.

The long versions are ``bench/soak/`` (same engine, same checker).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.apps.storm_app import LEASE
from tests.support.storm.harness import faketime_library
from tests.support.storm.storm import StormPlan, StormResult, run_storm

from tenure._embedded import EmbeddedPostgres
from tenure._store import migrate

# Heavy: .ci/run runs the slow ones once (on the embedded server),
# not again in its PostgreSQL 15 pass (they also pass there).
pytestmark = pytest.mark.slow

APP = "tests.apps.storm_app:app"
REPO_ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = REPO_ROOT / "artifacts" / "storms"
Record = Callable[[StormResult], None]


def storm(
    plan: StormPlan,
    tenure_dsn: str,
    receiver_dsn: str,
    storm_dir: Path,
    record: Record,
    **kw: object,
) -> StormResult:
    assert plan.lease == LEASE  # the recovery bound must use the app's lease
    result = run_storm(
        plan,
        tenure_dsn=tenure_dsn,
        receiver_dsn=receiver_dsn,
        workdir=storm_dir / plan.name,
        app=APP,
        cwd=REPO_ROOT,
        artifacts=ARTIFACTS,
        **kw,  # type: ignore[arg-type]
    )
    record(result)
    return result


def assert_clean(result: StormResult) -> None:
    report = result.report
    summary = report.summary()
    detail = "\n".join(report.violations[:30]) + f"\n{result.table()}"
    assert report.acknowledged >= result.plan.jobs * 0.9, detail  # the producer got through
    assert summary["lost"] == 0, detail
    assert summary["double_commits"] == 0, detail
    assert summary["stale_accepted"] == 0, detail
    assert summary["duplicate_effects"] == 0, detail
    assert summary["token_problems"] == 0, detail
    assert summary["deadline_problems"] == 0, detail
    assert summary["recovery_problems"] == 0, detail
    assert report.succeeded == report.acknowledged, detail
    assert report.effects_applied == report.succeeded, detail
    assert not report.uncovered, f"faults without effect: {report.uncovered}\n{detail}"
    assert report.verdict == "pass", detail
    assert result.artifact is not None and result.artifact.exists()


def test_crash_storm(
    tenure_dsn: str, receiver_dsn: str, storm_dir: Path, record_storm: Record
) -> None:
    """One worker SIGKILLed every 2 s; a replacement starts each time."""
    plan = StormPlan("crash", "crash", jobs=450, enqueue_seconds=12, fault_seconds=14)
    result = storm(plan, tenure_dsn, receiver_dsn, storm_dir, record_storm)
    assert_clean(result)
    assert result.report.coverage["kill"]["fired"] >= 3
    assert result.report.reclaims > 0  # the kills orphaned jobs that others took over


def test_pause_storm(
    tenure_dsn: str, receiver_dsn: str, storm_dir: Path, record_storm: Record
) -> None:
    """SIGSTOP for 0.5-3 leases: a stopped owner wakes up stale and must change nothing."""
    plan = StormPlan("pause", "pause", jobs=400, enqueue_seconds=12, fault_seconds=15)
    result = storm(plan, tenure_dsn, receiver_dsn, storm_dir, record_storm)
    assert_clean(result)
    assert result.report.coverage["pause"]["fired"] >= 3


def test_network_nemesis(
    tenure_dsn: str, receiver_dsn: str, storm_dir: Path, record_storm: Record
) -> None:
    """Each worker's link to PostgreSQL: reset, blackhole, lost responses, delay > L/3."""
    plan = StormPlan(
        "network", "network", jobs=400, enqueue_seconds=14, fault_seconds=17, proxies=True
    )
    result = storm(plan, tenure_dsn, receiver_dsn, storm_dir, record_storm)
    assert_clean(result)
    assert set(result.report.coverage) == {"reset", "blackhole", "drop_responses", "delay"}


def test_postgres_restart_storm(receiver_dsn: str, storm_dir: Path, record_storm: Record) -> None:
    """Three immediate and one fast restart of the storm's own server, with the producer
    enqueueing throughout: acknowledged enqueues survive and tokens keep increasing."""
    data = storm_dir / "pg"
    server = EmbeddedPostgres(data / "data", port=5433)
    data.mkdir()
    os.chmod(data, 0o755)
    dsn = server.start()
    try:
        migrate(dsn)
        plan = StormPlan(
            "restarts",
            "restarts",
            jobs=350,
            enqueue_seconds=14,
            fault_seconds=16,
            single_enqueue=True,
        )
        result = storm(plan, dsn, receiver_dsn, storm_dir, record_storm, server=server)
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)
    assert_clean(result)
    assert result.report.coverage["pg_restart_immediate"]["fired"] == 3
    assert result.report.coverage["pg_restart_fast"]["fired"] == 1
    # The producer may see no error at all: its pooled connections are checked when the
    # server hung up on them, so enqueues across a restart simply wait for the new server.


def _has_libfaketime() -> bool:
    try:
        faketime_library()
    except FileNotFoundError:
        return False
    return True


@pytest.mark.skipif(not _has_libfaketime(), reason="needs faketime (Debian package)")
def test_clock_skew_storm(
    tenure_dsn: str, receiver_dsn: str, storm_dir: Path, record_storm: Record
) -> None:
    """Workers at +30 s, -30 s and 1.5x speed next to an honest one; the skewed ones are
    paused past their leases now and then. Every lease decision is the database's.

    What libfaketime 0.9.10 does to CPython 3.11 (observed on this machine):

    - By default it fakes CLOCK_MONOTONIC too, rebased onto the fake wall clock
      (``time.monotonic()`` ≈ 1.8e9) and running at the fake rate; ``time.sleep`` and
      asyncio follow it (at 1.5x a 1 s ``asyncio.sleep`` takes 0.67 s). But every
      threading timeout (``Event.wait(t)``, ``Lock.acquire(timeout=t)``,
      ``Queue.get(timeout=t)``) then blocks for good: CPython waits with
      ``sem_clockwait``/``pthread_cond_clockwait`` on an absolute deadline taken from
      the faked clock, which the kernel's own clock reaches in decades. A worker's
      heartbeat thread then beats only when a new claim wakes it.
    - With ``FAKETIME_DONT_FAKE_MONOTONIC=1`` the monotonic clock is the machine's and
      threading timeouts work, but ``time.sleep`` fails with EINVAL (its absolute
      ``clock_nanosleep`` deadline is shifted as if it were faked).

    So +30 s and -30 s run with the machine's monotonic clock (an NTP offset; the
    storm's tool never calls ``time.sleep``), and 1.5x with the monotonic clock faked
    as well (a fast oscillator: the worker's own deadline shrinks, the safe direction).
    The harness preloads libfaketime itself: the ``faketime`` wrapper forks, so its pid
    is not the worker's and SIGSTOP/SIGKILL would miss the worker.
    """
    plan = StormPlan(
        "skew",
        "skew",
        jobs=400,
        enqueue_seconds=12,
        fault_seconds=15,
        skews={
            "w1": ("+30s", True),
            "w2": ("-30s", True),
            "w3": ("+0 x1.5", False),
        },
        pause_leases=(1.2, 2.0),
    )
    result = storm(plan, tenure_dsn, receiver_dsn, storm_dir, record_storm)
    assert_clean(result)
    for kind in ("clock_plus30s", "clock_minus30s", "clock_plus0_x1_5"):
        assert result.report.coverage[kind]["fired"] == 1, result.report.coverage
