"""Chaos tooling: the fault harness, the history, the checker, and ``tenure chaos``.

- `run_chaos` / `main`: the article's unpleasant test against a user's own tool and
  receiver (``tenure chaos MODULE:APP TOOL [PAYLOAD] --receiver URL --receiver-env NAME``);
- `check`, `Evidence`, `Fault`, `Report`: the history checker;
- `run_storm`, `StormPlan`: storms (crash, pause, network, restarts, clock skew);
- `Supervisor`, `ChaosProxy`: worker processes and the per-link fault proxy.
"""

from ._checker import Evidence, Fault, Report, check
from ._harness import ReceiverProcess, Supervisor
from ._proxy import ChaosProxy
from ._storm import StormPlan, StormResult, run_storm
from ._unpleasant import ChaosReport, add_chaos_arguments, chaos_command, main, run_chaos

__all__ = [
    "ChaosProxy",
    "ChaosReport",
    "Evidence",
    "Fault",
    "ReceiverProcess",
    "Report",
    "StormPlan",
    "StormResult",
    "Supervisor",
    "add_chaos_arguments",
    "chaos_command",
    "check",
    "main",
    "run_chaos",
    "run_storm",
]
