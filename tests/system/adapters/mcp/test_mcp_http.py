# ruff: noqa: E402
"""Streamable HTTP, on loopback only: ``tenure mcp --http`` as a subprocess, its bind and token
rules (the dashboard's), and the SDK's own bearer auth giving callers a scope that outlives
their sessions."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, TextContent
from pydantic import AnyHttpUrl
from tests.integration.fence.helpers import serve
from tests.support.waiting import wait_until
from tests.support.workers import REPO_ROOT, WorkerProcess
from tests.system.adapters.mcp.helpers import (
    job_of,
    jobs,
    key,
    task_call,
    task_call_plain,
    task_list,
    task_result,
    text_of,
)

from tenure import App, ConfigError
from tenure._observe._http import ServerThread
from tenure.mcp import ANONYMOUS, TASKS_REVISION, TOKEN_ENV, Principals, http_app, server
from tenure.mcp._command import NO_TOKEN
from tenure.mcp._serve import PATH

APP = "tests.apps.mcp_app:app"
TOKEN = "a-token-of-twenty-chars"
_URL = re.compile(r"tenure mcp: (http://\S+)")


@pytest.fixture
def served(tenure_dsn: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``tenure mcp --http --port 0`` (loopback): its URL and its stderr."""
    err = tmp_path / "mcp-http.err"
    with err.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tenure", "mcp", APP, "--http", "--port", "0"],
            cwd=REPO_ROOT,
            env={**os.environ, "TENURE_DSN": tenure_dsn, TOKEN_ENV: ""},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        wait_until(
            lambda: _URL.search(err.read_text()) or process.poll() is not None,
            timeout=30,
            message="tenure mcp --http never printed its URL",
        )
        found = _URL.search(err.read_text())
        assert found is not None, err.read_text()
        yield found.group(1), err
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_tenure_mcp_http_serves_both_eras_on_loopback(
    served: tuple[str, Path], worker: WorkerProcess, tenure_dsn: str
) -> None:
    url, err = served
    assert NO_TOKEN in err.read_text()  # without a token every local account may call
    async with Client(url) as modern:  # probes server/discover: the stateless 2026 wire
        assert modern.protocol_version == "2026-07-28"
        result = await modern.call_tool("echo", {"text": "over http"})
        # Nobody could find a stateless request's job again: a key would run twice.
        with pytest.raises(MCPError, match="needs a principal") as keyed:
            await modern.call_tool("echo", {"text": "over http"}, meta=key("k"))
    assert text_of(result) == "over http", err.read_text()
    assert job_of(result)["scope"] == "request"
    assert keyed.value.error.code == INVALID_PARAMS
    # The 2025 handshake: a stateful session, the scope of its keys.
    async with Client(url, mode="legacy") as one, Client(url, mode="legacy") as two:
        first = await one.call_tool("echo", {"text": "a"}, meta=key("k"))
        again = await one.call_tool("echo", {"text": "a"}, meta=key("k"))
        other = await two.call_tool("echo", {"text": "a"}, meta=key("k"))
    assert job_of(again) == {**job_of(first), "created": False}
    assert job_of(other)["created"] is True and job_of(other)["id"] != job_of(first)["id"]
    assert job_of(first)["scope"] == job_of(other)["scope"] == "session"
    rows = jobs(tenure_dsn, "echo")
    assert {r["tenant"] for r in rows} == {ANONYMOUS}, rows  # one share for all of them
    assert len({r["idempotency_key"].split(":")[1] for r in rows}) == 3, rows


