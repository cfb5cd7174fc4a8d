# ruff: noqa: E402
"""Hostile MCP calls: each gets a typed refusal (a JSON-RPC INVALID_PARAMS, or a tool error
the model can read) that says what is wrong without echoing the input at length, and queues
nothing. No worker runs here: a call that wrongly queued would wait, so each call is bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from tests.apps.mcp_app import build_app
from tests.support.workers import aclosing_app
from tests.system.adapters.mcp.helpers import jobs, key, text_of

from tenure import App
from tenure.mcp import KEY_META, server

BAD_KEYS: list[Any] = [
    42,
    True,
    ["k"],
    {"k": 1},
    "",
    "k" * 401,
    "line\nbreak",
    "nul\x00",
    "bidi\u202e",
    "\ud800",
]
BAD_NAMES = ["", "nope", "../echo", "echo\x00", "ECHO", "e" * 10_000]
BAD_ARGUMENTS: list[dict[str, Any]] = [
    {},
    {"text": 1},
    {"text": None},
    {"text": "x", "seconds": "1"},
    {"text": "x", "__proto__": {}},
    {"text": "x", "seconds": 1e309},
    {"text": ["nested"] * 3},
    {"text": "x" * 2_000_000},
    {"text": {"a": {"b": {"c": {"d": {"e": {"f": {"g": [[[[[[[[[[1]]]]]]]]]]}}}}}}}},
]


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[App]:
    async for built in aclosing_app(build_app(tenure_dsn)):
        yield built


@pytest.mark.parametrize("bad", BAD_KEYS, ids=repr)
async def test_a_malformed_client_key_is_refused_and_queues_nothing(
    app: App, tenure_dsn: str, bad: Any
) -> None:
    async with Client(server(app)) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("echo", {"text": "x"}, read_timeout_seconds=30, meta=key(bad))
    assert refused.value.error.code == INVALID_PARAMS
    assert KEY_META in refused.value.error.message
    assert len(refused.value.error.message) < 200
    assert jobs(tenure_dsn) == []


@pytest.mark.parametrize("name", BAD_NAMES, ids=lambda n: repr(n[:20]))
async def test_an_unknown_tool_is_refused_and_queues_nothing(
    app: App, tenure_dsn: str, name: str
) -> None:
    async with Client(server(app)) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool(name, {"text": "x"}, read_timeout_seconds=30)
    assert refused.value.error.code == INVALID_PARAMS
    assert len(refused.value.error.message) < 200
    assert jobs(tenure_dsn) == []


@pytest.mark.parametrize("arguments", BAD_ARGUMENTS, ids=lambda a: repr(a)[:40])
async def test_arguments_that_do_not_fit_are_a_tool_error_and_queue_nothing(
    app: App, tenure_dsn: str, arguments: dict[str, Any]
) -> None:
    async with Client(server(app)) as client:
        result = await client.call_tool("echo", arguments, read_timeout_seconds=30)
    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["error"]["code"] == "invalid_arguments"
    assert len(text_of(result)) < 5000
    assert jobs(tenure_dsn) == []
