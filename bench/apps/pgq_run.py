"""Runs a pgqueuer worker exactly as ``pgq run pgq_app:factory --batch-size N`` does.

pgqueuer 1.6.0's ``pgq run`` fails at start-up with the typer release that pip
resolves today (``AttributeError: 'str' object has no attribute 'name'`` in
``setup_fancy_logger``), so this calls what the command calls: the same logger
set-up, ``pgqueuer.run`` (its documented programmatic entry point) and uvloop,
which the CLI uses when it is installed (it is a pgqueuer dependency).
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta

import pgqueuer
from pgqueuer.core import logconfig

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--factory", default="pgq_app:factory")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--dequeue-timeout", type=float, default=30.0)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    logconfig.setup_fancy_logger(logconfig.LogLevel[args.log_level.upper()])
    coro = pgqueuer.run(
        args.factory,
        batch_size=args.batch_size,
        dequeue_timeout=timedelta(seconds=args.dequeue_timeout),
    )
    if uvloop is not None:
        uvloop.run(coro)
    else:
        asyncio.run(coro)


if __name__ == "__main__":
    main()
