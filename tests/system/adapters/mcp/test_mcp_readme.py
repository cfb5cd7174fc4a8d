# ruff: noqa: E402
"""The README's MCP block builds the server it says, over the tools it declares."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

from mcp import Client
from mcp.server.lowlevel import Server

from tenure import App

ROOT = Path(__file__).resolve().parents[4]
MARKER = "<!-- example: mcp"


def block() -> str:
    after = (ROOT / "README.md").read_text().split(MARKER, 1)[1]
    code: str = re.findall(r"```python\n(.*?)\n```", after, re.S)[0]
    return code


async def test_the_readme_mcp_block_serves_its_tool(
    tenure_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = block()
    assert len(code.splitlines()) < 15
    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # our own README
    app: App = namespace["app"]
    try:
        assert isinstance(namespace["mcp_server"], Server)
        async with Client(namespace["mcp_server"]) as client:
            [tool] = (await client.list_tools()).tools
        assert tool.name == "open_case"
        assert tool.input_schema["required"] == ["customer_id", "summary"]
    finally:
        await app.aclose()
