-- Waitpoints (migration 0008): a call suspends, an answer or its deadline resumes it.

-- name: waitpoint_secret
SELECT value FROM tenure_secrets WHERE name = 'waitpoint'

-- name: suspend_job
-- The fenced commit of a call that suspends: under the same owner + token + live lease
-- predicate as any commit, the job leaves the lease (state waiting: no heartbeat, no slot)
-- and its waitpoint opens, in one statement. Zero rows: the lease was lost; nothing opens.
-- The attempt stays counted while it waits; the answer refunds it (waiting is no failure).
-- A waitpoint of this name that closed without an answer on an earlier attempt (timed out,
-- or cancelled with its job), asked again by a retry, opens again: same name and token, a
-- fresh deadline. One that is open or answered cannot open twice: the insert then breaks
-- UNIQUE (job_id, name), the whole statement is refused, and the completer fails the job
-- (a constraint is never an uncertain commit).
-- Watchers (App.watch, on tenure_progress) are told: the state changed.
WITH suspended AS (
    UPDATE tenure_jobs j
    SET state = 'waiting',
        lease_until = NULL,
        updated_at = clock_timestamp(),
        progress = coalesce(%(progress)s::jsonb || jsonb_build_object('at', clock_timestamp()),
                            j.progress)
    WHERE j.id = %(id)s
      AND j.token = %(token)s
      AND j.owner = %(owner)s
      AND j.state = 'running'
      AND j.lease_until > clock_timestamp()
    RETURNING j.id, j.tool, j.token, j.attempt, j.payload_hmac,
              (extract(epoch FROM clock_timestamp() - j.claimed_at) * 1000)::bigint AS ran_ms
), reopened AS (
    UPDATE tenure_waitpoints w
    SET state = 'open', token_hash = %(token_hash)s, token = s.token,
        on_timeout = %(on_timeout)s,
        deadline = clock_timestamp() + %(timeout_ms)s * interval '1 millisecond',
        request = %(request)s::jsonb, answer = NULL, created_at = clock_timestamp(),
        closed_at = NULL, answered_by = %(answered_by)s, answer_schema = %(answer_schema)s::jsonb
    FROM suspended s
    WHERE w.job_id = s.id AND w.name = %(name)s AND w.state IN ('timed_out', 'cancelled')
    RETURNING w.id
), opened AS (
    INSERT INTO tenure_waitpoints (job_id, name, token_hash, token, on_timeout, deadline,
                                   request, answered_by, answer_schema)
    SELECT s.id, %(name)s, %(token_hash)s, s.token, %(on_timeout)s,
           clock_timestamp() + %(timeout_ms)s * interval '1 millisecond', %(request)s::jsonb,
           %(answered_by)s, %(answer_schema)s::jsonb
    FROM suspended s
    WHERE NOT EXISTS (SELECT 1 FROM tenure_waitpoints w
                      WHERE w.job_id = s.id AND w.name = %(name)s
                        AND w.state IN ('timed_out', 'cancelled'))
    RETURNING id
), journal AS (
    -- detail: the waitpoint's name and deadline (and whether it opened again), never what
    -- it asks.
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT 'suspended', s.id, s.token, s.attempt, %(owner)s, s.tool,
           jsonb_build_object('waitpoint', %(name)s::text, 'timeout_ms', %(timeout_ms)s::bigint,
                              'on_timeout', %(on_timeout)s::text)
           || CASE WHEN EXISTS (SELECT 1 FROM reopened) THEN '{"reopened": true}'::jsonb
                   ELSE '{}'::jsonb END,
           NULL, s.ran_ms, s.payload_hmac
    FROM suspended s
), notified AS (
    SELECT tenure_notify('tenure_progress', array_agg(s.id::text)) AS n FROM suspended s
)
SELECT s.id, (SELECT count(*) FROM opened) + (SELECT count(*) FROM reopened) AS opened
FROM notified, suspended s

