"""Runs a bench worker while a thread writes its stats to a JSON file.

The file is replaced (write, then rename) twice a second and once more at exit, so a
harness reading it never sees half a file. Used by hold_worker.py and churn_worker.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable
from typing import Any


def run_writing_stats(worker: Any, path: str, snapshot: Callable[[], dict[str, Any]]) -> None:
    """``asyncio.run(worker.run())``, writing ``snapshot()`` to ``path`` meanwhile."""

    def write() -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(snapshot(), fh)
        os.replace(tmp, path)

    stop = threading.Event()

    def writer() -> None:
        while not stop.wait(0.5):
            write()

    threading.Thread(target=writer, daemon=True).start()
    try:
        asyncio.run(worker.run())
    finally:
        stop.set()
        write()
