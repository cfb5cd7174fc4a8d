# ruff: noqa: E402
"""The MCP example (docs/guides/mcp.md) runs as written: its module, loaded as ``tenure mcp``
loads it, serves its tool to the SDK's own client; with a worker of its app running, a
``tools/call`` is a job that opens one case at the example case service, fenced, and a
repeated call under the client's key returns that job's result without a second case."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

from mcp import Client
from mcp.server.lowlevel import Server
from tests.integration.fence.helpers import serve
from tests.support.docs import imported
from tests.support.schemas import fresh_schema_dsn
from tests.system.adapters.mcp.helpers import jobs, key

from tenure import App
from tenure.examples import case_service


async def test_the_mcp_example_opens_one_case_per_call_key(
    tenure_dsn: str, database_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases_dsn = fresh_schema_dsn(database_dsn, "cases")
    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    with serve(case_service.create_app(cases_dsn, insecure=True)) as url:
        monkeypatch.setenv("CASE_SERVICE_URL", url)
        names = imported("mcp", tmp_path, "myapp")
        app: App = names["app"]
        assert isinstance(names["mcp_server"], Server)
        worker = app.worker()
        running = asyncio.create_task(worker.run(handle_signals=False))
        try:
            async with Client(names["mcp_server"]) as client:
                [tool] = (await client.list_tools()).tools
                arguments = {"customer_id": "c-4711", "summary": "invoice off by 12 EUR"}
                call = key("chat-42:call-7")  # the client's own key
                first = await client.call_tool("open_case", arguments, meta=call)
                again = await client.call_tool("open_case", arguments, meta=call)
        finally:
            worker.stop()
            await running
            await app.aclose()
    assert tool.name == "open_case"
    assert tool.input_schema["required"] == ["customer_id", "summary"]
    assert not first.is_error and first.content[0].text == "1", first  # type: ignore[union-attr]
    assert again.content == first.content
    [job] = jobs(tenure_dsn, "open_case")
    assert (job["state"], job["attempt"]) == ("succeeded", 1), job
    # No principal (the in-process server as shown): the key is this connection's.
    assert re.fullmatch(r"mcp:[0-9a-f]{32}:key:chat-42:call-7", job["idempotency_key"]), job
    assert case_service.effects_summary(cases_dsn) == (1, 0)  # one case, its key applied once
