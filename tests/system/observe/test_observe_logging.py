"""Worker log lines: stamped in UTC with milliseconds, and no other library's request lines.

Real worker processes (``python -m tenure worker``) in a time zone far from UTC,
so a line stamped with the host's local time would be hours off; a tool that
sends an httpx request to a URL holding a customer id, which httpx logs at INFO.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from tests.integration.observe.helpers import wait_done
from tests.support.waiting import wait_until
from tests.support.workers import REPO_ROOT, Journal, WorkerGroup

from tenure import App
from tenure._log import LineFormatter, log_event
from tenure._observe._http import ServerThread

APP = "tests.integration.observe.observe_app:app"
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
FAR_FROM_UTC = "Asia/Kathmandu"  # UTC+05:45: local time passed off as UTC shows at once
CUSTOMER = "cust-4711"


def stamp_of(ts: str) -> datetime:
    assert STAMP.match(ts), ts
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def assert_stamped_now(stamps: list[str], log: str) -> None:
    assert stamps, log
    now = datetime.now(UTC)
    for ts in stamps:  # the clock, not a duration: local time would be 5 h 45 min off
        assert abs(stamp_of(ts) - now) < timedelta(minutes=10), (ts, now, log)


@pytest.mark.parametrize("log_format", ["kv", "json"])
def test_every_worker_line_starts_with_a_utc_timestamp(
    tenure_dsn: str, ops: App, journal: Journal, tmp_path: Path, log_format: str
) -> None:
    log_path = tmp_path / "worker.log"
    command = [sys.executable, "-m", "tenure", "--log-level", "DEBUG", "--log-format", log_format]
    command += ["worker", APP, "--name", "stamped", "--poll-interval", "0.2"]
    env = {"TENURE_DSN": tenure_dsn, "TZ": FAR_FROM_UTC, "PYTHONUNBUFFERED": "1"}
    with (
        log_path.open("wb") as log,
        subprocess.Popen(
            command, cwd=REPO_ROOT, env={**_base_env(), **env}, stdout=log, stderr=subprocess.STDOUT
        ) as proc,
    ):
        try:
            job = ops.sync.enqueue("echo", {"text": "x"})
            wait_until(
                lambda: "succeeded" in log_path.read_text(), timeout=30, message=" ".join(command)
            )
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0, log_path.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
    assert journal.job(job.id)["state"] == "succeeded"
    text = log_path.read_text()
    lines = text.splitlines()
    assert len(lines) >= 3, text  # worker_started, a claim, a success, worker_stopped
    if log_format == "json":
        records = [json.loads(line) for line in lines]
        assert all(next(iter(r)) == "ts" for r in records), text
        stamps = [r["ts"] for r in records]
        assert {"worker_started", "call_finished"} <= {r.get("event") for r in records}, text
    else:
        assert all(re.match(r"ts=\S+ \w+=", line) for line in lines), text
        stamps = [line.split(" ", 1)[0].removeprefix("ts=") for line in lines]
        assert any(" event=call_finished " in line for line in lines), text
    assert_stamped_now(stamps, text)


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}


def test_line_formatter_stamps_events_and_other_records_alike() -> None:
    """Records that are not tenure's events keep level, logger and traceback on one line."""
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    logger = logging.getLogger("tests.observe.line_formatter")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = Keep()
    logger.addHandler(handler)
    try:
        for as_json in (False, True):
            handler.setFormatter(LineFormatter(as_json=as_json))
            log_event(logger, "heartbeat_lost", job=7, token=9, reason="zero rows")
            try:
                raise ValueError("boom")
            except ValueError:
                logger.exception("heartbeat tick failed")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    kv_event, kv_error, json_event, json_error = seen
    assert re.fullmatch(r'ts=\S+ event=heartbeat_lost job=7 token=9 reason="zero rows"', kv_event)
    assert "\n" not in kv_error
    assert re.match(
        r'ts=\S+ level=error logger=tests\.observe\.line_formatter msg="heart', kv_error
    )
    assert "Traceback (most recent call last):\\n" in kv_error
    event = json.loads(json_event)
    assert list(event) == ["ts", "event", "job", "token", "reason"]
    error = json.loads(json_error)
    assert (error["level"], error["msg"]) == ("error", "heartbeat tick failed")
    assert error["exc"].endswith("ValueError: boom")
    for ts in (event["ts"], error["ts"]):
        stamp_of(ts)


# -- other libraries' lines ---------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[str]]]:
    """A plain HTTP service whose URLs hold a customer id; yields the URL and the paths hit."""
    hits: list[str] = []

    async def notify(request: Request) -> JSONResponse:
        hits.append(request.url.path)
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/customers/{customer}/notify", notify, methods=["POST"])])
    server = ServerThread(app, "127.0.0.1", 0, name="test-customers")
    url = server.start()
    try:
        yield f"{url}/customers/{CUSTOMER}/notify", hits
    finally:
        server.stop()


def _send(ops: App, journal: Journal, workers: WorkerGroup, url: str) -> dict[str, Any]:
    job = ops.sync.enqueue("send", {"url": url, "text": "x"})
    row = wait_done(journal, job.id, workers)
    assert row["state"] == "succeeded", (row, workers.logs())
    return row


def test_worker_logs_carry_no_httpx_request_lines(
    workers: WorkerGroup, ops: App, journal: Journal, receiver: tuple[str, list[str]]
) -> None:
    url, hits = receiver
    quiet = workers.spawn("quiet", env={"TENURE_LOG_LEVEL": "INFO"})
    quiet.wait_started()
    _send(ops, journal, workers, url)
    assert hits == [f"/customers/{CUSTOMER}/notify"]
    log = quiet.log()
    assert "HTTP Request" not in log and CUSTOMER not in log, log
    quiet.terminate()
    assert quiet.wait(20) == 0, log

    # The same request with other libraries at INFO, as a user may ask: the line is there,
    # so its absence above is the worker's doing, not a tool that sent nothing.
    asked = workers.spawn("asked", env={"TENURE_LOG_LEVEL_OTHERS": "INFO"})
    asked.wait_started()
    _send(ops, journal, workers, url)
    assert len(hits) == 2
    assert re.search(rf"logger=httpx msg=\"HTTP Request: POST http://\S+/{CUSTOMER}/", asked.log())
