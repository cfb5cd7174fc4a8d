-- tenure 0011: the workers registry, and the index the queue charts read enqueues by.
--
-- Each worker process registers itself at start (its name is the key: a restarted worker
-- with the same name takes its row over) and its heartbeat thread keeps `last_seen_at`
-- fresh: folded into the batched lease extension while it holds leases, else one cheap
-- statement every `keepalive_ms`. Readers call a worker silent once it has not been seen
-- for three of its own keep-alive periods, so no reader needs to know how each worker was
-- configured. A clean shutdown stamps `stopped_at`. The leases a worker holds are not
-- stored here: they are counted from tenure_jobs (owner, state 'running'), the one truth.
-- The worker pruner deletes rows not seen for longer than its horizon.
CREATE TABLE tenure_workers (
    name          text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    host          text        NOT NULL CHECK (length(host) <= 255),
    pid           integer     NOT NULL CHECK (pid >= 0),
    version       text        NOT NULL CHECK (length(version) <= 64),
    tools         text[]      NOT NULL CHECK (cardinality(tools) <= 10000),
    concurrency   integer     NOT NULL CHECK (concurrency BETWEEN 1 AND 10000),
    keepalive_ms  integer     NOT NULL CHECK (keepalive_ms BETWEEN 100 AND 3600000),
    started_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    stopped_at    timestamptz
);

-- A worker's status on the database's clock, the one definition every reader uses
-- (`tenure workers`, the dashboard, tenure_workers{status}): stopped after a clean shutdown,
-- silent once unseen for three of its own keep-alive periods, else alive. VOLATILE: it
-- reads clock_timestamp().
CREATE FUNCTION tenure_worker_status(p_stopped_at timestamptz, p_last_seen_at timestamptz,
                                     p_keepalive_ms integer) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN p_stopped_at IS NOT NULL THEN 'stopped'
                WHEN clock_timestamp() - p_last_seen_at
                     > 3 * p_keepalive_ms * interval '1 millisecond' THEN 'silent'
                ELSE 'alive' END
$$;

-- The pruner walks rows not seen since its horizon, oldest first.
CREATE INDEX tenure_workers_last_seen ON tenure_workers (last_seen_at);

-- Jobs enqueued per minute (the dashboard's queue charts) without reading every job: a
-- range scan over the window. Every index of tenure_jobs costs each non-HOT update of a row
-- it holds one more entry, and a claim, every heartbeat and a commit are non-HOT
-- (lease_until is indexed); so this one holds no running job: a claim and a heartbeat add
-- nothing to it, an enqueue and a commit one entry each. Running jobs are counted through
-- tenure_jobs_lease_until instead. `created_at > '-infinity'` (true of every row) keeps the
-- planner from taking it for statements that only say `state <> 'running'`. The definition
-- is the one the job explorer's migration (0013, not yet merged) gives an index of this
-- name, (created_at, id) for its keyset pages, so the two features share one index.
CREATE INDEX tenure_jobs_created ON tenure_jobs (created_at, id)
    WHERE state <> 'running' AND created_at > '-infinity';
