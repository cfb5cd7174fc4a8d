"""The background services every worker runs, and the supervisor that composes them.

Module map:

    _supervisor      Supervisor: a process's background loops (Components) in one list,
                     started in order, stopped in reverse; Signals that tests await
    _service         Service: the components with rounds: config validated eagerly,
                     idempotent start/stop, run_once() for tests, one event per round
                     (component_round) and one error policy (log, survive, try again)
    _rescuer         Rescuer: exhausted expired leases fail; stuck pipeline runs move on;
                     failed outbox deliveries go again; expired waitpoints resume or fail
    _scheduler       Scheduler: enqueues each slot of a periodic schedule once, across workers
    _cron            five-field cron expressions, read in UTC (used by the scheduler)
    _job_pruner      JobPruner: deletes finished jobs past their own retention (prune_after)
    _journal_pruner  JournalPruner: deletes journal rows past the journal's retention
                     (started with a worker's telemetry, tenure._observe._runtime)
    _worker_pruner   WorkerPruner: deletes registry rows of workers unseen past a horizon
    _statistics      StatisticsKeeper: ANALYZE tenure_jobs after a burst the planner missed

They reach the database only through the store (tenure._store).
"""