def test_a_bind_beyond_loopback_needs_a_token_like_the_dashboard(tenure_dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tenure", "mcp", APP, "--http", "--host", "0.0.0.0"],
        cwd=REPO_ROOT,
        env={**os.environ, "TENURE_DSN": tenure_dsn, TOKEN_ENV: ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "refusing to serve the MCP server on 0.0.0.0" in done.stderr, done.stderr
    assert TOKEN_ENV in done.stderr
    with pytest.raises(ConfigError, match="at least 16 characters"):
        http_app(App(tenure_dsn), token="short", host="127.0.0.1")


async def test_with_a_token_every_request_must_carry_it(app: App, worker: WorkerProcess) -> None:
    with serve(http_app(app, token=TOKEN)) as base:
        refused = httpx.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        wrong = httpx.post(f"{base}/mcp", json={}, headers={"Authorization": f"Bearer {TOKEN}x"})
        assert wrong.status_code == 401
        async with bearer(f"{base}/mcp", TOKEN) as client:
            result = await client.call_tool("echo", {"text": "let in"})
    assert text_of(result) == "let in"
    with serve(http_app(app)) as base:  # loopback without a token; Host must name us
        rebound = httpx.post(f"{base}/mcp", json={}, headers={"Host": "attacker.example"})
        assert rebound.status_code == 421


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "origin-test", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.mark.parametrize(
    ("bind", "token"), [("127.0.0.1", None), ("127.0.0.2", None), ("0.0.0.0", TOKEN)]
)
def test_a_foreign_origin_is_refused_on_every_bind(app: App, bind: str, token: str | None) -> None:
    """The SDK checks Origin only when bound to 127.0.0.1, localhost or ::1: on 127.0.0.2
    a page elsewhere got 200. Every bind refuses it now; no Origin (an MCP client) and the
    server's own origin pass."""
    served = ServerThread(http_app(app, token=token, host=bind), bind, 0)
    url = served.start()
    port = urlsplit(url).port
    assert port is not None
    base = url if bind != "0.0.0.0" else f"http://127.0.0.1:{port}"
    auth = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=base, timeout=30, headers={**MCP_HEADERS, **auth}) as client:
            assert client.post(PATH, json=INITIALIZE).status_code == 200
            own = {"Origin": base}
            assert client.post(PATH, json=INITIALIZE, headers=own).status_code == 200
            for origin in ("https://evil.example", "null", f"http://localhost:{port + 1}"):
                refused = client.post(PATH, json=INITIALIZE, headers={"Origin": origin})
                assert refused.status_code == 403, (origin, refused.status_code, refused.text)
    finally:
        served.stop()


class _Verifier:
    """The SDK's bearer auth with two users: each token is its own principal."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token not in ("alice-token", "bob-token"):
            return None
        return AccessToken(token=token, client_id=token.split("-")[0], scopes=[])


@asynccontextmanager
async def bearer(url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_authenticated_principal_finds_its_jobs_from_any_session_and_only_its_own(
    app: App, worker: WorkerProcess, tenure_dsn: str, mode: str
) -> None:
    asgi = server(app).streamable_http_app(
        auth=AuthSettings(issuer_url=AnyHttpUrl("http://127.0.0.1:9"), resource_server_url=None),
        token_verifier=_Verifier(),
    )
    with serve(asgi) as base:
        url = f"{base}/mcp"
        async with bearer(url, "alice-token", mode) as alice:
            first = await alice.call_tool("echo", {"text": "mine"}, meta=key("report"))
        async with bearer(url, "alice-token", mode) as alice_again:  # a new connection
            again = await alice_again.call_tool("echo", {"text": "mine"}, meta=key("report"))
        async with bearer(url, "bob-token", mode) as bob:
            theirs = await bob.call_tool("echo", {"text": "other"}, meta=key("report"))
    assert job_of(again) == {**job_of(first), "created": False}
    assert job_of(theirs)["created"] is True and text_of(theirs) == "other"
    tenants = [r["tenant"] for r in jobs(tenure_dsn, "echo")]
    assert len(tenants) == 2 and len(set(tenants)) == 2
    assert all(t.startswith("mcp:user:") for t in tenants), tenants


async def test_a_principals_task_is_its_own_from_any_session_and_nobody_elses(
    app: App, worker: WorkerProcess, tenure_dsn: str
) -> None:
    """Tasks over stateful HTTP (2025-11-25): the task id works from the principal's next
    session, after the one that created it closed; another principal's is not found."""
    asgi = server(app).streamable_http_app(
        auth=AuthSettings(issuer_url=AnyHttpUrl("http://127.0.0.1:9"), resource_server_url=None),
        token_verifier=_Verifier(),
    )
    with serve(asgi) as base:
        url = f"{base}/mcp"
        async with bearer(url, "alice-token", "legacy") as alice:
            task = (await task_call(alice, "echo", {"text": "later", "seconds": 0.5})).task
        async with bearer(url, "bob-token", "legacy") as bob:
            with pytest.raises(MCPError, match="Task not found"):
                await task_result(bob, task.task_id)
            assert (await task_list(bob)).tasks == []
        async with bearer(url, "alice-token", "legacy") as alice_again:
            result = await task_result(alice_again, task.task_id)
            [listed] = (await task_list(alice_again)).tasks
    assert text_of(result) == "later"
    assert listed.task_id == task.task_id and listed.status == "completed"
    [row] = jobs(tenure_dsn, "echo")
    assert row["tenant"].startswith("mcp:user:")


async def test_a_stateless_caller_without_a_principal_gets_no_task_but_the_plain_answer(
    app: App, worker: WorkerProcess
) -> None:
    """Nobody could come back for a task made for one stateless request: plain path."""
    with serve(server(app).streamable_http_app(stateless_http=True)) as base:
        async with Client(f"{base}/mcp", mode="legacy") as client:
            assert client.protocol_version == TASKS_REVISION
            result = await task_call_plain(client, "echo", {"text": "now"})
    assert result.content == [TextContent(type="text", text="now")]
    assert job_of(result)["scope"] == "request"


async def test_tenure_mcp_http_principals_find_their_tasks_on_another_replica(
    app: App, worker: WorkerProcess, tenure_dsn: str
) -> None:
    """Two replicas of ``http_app`` with the same principals' tokens (behind a load
    balancer, say): a task made on one is found on the other, by its principal only."""
    tokens = {"alice": "alice-" + "a" * 26, "bob": "bob-" + "b" * 28}
    replicas = [http_app(app, verifier=Principals(tokens)) for _ in range(2)]
    with serve(replicas[0]) as one, serve(replicas[1]) as two:
        async with bearer(f"{one}/mcp", tokens["alice"], "legacy") as alice:
            task = (await task_call(alice, "echo", {"text": "anywhere"}, key("r-1"))).task
        async with bearer(f"{two}/mcp", tokens["alice"], "legacy") as elsewhere:
            result = await task_result(elsewhere, task.task_id)
            again = await task_call(elsewhere, "echo", {"text": "anywhere"}, key("r-1"))
        async with bearer(f"{two}/mcp", tokens["bob"], "legacy") as bob:
            with pytest.raises(MCPError, match="Task not found"):
                await task_result(bob, task.task_id)
    assert text_of(result) == "anywhere"
    assert again.task.task_id == task.task_id
    [row] = jobs(tenure_dsn, "echo")
    assert row["tenant"] == "mcp:principal:alice"
