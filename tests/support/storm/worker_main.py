"""``python -m tests.support.storm.worker_main --history DIR MODULE:APP [options]``.

``tenure chaos``'s worker (`tenure._cli._chaos_worker`), whose history's first line
also says what the storms' checker must know of this process's clocks: the
``faketime`` spec it runs under, whether its monotonic clock is the machine's, and
the machine's uptime (to map a skewed wall clock on the real one).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from tenure._cli._chaos_worker import main


def clock() -> dict[str, Any]:
    return {"faketime": os.environ.get("FAKETIME"), "uptime": _uptime(), "real_monotonic": _real()}


def _uptime() -> float | None:
    """Seconds since boot from /proc (a file read: never faked by libfaketime)."""
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _real() -> bool:
    return not os.environ.get("FAKETIME") or os.environ.get("FAKETIME_DONT_FAKE_MONOTONIC") == "1"


if __name__ == "__main__":
    sys.exit(main(**clock()))
