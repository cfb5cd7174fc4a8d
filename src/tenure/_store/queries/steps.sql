-- Fenced steps (migration 0021): what a job already did, by name, replayed by its next attempt.

-- name: job_steps
-- A job's recorded steps, read once per attempt by the first `ctx.step` that needs them.
SELECT name, result FROM tenure_steps WHERE job_id = %(job_id)s

-- name: record_step
-- One step's checkpoint, fenced like a commit: the job's row is locked FOR SHARE under the
-- same owner + token + running + live-lease predicate as finish_many, so no claim can take the
-- job over between the check and the insert, and a stale owner matches zero rows (`owned` 0):
-- nothing is recorded. A step already recorded (by an attempt that died before this one read
-- the steps) keeps its first result (`recorded` 0), which is returned. The journal gets the
-- step's name and kind, never its result.
WITH owned AS (
    SELECT j.id, j.token, j.attempt, j.tool, j.payload_hmac
    FROM tenure_jobs j
    WHERE j.id = %(id)s
      AND j.token = %(token)s
      AND j.owner = %(owner)s
      AND j.state = 'running'
      AND tenure_lease_end(j.lease_until, j.lease_ms,
                           (SELECT s.beat_at FROM tenure_sessions s WHERE s.owner = j.owner))
          > clock_timestamp()
    FOR SHARE
), recorded AS (
    INSERT INTO tenure_steps (job_id, name, kind, result, token, attempt, duration_ms, detail)
    SELECT o.id, %(name)s, %(kind)s, %(result)s::jsonb, o.token, o.attempt, %(duration_ms)s,
           %(detail)s::jsonb
    FROM owned o
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING job_id
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT 'step_recorded', o.id, o.token, o.attempt, %(owner)s, o.tool,
           jsonb_build_object('step', %(name)s::text, 'kind', %(kind)s::text), NULL,
           %(duration_ms)s, o.payload_hmac
    FROM owned o, recorded r
), notified AS (
    -- Whoever watches the run (App.watch_run) looks again.
    SELECT tenure_notify('tenure_progress', array_agg(r.job_id::text)) AS n FROM recorded r
)
SELECT (SELECT count(*) FROM owned) AS owned,
       (SELECT count(*) FROM recorded) AS recorded,
       (SELECT s.result FROM tenure_steps s WHERE s.job_id = %(id)s AND s.name = %(name)s)
           AS first
FROM notified

-- name: job_step_rows
-- A job's steps for whoever watches it (the run page, App.steps): what each was, when, how
-- long, under which token; never the result.
SELECT name, kind, token, attempt, duration_ms, detail, recorded_at
FROM tenure_steps
WHERE job_id = %(job_id)s
ORDER BY recorded_at, name
LIMIT %(limit)s

-- name: lock_owned_job
-- The first statement of a transaction that writes for a running job besides its commit (a
-- child started by ctx.enqueue with the step that records it): the job's row locked FOR SHARE
-- under the same owner + token + running + live-lease predicate as finish_many. Zero rows:
-- the lease is lost, and the transaction writes nothing.
SELECT j.id FROM tenure_jobs j
WHERE j.id = %(id)s
  AND j.token = %(token)s
  AND j.owner = %(owner)s
  AND j.state = 'running'
  AND tenure_lease_end(j.lease_until, j.lease_ms,
                           (SELECT s.beat_at FROM tenure_sessions s WHERE s.owner = j.owner))
          > clock_timestamp()
FOR SHARE

-- name: child_outcomes
-- The rows of a job's children as ctx.wait_for records them in its checkpoint (never the
-- payload); only jobs this parent started.
SELECT id, tool, state, idempotency_key, attempt, max_attempts, token, owner, lease_until,
       heartbeat_at, run_after, priority, created_at, updated_at, finished_at, error, tenant,
       result
FROM tenure_jobs
WHERE id = ANY(%(ids)s::bigint[]) AND parent_id = %(parent)s

-- name: job_children
-- The jobs a run started (ctx.enqueue), oldest first: what a watcher and the run page show
-- of them (never a payload or result).
SELECT id, tool, state, attempt, token, owner, created_at, finished_at,
       error ->> 'code' AS code
FROM tenure_jobs
WHERE parent_id = %(job_id)s
ORDER BY id
LIMIT %(limit)s
