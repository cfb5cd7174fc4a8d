"""Hostile payloads round-trip or are refused with a typed error; workers survive them;
tool code never sees database credentials."""

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.apps.echo_app import echo, inspect_environment

import tenure

ROOT = Path(__file__).resolve().parents[3]

NASTY = st.sampled_from(
    [
        "'",
        '"',
        "';--",
        "'; DROP TABLE tenure_jobs;--",
        "\x00",
        "\ud800",
        "\udfff",
        "\\u0000",
        "\u2028",
        "\U0001d518\U0001d52b",  # astral-plane letters
        "%(payload)s",
        "$1",
        "{}",
        "\r\n",
        "\x7f",
    ]
)
TEXT = st.one_of(NASTY, st.text(max_size=20))
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TEXT, children, max_size=3),
    max_leaves=12,
)


def same_json(got: Any, sent: Any) -> bool:
    """Equal as JSON values. jsonb keeps numbers as decimals, so a float without a
    fractional part (5e16) comes back as an int that converts to the same float."""
    if isinstance(sent, float):
        return isinstance(got, int | float) and float(got) == sent
    if isinstance(sent, list):
        return (
            isinstance(got, list)
            and len(got) == len(sent)
            and all(same_json(g, s) for g, s in zip(got, sent, strict=True))
        )
    if isinstance(sent, dict):
        return (
            isinstance(got, dict)
            and got.keys() == sent.keys()
            and all(same_json(got[k], sent[k]) for k in sent)
        )
    return bool(got == sent) and type(got) is type(sent)


def _app(dsn: str) -> tenure.App:
    app = tenure.App(dsn)
    app.tool("echo", lease=5, heartbeat=1, jitter=1)(echo)
    app.tool("inspect_environment", lease=5, heartbeat=1, jitter=1)(inspect_environment)
    return app


async def test_fuzzed_payloads_round_trip_or_are_refused(tenure_dsn: str) -> None:
    app = _app(tenure_dsn)
    worker = app.worker(concurrency=8, poll_interval=0.1)
    running = asyncio.create_task(worker.run(handle_signals=False))
    accepted: list[tuple[int, Any]] = []
    refused = 0

    @settings(
        max_examples=150,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(value=JSONISH)
    def generate(value: Any) -> None:
        samples.append(value)

    samples: list[Any] = []
    generate()
    try:
        for value in samples:
            try:
                job = await app.enqueue("echo", {"value": value})
            except tenure.PayloadError:
                refused += 1
                continue
            accepted.append((job.id, value))
        for job_id, value in accepted:
            result = await app.wait(job_id, timeout=30)
            assert same_json(result, value), (result, value)
        deep: Any = "x"
        for _ in range(70):
            deep = [deep]
        with pytest.raises(tenure.PayloadError, match="deeper"):
            await app.enqueue("echo", {"value": deep})
        assert accepted and refused, "the fuzzer must exercise both outcomes"
        assert not running.done(), "the worker died"
    finally:
        worker.stop()
        await running
        await app.aclose()


def test_tool_code_never_sees_database_credentials(tenure_dsn: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TENURE_TEST_DSN"}  # the suite's own
    env.update(TENURE_DSN=tenure_dsn, PGPASSWORD="not-for-tools")
    with (tmp_path / "w.log").open("w") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tenure",
                "worker",
                "tests.apps.echo_app:app",
                "--poll-interval",
                "0.1",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    app = _app(tenure_dsn)
    try:
        job = app.sync.enqueue("inspect_environment", {})
        seen = app.sync.wait(job.id, timeout=30)
    finally:
        worker.terminate()
        worker.wait(20)
        app.close()
    assert seen["credential_variables"] == []
    assert not any("dsn" in field or "app" in field for field in seen["context_fields"])