-- name: complete_waitpoint
-- Compare-and-set: the waitpoint must be open, its deadline not yet passed on the database's
-- clock, and its job still waiting under the token it suspended with. The answer lands on the
-- job (waitpoints.<name>) and the job is queued again, keeping its place in line; the requeue
-- trigger wakes the workers. A second answer, or one at or past the deadline (whether or not
-- the rescuer has swept it yet), matches zero rows and writes nothing. Found by its token
-- (token_hash; job_id NULL), or, for the job's caller, by job, name and tenant (token_hash
-- NULL): only a waitpoint declared answered_by 'caller' is found that way, so a caller can
-- never answer a person's.
WITH answered AS (
    UPDATE tenure_waitpoints w
    SET state = 'answered', answer = %(answer)s::jsonb, closed_at = clock_timestamp()
    FROM tenure_jobs j
    WHERE (w.token_hash = %(token_hash)s
           OR (w.job_id = %(job_id)s AND w.name = %(name)s AND w.answered_by = 'caller'
               AND j.tenant = %(tenant)s))
      AND w.state = 'open'
      AND w.deadline > clock_timestamp()
      AND j.id = w.job_id
      AND j.state = 'waiting'
      AND j.token = w.token
    RETURNING w.job_id, w.name,
              (extract(epoch FROM clock_timestamp() - w.created_at) * 1000)::bigint AS waited_ms
), resumed AS (
    UPDATE tenure_jobs j
    SET state = 'queued',
        attempt = j.attempt - 1,  -- the attempt that suspended did not fail
        run_after = clock_timestamp(),
        updated_at = clock_timestamp(),
        waitpoints = coalesce(j.waitpoints, '{}'::jsonb)
            || jsonb_build_object(a.name, jsonb_build_object(
                   'answer', %(answer)s::jsonb, 'timed_out', false, 'at', clock_timestamp()))
    FROM answered a
    WHERE j.id = a.job_id
    RETURNING j.*, a.name AS waitpoint_name, a.waited_ms
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT 'waitpoint_answered', r.id, r.token, r.attempt, NULL, r.tool,
           jsonb_build_object('waitpoint', r.waitpoint_name), NULL, r.waited_ms, r.payload_hmac
    FROM resumed r
)
SELECT r.* FROM resumed r

-- name: expire_waitpoints
-- The rescuer's sweep: open waitpoints past their deadline, oldest first, in a bounded batch
-- taken FOR UPDATE SKIP LOCKED (replicas share the work). `resume` queues the job again with
-- the timeout as its outcome; `fail` ends it failed (code waitpoint_timeout) and tells waiters.
WITH due AS (
    SELECT w.id FROM tenure_waitpoints w
    WHERE w.state = 'open' AND w.deadline < (SELECT clock_timestamp())
    ORDER BY w.deadline
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), expired AS (
    UPDATE tenure_waitpoints w
    SET state = 'timed_out', closed_at = clock_timestamp()
    FROM due
    WHERE w.id = due.id
    RETURNING w.job_id, w.name, w.on_timeout, w.token,
              (extract(epoch FROM clock_timestamp() - w.created_at) * 1000)::bigint AS waited_ms
), moved AS (
    UPDATE tenure_jobs j
    SET state = CASE WHEN e.on_timeout = 'resume' THEN 'queued' ELSE 'failed' END,
        attempt = j.attempt - CASE WHEN e.on_timeout = 'resume' THEN 1 ELSE 0 END,
        run_after = clock_timestamp(),
        updated_at = clock_timestamp(),
        waitpoints = CASE WHEN e.on_timeout = 'resume'
                          THEN coalesce(j.waitpoints, '{}'::jsonb)
                               || jsonb_build_object(e.name, jsonb_build_object(
                                      'answer', NULL, 'timed_out', true,
                                      'at', clock_timestamp()))
                          ELSE j.waitpoints END,
        error = CASE WHEN e.on_timeout = 'fail'
                     THEN jsonb_build_object('code', 'waitpoint_timeout', 'message',
                                             'waitpoint ' || e.name || ' was not answered in time')
                     ELSE j.error END,
        finished_at = CASE WHEN e.on_timeout = 'fail' THEN clock_timestamp() END,
        prune_after = CASE WHEN e.on_timeout = 'fail'
                           THEN clock_timestamp() + j.retain_ms * interval '1 millisecond' END
    FROM expired e
    WHERE j.id = e.job_id AND j.state = 'waiting' AND j.token = e.token
    RETURNING j.id, j.tool, j.token, j.attempt, j.state, j.payload_hmac, e.name, e.waited_ms
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT 'waitpoint_timed_out', m.id, m.token, m.attempt, NULL, m.tool,
           jsonb_build_object('waitpoint', m.name, 'then', m.state), 'waitpoint_timeout',
           m.waited_ms, m.payload_hmac
    FROM moved m
), notified AS (
    SELECT tenure_notify('tenure_done', array_agg(m.id::text) FILTER (WHERE m.state = 'failed'))
           AS n
    FROM moved m
)
SELECT m.id FROM notified, moved m

-- name: job_waitpoints
-- A job's waitpoints for an operator: name, state, deadline, what it asked (the tool's words),
-- who may answer it and the type of its answer.
SELECT name, state, on_timeout, deadline, request, created_at, closed_at, answered_by,
       answer_schema, extract(epoch FROM deadline - clock_timestamp())::float8 AS seconds_left
FROM tenure_waitpoints
WHERE job_id = %(job_id)s
ORDER BY id
