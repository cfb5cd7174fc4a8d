# ruff: noqa: E402
"""Hostile MCP calls: each gets a typed refusal (a JSON-RPC INVALID_PARAMS, or a tool error
the model can read) that says what is wrong without echoing the input at length, and queues
nothing. No worker runs here: a call that wrongly queued would wait, so each call is bounded."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

import httpx
from mcp import Client, ClientSession
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    ElicitRequestParams,
    ElicitResult,
    EmptyResult,
    Request,
    RequestParamsMeta,
)
from tests.apps.mcp_app import build_app
from tests.integration.fence.helpers import serve
from tests.support.workers import aclosing_app
from tests.system.adapters.mcp.helpers import (
    Era,
    ExtTask,
    ExtUpdateParams,
    ext_task_call,
    jobs,
    key,
    memory_client,
    task_call,
    text_of,
)
from tests.system.adapters.mcp.test_mcp_questions import Content

from tenure import App
from tenure.mcp import KEY_META, Principals, http_app, server

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


# -- ids, answers, tokens: each answers cleanly, and no hostile input writes an ERROR line ------

BAD_TASK_IDS: list[Any] = [
    "²",
    "²3.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "\uff11\uff12.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",  # full-width digits one, two
    "٣.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",  # an Arabic-Indic three
    "9" * 19 + ".AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",  # past bigint
    "1" * 5000 + ".A",
    "0.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "-1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "1.AAAA\x00AAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "",
    "1",
    42,
    None,
    {"taskId": "1.A"},
]


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("task_id", BAD_TASK_IDS, ids=lambda t: repr(t)[:24])
async def test_a_malformed_task_id_is_not_found_on_every_revision_without_an_error_line(
    app: App, caplog: pytest.LogCaptureFixture, task_id: Any
) -> None:
    """Parsed strictly: a ``²`` or a full-width digit is no digit, a number past bigint no
    job; every one answers "not found", exactly like an unknown id."""
    caplog.set_level(logging.DEBUG)
    said = "Invalid request parameters" if task_id is None else "Task not found"  # none sent
    async with memory_client(server(app), "legacy") as legacy:
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            with pytest.raises(MCPError, match=said) as core:
                await task_request(legacy.session, method, task_id)
            assert core.value.error.code == INVALID_PARAMS
    async with memory_client(server(app), "modern", tasks=True) as modern:
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            with pytest.raises(MCPError, match=said) as extension:
                await task_request(modern.session, method, task_id)
            assert extension.value.error.code == INVALID_PARAMS
        with pytest.raises(MCPError, match="names no call of yours"):
            await modern.session.call_tool("echo", {"text": "x"}, request_state=str(task_id))
    assert errors(caplog) == []


class AnyTaskRequest(Request[ExtUpdateParams, str]):
    """A ``tasks/*`` request as a hostile client may send it: any ``taskId`` at all."""

    method: str
    params: ExtUpdateParams


async def task_request(session: ClientSession, method: str, task_id: Any) -> None:
    params = ExtUpdateParams(task_id=task_id, input_responses={})
    await session.send_request(AnyTaskRequest(method=method, params=params), EmptyResult)


HOSTILE_ANSWERS: dict[str, tuple[Content, str]] = {
    "NUL": ({"approved": True, "size": "S", "note": "nul\x00"}, "NUL character"),
    "oversize": ({"approved": True, "size": "S", "note": "x" * 70_000}, "65536 bytes"),
    "not a choice": ({"approved": True, "size": "XXL"}, "'size': not a string of the choices"),
    "wrong type": ({"approved": "yes", "size": "S"}, "'approved': not a boolean"),
    "missing": ({"size": "S"}, "'approved': required"),
    "unknown field": ({"approved": True, "size": "S", "admin": True}, "'admin': not a field"),
}


@pytest.mark.parametrize("answer", HOSTILE_ANSWERS, ids=str)
@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_an_answer_that_does_not_fit_is_refused_saying_why_and_the_question_stays_open(
    app: App, tenure_dsn: str, caplog: pytest.LogCaptureFixture, answer: str, era: Era
) -> None:
    """A NUL, an oversize text, a value of another type: INVALID_PARAMS saying what is
    wrong, nothing written (the job still waits for a fitting answer), no ERROR line."""
    caplog.set_level(logging.DEBUG)
    content, problem = HOSTILE_ANSWERS[answer]

    async def reply(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content=content)

    worker = app.worker()
    running = asyncio.create_task(worker.run(handle_signals=False))
    try:
        async with memory_client(server(app), era, elicitation=reply) as client:
            with pytest.raises(MCPError, match=problem) as refused:
                await client.call_tool("confirm", {"item": "x"}, read_timeout_seconds=60)
    finally:
        worker.stop()
        await running
    assert refused.value.error.code == INVALID_PARAMS
    assert "refused" in refused.value.error.message and len(refused.value.error.message) < 400
    assert [r["state"] for r in jobs(tenure_dsn, "confirm")] == ["waiting"]
    assert errors(caplog) == []


BAD_AUTHORIZATIONS = [
    b"Bearer",
    b"Bearer nope",
    b"Bearer alice-" + b"a" * 25,  # one character short of alice's
    b"Bearer " + b"x" * 100_000,
    "Bearer ünïcödé-tøken-0000".encode(),
    b"Bearer \xff\xfe",
    b"Basic YWxpY2U6YWxpY2U=",
]


@pytest.mark.parametrize("authorization", BAD_AUTHORIZATIONS, ids=lambda t: repr(t)[:20])
async def test_a_bad_bearer_token_is_refused_without_naming_anyone(
    app: App, caplog: pytest.LogCaptureFixture, authorization: bytes
) -> None:
    caplog.set_level(logging.DEBUG)
    verifier = Principals({"alice": "alice-" + "a" * 26})
    with serve(http_app(app, verifier=verifier)) as base:
        answer = httpx.post(
            f"{base}/mcp", json={}, headers={b"Authorization": authorization}, timeout=30
        )
    assert answer.status_code == 401
    assert "alice" not in answer.text
    assert errors(caplog) == []


HOSTILE_TRACE_CONTEXTS: list[dict[str, Any]] = [
    {"traceparent": "00-zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz-00f067aa0ba902b7-01"},
    {"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01"},
    {"traceparent": 42},
    {"traceparent": ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]},
    {"traceparent": None, "tracestate": {"a": 1}},
    {"traceparent": "x" * 100_000},
    {"tracestate": "k=v", "baggage": "user=admin"},
]


@pytest.mark.parametrize("carrier", HOSTILE_TRACE_CONTEXTS, ids=lambda c: repr(c)[:30])
@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_hostile_trace_context_is_dropped_and_the_call_goes_on(
    app: App, tenure_dsn: str, caplog: pytest.LogCaptureFixture, carrier: dict[str, Any], era: Era
) -> None:
    """Whatever a client puts in ``_meta``'s trace keys, the call is queued (a task here:
    no worker runs) under no context of the client's, and nobody logs an error."""
    caplog.set_level(logging.DEBUG)
    meta = cast(RequestParamsMeta, {**carrier, KEY_META: "traced"})
    async with memory_client(server(app, principal="alice"), era, tasks=True) as client:
        if era == "legacy":
            await task_call(client, "echo", {"text": "x"}, meta)
        else:
            assert isinstance(await ext_task_call(client, "echo", {"text": "x"}, meta), ExtTask)
    [row] = jobs(tenure_dsn, "echo")
    assert row["state"] == "queued"
    assert errors(caplog) == []
