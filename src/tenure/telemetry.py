"""What tenure says about the work it runs, for your metrics, traces and audits.

Every event — a claim, a lost lease, a fenced request leaving, a commit refused —
is an `Event` handed to each attached handler as it happens, on the thread that
saw it; `EVENTS` is the catalogue of their kinds (who emits each, whether the
journal keeps it, what its ``duration_ms`` measures). Events carry ids, tokens,
codes and durations, never a payload, a result or an error message.

    >>> from tenure.telemetry import attach
    >>> detach = attach(lambda event: print(event.kind, event.job), kinds={"lease_expired"})
    >>> detach()

The journal's rows as `App.admin.find_events` and `App.admin.events` return them are
`JournalEntry`; `App.admin.job` and `App.admin.waitpoints` return `JobDetail` and
`JobWaitpoint`; `App.admin.doctor` returns `Check` findings; `App.admin.workers` returns
`WorkerInfo` (who is alive, who went silent, what each holds).

An `Interceptor` wraps tenure's steps — enqueue, claim, call, commit, a fenced request
— for a metric, a span or an audit of your own: ``App(interceptors=[...])``
(``tenure.otel`` is one, added to every chain of the process).
"""

from ._intercept import Interceptor
from ._log import Event, Handler, attach
from ._observe._doctor import Check
from ._observe._events import EVENTS, EventSpec
from ._store import JobDetail, JobWaitpoint, JournalEntry, WorkerInfo

__all__ = [
    "EVENTS",
    "Check",
    "Event",
    "EventSpec",
    "Handler",
    "Interceptor",
    "JobDetail",
    "JobWaitpoint",
    "JournalEntry",
    "WorkerInfo",
    "attach",
]
