-- tenure 0003: durable pipelines. A run is a set of stage executions, each a tenure job;
-- a stage's fenced commit, the run's change and the next stages' jobs commit together.

-- One run of a pipeline. The graph is copied into the run when it starts, so a run never
-- depends on code that was deployed after it began (and a worker that does not know the
-- pipeline by name can still move it on). `context` is the input merged with every stage's
-- result: what the next stages are called with.
CREATE TABLE tenure_runs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pipeline         text        NOT NULL CHECK (length(pipeline) BETWEEN 1 AND 200),
    state            text        NOT NULL DEFAULT 'running'
                     CHECK (state IN ('running', 'succeeded', 'failed', 'cancelled')),
    idempotency_key  text        NOT NULL UNIQUE CHECK (length(idempotency_key) BETWEEN 1 AND 500),
    input            jsonb       NOT NULL,
    input_hash       text        NOT NULL,
    graph            jsonb       NOT NULL,
    context          jsonb       NOT NULL,
    result           jsonb,
    error            jsonb,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at      timestamptz
);

-- The rescuer's look for running runs without a current stage.
CREATE INDEX tenure_runs_running ON tenure_runs (id) WHERE state = 'running';

-- One execution of a stage (kind 'stage'), or one outbox intent (kind 'outbox': a delivery
-- to an external system of record, written in the transition that decided it).
-- A stage is 'waiting' while a join still misses predecessors, 'open' while its job may
-- still decide it, then succeeded, failed or cancelled. An outbox row stays 'open' until
-- its delivery succeeded. Tool, key and payload are kept here (not only in the job) so a
-- job that vanished can be dispatched again exactly as it was. No foreign key to the job:
-- finished jobs may be pruned while the run's history stays.
CREATE TABLE tenure_run_stages (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id        bigint      NOT NULL REFERENCES tenure_runs (id) ON DELETE CASCADE,
    name          text        NOT NULL CHECK (length(name) BETWEEN 1 AND 300),
    round         integer     NOT NULL CHECK (round >= 1),
    kind          text        NOT NULL CHECK (kind IN ('stage', 'outbox')),
    state         text        NOT NULL
                  CHECK (state IN ('waiting', 'open', 'succeeded', 'failed', 'cancelled')),
    arrived       text[]      NOT NULL DEFAULT '{}',
    tool          text,
    job_key       text,
    payload       jsonb,
    payload_hash  text,
    max_attempts  integer,
    job_id        bigint,
    decision      text,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    decided_at    timestamptz,
    UNIQUE (run_id, name, round),
    CONSTRAINT open_has_job CHECK (state <> 'open' OR (tool IS NOT NULL AND job_key IS NOT NULL
                                                       AND payload IS NOT NULL))
);

-- The rescuer's look for open stages whose job ended outside a transition or vanished.
CREATE INDEX tenure_run_stages_open ON tenure_run_stages (run_id) WHERE state = 'open';

-- The stage job's idempotency key: stable per run, stage and round, so dispatching the same
-- stage again can never create a second job for it.
CREATE FUNCTION tenure_stage_key(p_run bigint, p_name text, p_round integer) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'run:' || p_run || ':' || p_name || ':' || p_round
$$;

-- What the dashboard shows of pipelines (see the pipeline_overview query): each run with
-- its current stage(s) and every stage execution, newest runs first.
CREATE INDEX tenure_runs_updated ON tenure_runs (updated_at);

CREATE VIEW tenure_pipeline_overview AS
SELECT r.id AS run_id,
       r.pipeline,
       r.state,
       (SELECT string_agg(s.name, ',' ORDER BY s.id) FROM tenure_run_stages s
        WHERE s.run_id = r.id AND s.kind = 'stage' AND s.state = 'open') AS current_stage,
       r.updated_at,
       coalesce((SELECT jsonb_agg(jsonb_build_object('stage', s.name, 'round', s.round,
                                                     'kind', s.kind, 'state', s.state,
                                                     'job_id', s.job_id) ORDER BY s.id)
                 FROM tenure_run_stages s WHERE s.run_id = r.id), '[]'::jsonb) AS stages
FROM tenure_runs r;
