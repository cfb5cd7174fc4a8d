"""The table's cells, as real deployments: ``tenure mcp`` over stdio or streamable HTTP as
a subprocess, with or without principals, reached by the SDK's own client on the 2025
handshake or the 2026-07-28 wire; and the server killed (SIGKILL) and started again.

A cell's `Deployment` opens connections as a named caller (``alice``, ``bob``: with a
principal, stdio's ``--principal`` or an HTTP bearer token naming it; without, the name
is only the test's) and kills and restarts the server process under them.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx2
from mcp import Client
from mcp.client.session import ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from tests.support.waiting import wait_until
from tests.support.workers import REPO_ROOT
from tests.system.adapters.mcp.helpers import TasksExtension, stdio

from tenure.mcp import TOKENS_ENV

APP = "tests.apps.mcp_app:app"
TOKENS = {"alice": "alice-" + "a" * 26, "bob": "bob-" + "b" * 28}
_URL = re.compile(r"tenure mcp: (http://\S+)")

Revision = Literal["2025-11-25", "2026-07-28"]
Transport = Literal["stdio", "http"]


@dataclass(frozen=True)
class Cell:
    """One row of docs/guides/mcp.md's table."""

    revision: Revision
    transport: Transport
    principal: bool

    @property
    def id(self) -> str:
        return f"{self.revision}-{self.transport}-{'principal' if self.principal else 'none'}"

    @property
    def modern(self) -> bool:
        return self.revision == "2026-07-28"

    @property
    def stateless(self) -> bool:
        """Nothing scopes a caller: the 2026-07-28 HTTP wire without a principal."""
        return self.modern and self.transport == "http" and not self.principal

    @property
    def scope(self) -> str:
        """What a call's ``_meta["tenure/job"].scope`` says on this cell."""
        return "principal" if self.principal else "request" if self.stateless else "session"


CELLS = [
    Cell(revision, transport, principal)
    for revision in ("2025-11-25", "2026-07-28")
    for transport in ("stdio", "http")
    for principal in (False, True)
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Deployment:
    """A cell's server, on this test's database (`env`: what the app reads besides)."""

    cell: Cell
    dsn: str
    tmp: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    url: str = ""
    connections: int = 0

    def __post_init__(self) -> None:
        if self.cell.transport == "http":
            self.start()

    @property
    def errlog(self) -> Path:
        return self.tmp / "mcp-server.err"

    def logs(self) -> str:
        return self.errlog.read_text(errors="replace") if self.errlog.exists() else ""

    # -- HTTP: one server process, killed and started again on the same port ------------

    def start(self) -> None:
        env = {**os.environ, "TENURE_DSN": self.dsn, **self.env}
        env.pop("TENURE_MCP_TOKEN", None)
        if self.cell.principal:
            env[TOKENS_ENV] = " ".join(f"{name}={token}" for name, token in TOKENS.items())
        start = self.errlog.stat().st_size if self.errlog.exists() else 0
        with self.errlog.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tenure", "mcp", APP, "--http", "--port", str(self.port)],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        process = self.process

        def url() -> re.Match[str] | None:
            return _URL.search(self.logs()[start:])

        wait_until(
            lambda: url() is not None or process.poll() is not None,
            timeout=60,
            message="tenure mcp --http never printed its URL",
        )
        found = url()
        assert found is not None, self.logs()
        self.url = found.group(1)

    def kill(self) -> None:
        """SIGKILL the server process: the one serving HTTP, or the stdio one last started."""
        if self.cell.transport == "http":
            assert self.process is not None
            self.process.kill()
            self.process.wait(timeout=30)
            return
        pid = int(self.pidfile(self.connections).read_text())
        os.kill(pid, signal.SIGKILL)

    def restart(self) -> None:
        """Start the server again after `kill` (stdio: the next connection starts it)."""
        if self.cell.transport == "http":
            self.start()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def pidfile(self, number: int) -> Path:
        return self.tmp / f"mcp-stdio-{number}.pid"

    # -- connections ---------------------------------------------------------------------

    @asynccontextmanager
    async def connect(
        self, who: str = "alice", *, tasks: bool = False, elicitation: ElicitationFnT | None = None
    ) -> AsyncIterator[Client]:
        """A new connection of caller ``who`` (``tasks``: declaring the 2026-07-28 tasks
        extension), through the SDK's own client on the cell's revision."""
        legacy = not self.cell.modern
        if self.cell.transport == "stdio":
            self.connections += 1
            args = ["--principal", who] if self.cell.principal else []
            client = stdio(
                self.dsn,
                self.errlog,
                APP,
                *args,
                env=self.env,
                legacy=legacy,
                tasks=tasks,
                elicitation=elicitation,
                pidfile=self.pidfile(self.connections),
            )
            async with client:
                yield self._checked(client)
            return
        headers = {"Authorization": f"Bearer {TOKENS[who]}"} if self.cell.principal else {}
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
            client = Client(
                streamable_http_client(self.url, http_client=http),
                mode="legacy" if legacy else "auto",
                elicitation_callback=elicitation,
                extensions=[TasksExtension()] if tasks else None,
            )
            async with client:
                yield self._checked(client)

    def _checked(self, client: Client) -> Client:
        assert client.protocol_version == self.cell.revision, client.protocol_version
        return client


@contextmanager
def deployed(cell: Cell, dsn: str, tmp: Path, **env: Any) -> Iterator[Deployment]:
    deployment = Deployment(cell, dsn, tmp, {k: str(v) for k, v in env.items()})
    try:
        yield deployment
    finally:
        deployment.stop()
