"""``tenure chaos`` and the fault harness it runs on.

Module map:

    _unpleasant   `run_chaos` / `main`: the unpleasant test against a user's own tool and
                  receiver (``tenure chaos MODULE:APP TOOL [PAYLOAD] --receiver URL
                  --receiver-env NAME``): W1 sends, loses the database, its lease ends,
                  W2 redoes the call; the receiver must refuse W1 and apply one effect
    _harness      `Supervisor`: real worker processes, started, broken, always cleaned
                  up; `wait_for`: polling with a deadline
    _proxy        `FaultProxy`: a TCP proxy per link that resets, blackholes, holds or
                  delays it
    _history      what each worker process saw, in a local JSON-lines file (its workers run
                  ``tenure worker`` plus that history: ``tenure._cli._chaos_worker``)

The test suite uses the same harness, proxy and polling.

The storms, their checker and the soak are test tooling, not shipped: ``tests/support/storm``.
"""

from ._harness import Supervisor, wait_for
from ._proxy import FaultProxy
from ._unpleasant import ChaosReport, add_chaos_arguments, chaos_command, main, run_chaos

__all__ = [
    "ChaosReport",
    "FaultProxy",
    "Supervisor",
    "add_chaos_arguments",
    "chaos_command",
    "main",
    "run_chaos",
    "wait_for",
]
