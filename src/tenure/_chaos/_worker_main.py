"""``python -m tenure._chaos._worker_main --history DIR MODULE:APP [tenure worker options]``.

Exactly ``tenure worker``, plus a local history of what this process saw (see
`tenure._chaos._history`). The chaos runner starts its workers through this so
that the user's app needs no change; ``faketime`` may prefix the command.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ._history import install


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tenure._chaos._worker_main")
    parser.add_argument("--history", required=True, type=Path)
    parser.add_argument("--name", required=True)
    known, rest = parser.parse_known_args(argv)
    writer = install(known.history, known.name, uptime=_uptime(), real_monotonic=_real_monotonic())
    from .._cli import main as tenure_main

    try:
        return tenure_main(["worker", *rest, "--name", known.name])
    finally:
        writer.write("worker_exit")
        writer.close()


def _uptime() -> float | None:
    """Seconds since boot from /proc (a file read: never faked by libfaketime)."""
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _real_monotonic() -> bool:
    return not os.environ.get("FAKETIME") or os.environ.get("FAKETIME_DONT_FAKE_MONOTONIC") == "1"


if __name__ == "__main__":
    sys.exit(main())
