"""The one line an App without a DSN says about the embedded server it uses, once per
process and data dir, and the servers so in use (the doctor reports them): a producer
that lost its TENURE_DSN would otherwise queue jobs the real workers never see."""

from __future__ import annotations

import threading
import weakref
from pathlib import Path

from ._host import tell
from ._server import EmbeddedPostgres

_notice_lock = threading.Lock()
_announced: set[Path] = set()
_in_use: weakref.WeakSet[EmbeddedPostgres] = weakref.WeakSet()


def announce(server: EmbeddedPostgres) -> None:
    """Say on stderr, once per process and data dir, that an App without a DSN uses
    `server`: a producer that lost its TENURE_DSN (an MCP client started with a minimal
    environment) would otherwise queue jobs that the real workers never see."""
    with _notice_lock:
        _in_use.add(server)
        if server.data_dir in _announced:
            return
        _announced.add(server.data_dir)
    tell(usage_notice(server))


def usage_notice(server: EmbeddedPostgres) -> str:
    """One short line naming the embedded server an App without a DSN uses and whose it
    is (`tenure embedded` shows the rest: its DSN, its log)."""
    borrowed = server.borrowed
    if borrowed is None:
        return (
            f"no TENURE_DSN: this process runs the embedded PostgreSQL in {server.data_dir} "
            "(other machines do not see its jobs)"
        )
    return (
        f"no TENURE_DSN: using the embedded PostgreSQL in {server.data_dir} that pid "
        f"{borrowed.owner or borrowed.pid} runs (it stops when that process exits)"
    )


def servers_in_use() -> list[EmbeddedPostgres]:
    """The embedded servers that Apps without a DSN use in this process, while they run."""
    with _notice_lock:
        return [s for s in _in_use if s.pid is not None or s.borrowed is not None]
