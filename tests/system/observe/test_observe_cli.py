"""`tenure jobs`, `events`, `doctor`, `prune` and `dashboard` against a real database."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from tests.integration.store.helpers import new_job, reclaim
from tests.support.workers import REPO_ROOT

from tenure._cli import main
from tenure._store import Store


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def _reclaimed(store: Store) -> tuple[int, int, int]:
    """A job reclaimed from w1 by w2 (short lease, database clock): id, old and new token."""
    job = await store.enqueue(new_job("reclaimed"))
    [first] = await store.claim("w1", {"t": 100}, 1)
    second = await reclaim(store, "w2", {"t": 60_000})
    return job.id, first.token, second.token


async def test_jobs_list_and_show_tell_who_holds_what(
    store: Store, tenure_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id, old, new = await _reclaimed(store)
    code, out, _ = await asyncio.to_thread(
        run, capsys, "--dsn", tenure_dsn, "jobs", "list", "--state", "running"
    )
    assert code == 0
    for header in ("OWNER", "TOKEN", "LEASE LEFT", "HEARTBEAT AGE"):
        assert header in out
    row = next(line for line in out.splitlines() if re.search(rf"\b{job_id}\b.*\bw2\b", line))
    assert str(new) in row and "2/3" in row
    assert re.search(r"\b(59|60)\.\d s\b", row), row  # lease left, on the database's clock

    code, out, _ = await asyncio.to_thread(run, capsys, "jobs", "show", str(job_id))
    assert code == 0
    assert "timeline" in out and "payload hmac" in out
    kinds = re.compile(r"\b(job_claimed|lease_expired)\b")
    timeline = [line for line in out.splitlines() if kinds.search(line)]
    assert [kinds.findall(t)[0] for t in timeline] == [
        "job_claimed",
        "lease_expired",
        "job_claimed",
    ]
    assert "w1" in timeline[1] and str(old) in timeline[1] and "reclaimed by w2" in timeline[1]
    assert f"previous token {old}" in timeline[2]

    code, _, err = await asyncio.to_thread(run, capsys, "jobs", "show", "999999")
    assert code == 1 and "no job 999999" in err


async def test_events_filter_by_kind_job_and_time(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id, old, new = await _reclaimed(store)
    other = await store.enqueue(new_job("other"))
    code, out, _ = await asyncio.to_thread(
        run, capsys, "events", "--kind", "job_reclaimed", "--json"
    )
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["kind"], r["job_id"], r["token"]) for r in rows] == [("job_claimed", job_id, new)]
    assert rows[0]["detail"] == {"previous_token": old, "reclaimed_from": "w1"}

    code, out, _ = await asyncio.to_thread(
        run, capsys, "events", "--kind", "lease_expired", "--since", "10m", "--json"
    )
    [expired] = [json.loads(line) for line in out.splitlines()]
    assert (expired["token"], expired["attempt"], expired["worker"]) == (old, 1, "w1")

    code, out, _ = await asyncio.to_thread(run, capsys, "events", "--job", str(other.id))
    assert code == 0 and "0 events" in out
    code, out, _ = await asyncio.to_thread(run, capsys, "events", "--since", "2000-01-01T00:00")
    assert "3 events" in out
    code, _, err = await asyncio.to_thread(run, capsys, "events", "--since", "yesterday")
    assert code == 1 and "--since" in err


async def test_doctor_checks_everything_and_prune_deletes_old_rows(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    await _reclaimed(store)
    app = "tests.integration.observe.observe_app:app"
    code, out, _ = await asyncio.to_thread(run, capsys, "doctor", app)
    assert code == 0, out
    for check in (
        "connectivity",
        "schema",
        "clock",
        "indexes",
        "query plan claim",
        "query plan extend_leases",
        "query plan prune_jobs",
    ):
        assert re.search(rf"{check}\s+(ok|warn)", out), (check, out)
    assert re.search(r"policy echo\s+ok\s+L 1\.5 > R·H \+ J = 2·0\.3 \+ 0\.5 = 1\.1 s", out)
    assert re.search(r"policy watched\s+ok", out)

    code, out, _ = await asyncio.to_thread(run, capsys, "prune", "--older-than", "1d")
    assert code == 0 and "deleted 0 journal rows" in out


def test_doctor_reports_an_unmigrated_schema(
    database_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = database_dsn + " options='-c search_path=nothing_here'"
    monkeypatch.setenv("TENURE_DSN", dsn)
    code, out, _ = run(capsys, "doctor")
    assert code == 1
    assert re.search(r"schema\s+fail\s+not migrated", out)


def test_dashboard_refuses_a_public_bind_without_a_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TENURE_DASHBOARD_TOKEN", raising=False)
    code, out, err = run(capsys, "dashboard", "--host", "0.0.0.0", "--port", "0")
    assert code == 1 and out == ""
    assert "refusing to serve the dashboard on 0.0.0.0" in err
    assert "TENURE_DASHBOARD_TOKEN" in err
    code, out, err = run(capsys, "dashboard", "--allowed-host", "http://dash.example/")
    assert code == 1 and out == "" and "is not a host name or host:port" in err


def test_tenure_dashboard_serves_until_sigterm(tenure_dsn: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DASHBOARD_TOKEN"}
    command = [sys.executable, "-m", "tenure", "--dsn", tenure_dsn, "dashboard", "--port", "0"]
    command += ["--allowed-host", "dash.example"]
    errors = tmp_path / "stderr.txt"
    with (
        errors.open("w") as stderr,
        subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
        ) as proc,
    ):
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            url = first.removeprefix("tenure dashboard: ").strip()
            assert url.startswith("http://127.0.0.1:"), (first, errors.read_text())
            page = httpx.get(url + "/", timeout=10)
            assert page.status_code == 200 and "Held leases" in page.text
            assert page.headers["content-security-policy"].startswith("default-src 'none'")
            named = httpx.get(url + "/", headers={"Host": "dash.example"}, timeout=10)
            assert named.status_code == 200 and "Held leases" in named.text
            rebound = httpx.get(url + "/", headers={"Host": "evil.example"}, timeout=10)
            assert rebound.status_code == 421 and "Held leases" not in rebound.text
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0, errors.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
