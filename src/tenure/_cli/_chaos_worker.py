"""``python -m tenure._cli._chaos_worker --history DIR MODULE:APP [tenure worker options]``.

Exactly ``tenure worker``, plus a local history of what this process saw (see
`tenure._chaos._history`). The chaos runner starts its workers through this so
that the user's app needs no change (it lives with the command it runs, so the chaos
kit imports nothing of the CLI). The storms' own worker (``tests/support``)
calls `main` with what it knows of the process's clocks.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._chaos._history import install


def main(argv: Sequence[str] | None = None, **clock: Any) -> int:
    """Run ``tenure worker`` recording its history; ``clock`` goes into the first line."""
    parser = argparse.ArgumentParser(prog="python -m tenure._cli._chaos_worker")
    parser.add_argument("--history", required=True, type=Path)
    parser.add_argument("--name", required=True)
    known, rest = parser.parse_known_args(argv)
    writer = install(known.history, known.name, **clock)
    from ._main import main as tenure_main

    try:
        return tenure_main(["worker", *rest, "--name", known.name])
    finally:
        writer.write("worker_exit")
        writer.close()


if __name__ == "__main__":
    sys.exit(main())
