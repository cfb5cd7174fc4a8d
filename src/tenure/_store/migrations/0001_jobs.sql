-- tenure 0001: jobs under leases, one global fencing sequence, an event journal.

-- Every claim draws its fencing token here: one sequence for the whole system,
-- so tokens are monotonic across jobs, workers and restarts (like an etcd revision).
CREATE SEQUENCE tenure_fence_token AS bigint;

CREATE TABLE tenure_jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tool             text        NOT NULL CHECK (length(tool) BETWEEN 1 AND 200),
    state            text        NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    owner            text,
    lease_until      timestamptz,
    heartbeat_at     timestamptz,
    token            bigint      NOT NULL DEFAULT 0,
    attempt          integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     integer     NOT NULL CHECK (max_attempts BETWEEN 1 AND 1000),
    priority         smallint    NOT NULL DEFAULT 0,
    run_after        timestamptz NOT NULL DEFAULT clock_timestamp(),
    idempotency_key  text        NOT NULL UNIQUE CHECK (length(idempotency_key) BETWEEN 1 AND 500),
    payload          jsonb       NOT NULL,
    payload_hash     text        NOT NULL,
    result           jsonb,
    error            jsonb,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at      timestamptz,
    CONSTRAINT running_has_lease CHECK (state <> 'running' OR (owner IS NOT NULL AND lease_until IS NOT NULL))
);

-- The claim: queued rows in pick order. Partial, so finished rows never slow it down.
CREATE INDEX tenure_jobs_queued ON tenure_jobs (priority DESC, run_after, id)
    WHERE state = 'queued';

-- The rescue: expired leases. A plain (not partial) index on lease_until: a partial
-- one, with statistics gathered while nothing ran, was measured to poison the by-id
-- heartbeat and commit plans. lease_until is NULL outside 'running', so it stays small.
CREATE INDEX tenure_jobs_lease_until ON tenure_jobs (lease_until);

-- Pruning of terminal rows by age.
CREATE INDEX tenure_jobs_finished ON tenure_jobs (finished_at)
    WHERE finished_at IS NOT NULL;

-- Technical journal: ids, tokens, codes and durations; never payloads or results.
CREATE TABLE tenure_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind        text        NOT NULL,
    job_id      bigint,
    token       bigint,
    attempt     integer,
    worker      text,
    tool        text,
    detail      jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX tenure_events_job ON tenure_events (job_id, id);
CREATE INDEX tenure_events_at ON tenure_events (at);

-- One notification per enqueueing statement wakes idle workers; the payload is empty
-- (workers claim whatever is due), so bulk inserts cost one NOTIFY, not one per row.
-- NOTIFY takes a global lock at commit, so an enqueue that inserted nothing (a
-- repeated idempotency key) must not send one: the trigger looks at the statement's
-- transition table first.
CREATE FUNCTION tenure_notify_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tenure_jobs', '');
    RETURN NULL;
END;
$$;

CREATE FUNCTION tenure_notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted) THEN
        PERFORM pg_notify('tenure_jobs', '');
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER tenure_jobs_notify AFTER INSERT ON tenure_jobs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION tenure_notify_inserted();

-- A job that goes back to the queue (retry, released lease, operator retry) wakes
-- workers too; PostgreSQL folds identical notifications within a transaction.
CREATE TRIGGER tenure_jobs_requeued AFTER UPDATE OF state ON tenure_jobs
    FOR EACH ROW WHEN (NEW.state = 'queued' AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION tenure_notify_queued();
