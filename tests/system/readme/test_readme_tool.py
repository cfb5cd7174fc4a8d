"""The receivers guide's fenced tool, run as written by a real worker: one HTTP client per
process.

The example is taken from docs/guides/receivers.md, pointed at a local service instead of
``http://cases.internal`` (its ``CASES_URL``), and loaded by ``tenure worker``. Building an
``httpx.AsyncClient`` per call costs a TLS context on the event loop each time
(twenty at once withheld heartbeats); a shared client also keeps its connection,
so the service sees every call arrive on the one connection.
"""

from __future__ import annotations

import runpy
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from tests.support.docs import example
from tests.support.workers import Journal, WorkerGroup, wait_job

from tenure._observe._http import ServerThread

CALLS = 6
ENDED = ("succeeded", "failed", "cancelled")


def sending_side() -> str:
    """The receivers guide's example of the sending side: the tool that sends."""
    block = example("fence-tool")
    assert "@app.tool(" in block.code, block.where
    return block.code


@pytest.fixture
def cases_service() -> Iterator[tuple[str, list[int]]]:
    """``POST /cases`` answering 201 with a case id; yields its URL and each call's client
    port (one port per TCP connection)."""
    ports: list[int] = []

    async def create(request: Request) -> JSONResponse:
        await request.body()
        assert request.client is not None
        ports.append(request.client.port)
        return JSONResponse({"case_id": len(ports)}, status_code=201)

    server = ServerThread(
        Starlette(routes=[Route("/cases", create, methods=["POST"])]), "127.0.0.1", 0
    )
    url = server.start()
    try:
        yield url, ports
    finally:
        server.stop()


def test_the_fenced_tool_example_shares_one_client_across_calls(
    tenure_dsn: str,
    tmp_path: Path,
    cases_service: tuple[str, list[int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, ports = cases_service
    module = tmp_path / "readme_tool.py"
    module.write_text(sending_side(), encoding="utf-8")
    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    monkeypatch.setenv("CASES_URL", url)
    producer = runpy.run_path(str(module))["app"]
    journal = Journal(tenure_dsn)
    with WorkerGroup(tenure_dsn, tmp_path, app="readme_tool:app") as workers:
        worker = workers.spawn("readme", env={"PYTHONPATH": str(tmp_path), "CASES_URL": url})
        worker.wait_started()
        try:
            jobs = [
                producer.sync.enqueue("open_case", {"customer_id": f"c-{n}"}) for n in range(CALLS)
            ]
            for job in jobs:
                row = wait_job(journal, job.id, lambda r: r["state"] in ENDED, "", workers)
                assert row["state"] == "succeeded", (row, worker.log())
        finally:
            producer.close()
    assert len(ports) == CALLS
    # Sequential calls (concurrency 1) on one client reuse its connection; a client per
    # call opens one connection per call.
    assert len(set(ports)) == 1, ports
