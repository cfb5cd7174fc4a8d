"""The background services a worker runs beside its tools, and their settings.

Every worker process runs them on one supervisor (each round logs one ``component_round``
event): the rescuer (expired leases, waitpoints past their deadline, stuck runs), the
scheduler (periodic jobs), the job pruner (finished jobs past their retention), the journal
pruner, the worker pruner (the workers registry's dead rows) and the statistics keeper. Each
is on with sensible defaults; give a config to tune one:

    from tenure.maintenance import JobPrunerConfig

    worker = app.worker(job_pruner=JobPrunerConfig(interval=60.0))

``tenure worker``'s flags set the same fields.
"""

from . import _report_as_tenure
from ._maintenance._job_pruner import JobPrunerConfig
from ._maintenance._journal_pruner import JournalPrunerConfig
from ._maintenance._rescuer import RescuerConfig
from ._maintenance._scheduler import SchedulerConfig
from ._maintenance._statistics import StatisticsConfig
from ._maintenance._worker_pruner import WorkerPrunerConfig

__all__ = [
    "JobPrunerConfig",
    "JournalPrunerConfig",
    "RescuerConfig",
    "SchedulerConfig",
    "StatisticsConfig",
    "WorkerPrunerConfig",
]

for _name in __all__:
    _report_as_tenure(globals()[_name], __name__)
del _name
