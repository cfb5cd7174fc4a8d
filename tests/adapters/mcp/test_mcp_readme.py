# ruff: noqa: E402
"""The MCP example (docs/guides/mcp.md) builds the server it says, over the tools it declares."""

from __future__ import annotations

from typing import Any

import pytest
from tests.adapters.mcp.sdk import needs_sdk
from tests.support.docs import example

needs_sdk()  # before the SDK's imports below, hence E402

from mcp import Client
from mcp.server.lowlevel import Server

from tenure import App

pytestmark = pytest.mark.storage


async def test_the_mcp_example_serves_its_tool(
    tenure_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = example("mcp")
    code = block.code
    assert len(code.splitlines()) < 15
    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    namespace: dict[str, Any] = {}
    exec(compile(code, block.where, "exec"), namespace)  # our own docs
    app: App = namespace["app"]
    try:
        assert isinstance(namespace["mcp_server"], Server)
        async with Client(namespace["mcp_server"]) as client:
            [tool] = (await client.list_tools()).tools
        assert tool.name == "open_case"
        assert tool.input_schema["required"] == ["customer_id", "summary"]
    finally:
        await app.aclose()
