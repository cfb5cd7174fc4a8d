"""``tenure chaos`` and the fault harness it runs on.

- `run_chaos` / `main`: the article's unpleasant test against a user's own tool and
  receiver (``tenure chaos MODULE:APP TOOL [PAYLOAD] --receiver URL --receiver-env NAME``);
- `Supervisor`, `FaultProxy`, `wait_for`: worker processes, the per-link fault proxy,
  polling with a deadline (the test suite uses the same ones);
- `_history`, `_worker_main`: what each worker saw, in a local file.

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
