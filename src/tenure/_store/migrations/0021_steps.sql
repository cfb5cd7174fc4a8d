-- tenure 0021: fenced steps inside a job (`ctx.step`). A tool that is called again from the
-- top (after a crash, a takeover or a suspension) replays what it already did from these
-- checkpoints instead of doing it again: one row per completed step, by name, written under
-- the job's fencing token with the same predicate as a commit (queries/steps.sql,
-- record_step), so a stale owner records nothing.
--
-- The result is the step's JSON value (capped by the worker, like a job's result): it is
-- the tool's own data and never enters the journal; `detail` is what the run page shows
-- (the kind of work, a model's usage, a tool's name, a child job), small and content-free.
-- Rows go with their job: the foreign key deletes them when the job pruner deletes it.
CREATE TABLE tenure_steps (
    job_id       bigint      NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    name         text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    kind         text        NOT NULL DEFAULT 'step'
                 CHECK (kind IN ('step', 'model', 'tool', 'start', 'wait')),
    result       jsonb       NOT NULL,
    token        bigint      NOT NULL,
    attempt      integer     NOT NULL CHECK (attempt >= 1),
    duration_ms  bigint      NOT NULL CHECK (duration_ms >= 0),
    detail       jsonb       NOT NULL DEFAULT '{}'::jsonb
                 CHECK (jsonb_typeof(detail) = 'object' AND octet_length(detail::text) <= 2048),
    recorded_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (job_id, name)
);
