-- tenure 0008: waitpoints. A call (or a pipeline gate) that waits hours for a person or a
-- webhook ends its attempt in a `waiting` state: no lease, no heartbeat, no worker slot. The
-- answer (or the deadline) puts it back in the queue, and the tool is called again with it.

ALTER TABLE tenure_jobs DROP CONSTRAINT tenure_jobs_state_check;
ALTER TABLE tenure_jobs ADD CONSTRAINT tenure_jobs_state_check
    CHECK (state IN ('queued', 'running', 'waiting', 'succeeded', 'failed', 'cancelled'));

-- The waitpoints of this job that were answered or timed out, by name:
-- {"approval": {"answer": ..., "timed_out": false, "at": ...}}. The claim hands them to the
-- tool, which is how a resumed call learns what it waited for.
ALTER TABLE tenure_jobs ADD COLUMN waitpoints jsonb;

-- One row per waitpoint a job opened. The token that answers it is never stored, only its
-- SHA-256: it is a capability (a URL a person clicks, a callback a carrier calls), derived by
-- the worker from the job, the waitpoint's name and this database's secret, so a call retried
-- before it suspended hands out the same token again.
CREATE TABLE tenure_waitpoints (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      bigint      NOT NULL,
    name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    token_hash  text        NOT NULL UNIQUE CHECK (length(token_hash) = 64),
    token       bigint      NOT NULL,  -- the job's fencing token when it suspended
    state       text        NOT NULL DEFAULT 'open'
                CHECK (state IN ('open', 'answered', 'timed_out', 'cancelled')),
    on_timeout  text        NOT NULL CHECK (on_timeout IN ('resume', 'fail')),
    deadline    timestamptz NOT NULL,
    request     jsonb,                 -- what the tool asks (its own words; never journaled)
    answer      jsonb,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    closed_at   timestamptz,
    UNIQUE (job_id, name)
);

-- The rescuer finds expired waitpoints from here; answering goes by token_hash.
CREATE INDEX tenure_waitpoints_deadline ON tenure_waitpoints (deadline) WHERE state = 'open';

-- Secrets this database keeps for tenure: the key waitpoint tokens are derived with.
-- gen_random_uuid() draws from PostgreSQL's strong random source.
CREATE TABLE tenure_secrets (
    name  text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO tenure_secrets (name, value)
VALUES ('waitpoint', replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));
