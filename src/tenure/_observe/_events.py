"""The catalogue of events: the telemetry contract in one table.

Every kind tenure emits or journals is listed here with who emits it, where
it is journaled and what ``duration_ms`` measures; the events reference's table
(docs/reference/events.md) is checked against this catalogue by the tests, and so
is every literal kind passed to ``log_event`` in the source. Consumers (metrics, the journal
writer, the dashboard) select kinds from here rather than spelling them again.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class EventSpec:
    """One kind of event.

    ``journal`` names who writes the journal row: a statement (``claim``,
    ``finish_many``, ...), ``heartbeat`` (the heartbeat thread's own
    connection), ``completer``, ``writer`` (the batched journal writer), or
    ``-`` for log-only events. ``duration`` names the field whose value (in
    seconds) becomes ``duration_ms`` when the writer journals the event.
    """

    kind: str
    emitted_by: str
    journal: str
    meaning: str
    duration: str | None = None


_SPECS = (
    EventSpec(
        "job_claimed",
        "worker (log), claim (journal)",
        "claim",
        "a worker took a job under a new token; a reclaim carries previous_token and "
        "reclaimed_from. duration_ms: how long the job had been claimable",
    ),
    EventSpec(
        "job_reclaimed",
        "derived",
        "-",
        "not a row of its own: a job_claimed row with previous_token "
        "(`tenure events --kind job_reclaimed` selects those)",
    ),
    EventSpec(
        "lease_expired",
        "worker (log, at reclaim), claim and rescuer (journal)",
        "claim, fail_exhausted_leases",
        "a lease ran out; token, attempt and worker are the expired holder's. "
        "duration_ms: how long past its end it was found",
    ),
    EventSpec(
        "heartbeat_ok",
        "heartbeat thread (DEBUG log)",
        "writer, only with journal_heartbeats",
        "a lease was extended. duration_ms: heartbeat_age, the time since the previous "
        "confirmation",
        duration="heartbeat_age",
    ),
    EventSpec(
        "heartbeat_batch",
        "heartbeat thread (DEBUG log)",
        "-",
        "one heartbeat statement confirmed leases of one tool: leases (how many), "
        "heartbeat_age (the longest time since a confirmation it renewed), lease_left (the "
        "least lease left when it was sent), via (session or extension). The metrics read "
        "this, not each heartbeat_ok: one observation per tool and beat, however many leases",
    ),
    EventSpec(
        "heartbeat_withheld",
        "heartbeat thread (log)",
        "- (journaled as heartbeat_lost, reason executor_unobservable)",
        "the executor was not observable (loop stalled, task done, time limit), so its lease "
        "was not extended",
    ),
    EventSpec(
        "heartbeat_lost",
        "heartbeat thread",
        "heartbeat",
        "the lease is gone: reason zero_rows (the database refused the extension), "
        "deadline_passed (the conservative local deadline ran out) or executor_unobservable. "
        "duration_ms: time since the last confirmation",
    ),
    EventSpec(
        "ownership_unknown",
        "heartbeat thread",
        "writer (once the database answers again; `at` is back-dated)",
        "the database did not answer a heartbeat (reason db_error): no new irreversible step. "
        "duration_ms: time since the last confirmation",
        duration="since_confirmed",
    ),
    EventSpec(
        "cancel_observed",
        "heartbeat thread (log)",
        "-",
        "the owner learned of an operator's cancel (via notify, recheck when its LISTEN "
        "connection came back, or heartbeat); the cancel itself is journaled as cancelled",
    ),
    EventSpec(
        "tool_request_started",
        "FencedAuth, right before the request is sent",
        "writer",
        "a fenced side-effect request left the worker: operation, idempotency key, method, "
        "host (never the body or path). duration_ms: confirmed lease left when it was sent",
        duration="lease_left",
    ),
    EventSpec(
        "call_finished",
        "worker (log)",
        "-",
        "the tool returned or raised: outcome, code, duration (the commit is journaled apart)",
    ),
    EventSpec(
        "call_abandoned",
        "worker (log)",
        "-",
        "the call was stopped without a commit (lease lost, cancelled): reason, duration",
    ),
    EventSpec(
        "call_stopped",
        "worker",
        "record_stop",
        "a cancelled call has stopped: its task ended or its thread returned (what "
        'cancel(until="stopped") waits for). duration_ms: how long it ran after its owner '
        "learned of the cancel",
    ),
    EventSpec(
        "result_discarded",
        "worker",
        "writer",
        "the tool returned or raised after its lease was lost or its job cancelled: the "
        "outcome (detail outcome, never its content) was thrown away, not committed. "
        "duration_ms: how long the call ran",
        duration="duration",
    ),
    EventSpec(
        "commit_uncertain",
        "completer (log)",
        "-",
        "a fenced commit got no answer (an uncertain verdict); it is retried while the "
        "lease may hold",
    ),
    EventSpec(
        "commit_answered",
        "completer (DEBUG log)",
        "-",
        "a fenced commit statement answered (accepted or refused): how many outcomes it "
        "carried (jobs) and how long it took, pool wait included (duration)",
    ),
    EventSpec(
        "commit_retried",
        "completer (log)",
        "-",
        "a fenced commit was rolled back (a retry verdict: a deadlock, a lock or statement "
        "timeout; error, sqlstate); it is sent again while the lease may hold",
    ),
    EventSpec(
        "commit_refused",
        "completer (log)",
        "-",
        "the database refused an outcome and sending it again cannot help (a fail verdict: "
        "a constraint, a value it cannot store, a privilege; error, sqlstate): it is "
        "committed instead as a failure (code bad_result or commit_refused), for that job alone",
    ),
    EventSpec(
        "result_rejected",
        "completer",
        "completer",
        "the fenced commit matched zero rows: the result was not published (detail outcome)",
    ),
    EventSpec(
        "succeeded",
        "finish_many",
        "finish_many",
        "the result was committed. duration_ms: the attempt's run time, claim to commit",
    ),
    EventSpec(
        "failed",
        "finish_many, fail_exhausted_leases",
        "finish_many, fail_exhausted_leases",
        "the job ended failed with a code (lease_expired from the rescuer). duration_ms: "
        "the attempt's run time",
    ),
    EventSpec(
        "retried",
        "finish_many",
        "finish_many",
        "the attempt failed and the job was queued again after backoff (code)",
    ),
    EventSpec(
        "released",
        "finish_many",
        "finish_many",
        "shutdown handed the lease back without burning an attempt",
    ),
    EventSpec(
        "cancelled",
        "cancel_job (operator: CLI, dashboard, App.cancel)",
        "cancel_job",
        "an operator cancelled the job. duration_ms: how long a running attempt had run",
    ),
    EventSpec(
        "suspended",
        "suspend_job statement (the call's fenced commit)",
        "suspend_job",
        "the call suspended at a waitpoint (detail waitpoint, kind: answer, sleep or "
        "children, timeout_ms, on_timeout; reopened: true when a retry opened it again): no "
        "lease, no slot while it waits. duration_ms: how long the attempt ran",
    ),
    EventSpec(
        "waitpoint_answered",
        "complete_waitpoint statement (App.answer_waitpoint, the dashboard's endpoint)",
        "complete_waitpoint",
        "a waitpoint was answered and its job queued again (detail waitpoint; kind children "
        "when its child jobs' end answered it; never the answer). duration_ms: how long it "
        "waited",
    ),
    EventSpec(
        "waitpoint_timed_out",
        "rescuer (expire_waitpoints)",
        "expire_waitpoints",
        "a waitpoint's deadline passed: its job was queued again or failed (detail then). "
        "duration_ms: how long it waited",
    ),
    EventSpec(
        "step_recorded",
        "record_step statement (ctx.step, under the job's token)",
        "record_step",
        "a fenced step completed and its checkpoint was recorded (detail step, kind; never "
        "its result): a later attempt replays it instead of running it. duration_ms: how "
        "long the step ran",
    ),
    EventSpec(
        "step_rejected",
        "worker",
        "writer",
        "a step's checkpoint matched zero rows (a newer owner holds the job): its result "
        "was not recorded and the attempt stopped (detail step)",
    ),
    EventSpec(
        "retry_requested",
        "retry_job (operator)",
        "retry_job",
        "an operator queued a failed or cancelled job again",
    ),
    EventSpec(
        "stale_fence_rejected",
        "receiver: FenceObserver on FenceMiddleware",
        "writer, when the observer has a journal DSN",
        "a receiver refused a request whose fencing token is below the highest it accepted",
    ),
    EventSpec("worker_started", "worker (log)", "-", "a worker is ready: concurrency, tools"),
    EventSpec("worker_draining", "worker (log)", "-", "soft stop with calls still running"),
    EventSpec("worker_stopped", "worker (log)", "-", "the worker is gone: counts"),
    EventSpec("claim_failed", "worker (log)", "-", "a claim statement failed (error class)"),
    EventSpec("listen_failed", "worker (DEBUG log)", "-", "LISTEN dropped; polling covers it"),
    EventSpec("metrics_listening", "worker (log)", "-", "where /metrics is served: url"),
    EventSpec(
        "journal_dropped",
        "journal writer (log)",
        "-",
        "the writer's buffer was full (database away too long): how many events were dropped",
    ),
    EventSpec(
        "component_round",
        "every background component with rounds (log: DEBUG when ok)",
        "-",
        "a round of a background component ended (Oban's plugin span): component (rescuer, "
        "scheduler, job_pruner, journal_pruner, worker_pruner, statistics, journal_writer), "
        "outcome ok or failed, duration, its counts (rows, acted, items); a failed round "
        "carries the error class (WARNING for a database error, ERROR for a bug) and the "
        "component tries again next round. The journal writer reports only its failures "
        "(once per streak, with what it still buffers)",
    ),
    EventSpec("events_pruned", "pruner (log)", "-", "journal rows past retention were deleted"),
    EventSpec(
        "dispatched",
        "pipeline transition statement",
        "transition",
        "a pipeline stage's job was queued in the same transaction as the previous stage's "
        "commit (detail run, after_job)",
    ),
    EventSpec(
        "rescued",
        "rescuer (log)",
        "-",
        "a rescue sweep acted: leases failed on their last attempt (each journaled as "
        "lease_expired + failed), runs re-dispatched or adopted, intents resent",
    ),
    EventSpec(
        "mcp_enqueue_failed",
        "MCP server (log)",
        "-",
        "an MCP call could not be queued (error class; the client got an internal error)",
    ),
    EventSpec(
        "mcp_follow_failed",
        "MCP server (log)",
        "-",
        "an MCP call's job could not be read while waiting for it (error class)",
    ),
    EventSpec(
        "mcp_task_failed",
        "MCP server (log)",
        "-",
        "an MCP tasks/* request could not be answered (step, error class)",
    ),
    EventSpec("jobs_pruned", "job pruner (log)", "-", "finished jobs past retention were deleted"),
    EventSpec(
        "workers_pruned",
        "worker pruner (log)",
        "-",
        "registry rows of workers not seen for the pruner's horizon were deleted",
    ),
    EventSpec(
        "worker_unregister_failed",
        "worker (log)",
        "-",
        "a stopping worker could not mark its registry row stopped (error class); the row "
        "goes silent instead",
    ),
    EventSpec(
        "statistics_refreshed",
        "statistics keeper (log)",
        "-",
        "tenure_jobs was analyzed after a burst made the planner's statistics wrong",
    ),
    EventSpec(
        "slot_enqueued",
        "scheduler (log)",
        "-",
        "a periodic schedule's slot was queued (schedule, slot, how late)",
    ),
    EventSpec(
        "slot_skipped", "scheduler (log)", "-", "a missed slot was skipped, per its schedule"
    ),
)

EVENTS: MappingProxyType[str, EventSpec] = MappingProxyType({s.kind: s for s in _SPECS})

# What the journal writer writes; the other journaled kinds are written by their statement.
WRITER_KINDS = frozenset(
    {
        "ownership_unknown",
        "tool_request_started",
        "stale_fence_rejected",
        "result_discarded",
        "step_rejected",
    }
)

# The dashboard's ownership feed (these match the partial index tenure_events_notable).
OWNERSHIP_KINDS = (
    "lease_expired",
    "heartbeat_lost",
    "result_rejected",
    "result_discarded",
    "ownership_unknown",
    "stale_fence_rejected",
    "cancelled",
    "retry_requested",
)

# Kinds a journal row can have (everything journaled by a statement, a thread or the writer).
JOURNAL_KINDS = frozenset(s.kind for s in _SPECS if not s.journal.startswith("-"))
