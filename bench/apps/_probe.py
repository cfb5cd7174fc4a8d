"""A tool-start probe shared by every bench app: one UDP datagram per start.

The datagram carries the job's key, ``time.time()`` taken as the tool's first
action, and the worker's pid. The harness enqueues from another process and
compares against its own ``time.time()`` taken just before the enqueue call:
same machine, same wall clock, so the difference is an honest cross-process
enqueue → tool-start latency.
"""

from __future__ import annotations

import os
import socket
import time

_PORT = int(os.environ.get("BENCH_UDP_PORT", "0") or 0)
_SOCK = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


def started(key: str) -> None:
    now = time.time()
    if _PORT:
        _SOCK.sendto(f"{key} {now:.6f} {os.getpid()}".encode(), ("127.0.0.1", _PORT))
