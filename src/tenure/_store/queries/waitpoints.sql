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
-- A durable sleep (ctx.sleep, kind 'sleep', answered_by 'nobody') takes the same road: a
-- retried call that was cancelled mid-sleep sleeps again, in full from now. A sleep that
-- ended stays ended across retries (retry_job keeps it), so it is never asked again.
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
      AND tenure_lease_end(j.lease_until, j.lease_ms,
                           (SELECT s.beat_at FROM tenure_sessions s WHERE s.owner = j.owner))
          > clock_timestamp()
    RETURNING j.id, j.tool, j.token, j.attempt, j.payload_hmac,
              (extract(epoch FROM clock_timestamp() - j.claimed_at) * 1000)::bigint AS ran_ms
), reopened AS (
    UPDATE tenure_waitpoints w
    SET state = 'open', token_hash = %(token_hash)s, token = s.token,
        on_timeout = %(on_timeout)s,
        deadline = clock_timestamp() + %(timeout_ms)s * interval '1 millisecond',
        request = %(request)s::jsonb, answer = NULL, created_at = clock_timestamp(),
        closed_at = NULL, answered_by = %(answered_by)s, answer_schema = %(answer_schema)s::jsonb,
        kind = %(kind)s
    FROM suspended s
    WHERE w.job_id = s.id AND w.name = %(name)s AND w.state IN ('timed_out', 'cancelled')
    RETURNING w.id
), opened AS (
    INSERT INTO tenure_waitpoints (job_id, name, token_hash, token, on_timeout, deadline,
                                   request, answered_by, answer_schema, kind)
    SELECT s.id, %(name)s, %(token_hash)s, s.token, %(on_timeout)s,
           clock_timestamp() + %(timeout_ms)s * interval '1 millisecond', %(request)s::jsonb,
           %(answered_by)s, %(answer_schema)s::jsonb, %(kind)s
    FROM suspended s
    WHERE NOT EXISTS (SELECT 1 FROM tenure_waitpoints w
                      WHERE w.job_id = s.id AND w.name = %(name)s
                        AND w.state IN ('timed_out', 'cancelled'))
    RETURNING id
), journal AS (
    -- detail: the waitpoint's name, kind and deadline (and whether it opened again), never
    -- what it asks.
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT 'suspended', s.id, s.token, s.attempt, %(owner)s, s.tool,
           jsonb_build_object('waitpoint', %(name)s::text, 'timeout_ms', %(timeout_ms)s::bigint,
                              'on_timeout', %(on_timeout)s::text, 'kind', %(kind)s::text)
           || CASE WHEN EXISTS (SELECT 1 FROM reopened) THEN '{"reopened": true}'::jsonb
                   ELSE '{}'::jsonb END,
           NULL, s.ran_ms, s.payload_hmac
    FROM suspended s
), notified AS (
    SELECT tenure_notify('tenure_progress', array_agg(s.id::text)) AS n FROM suspended s
)
SELECT s.id, (SELECT count(*) FROM opened) + (SELECT count(*) FROM reopened) AS opened
FROM notified, suspended s

-- name: suspend_for_children
-- The fenced commit of a call that waits for its child jobs (ctx.wait_for): the children are
-- locked FOR SHARE first, so a child committing its end right now is waited for and then seen
-- ended (its own statement's trigger found no wait to leave yet), and a child ending after
-- this statement finds the wait (tenure_child_ended). With a child still going, the job waits
-- (no lease, no slot) at a children waitpoint listing those children; with none left, the
-- same waitpoint is answered at once and the job queued again (attempt refunded), so the call
-- is run again and finds its children ended. A missing child (pruned) counts as ended. Under
-- the same owner + token + live-lease predicate as any commit: zero rows, nothing written.
-- Nobody answers the wait from outside (answered_by 'nobody'; complete_waitpoint answers only
-- kind 'answer'). A round that closed without its children (timed out, or cancelled with its
-- job) and is asked again by a retry opens again, as suspend_job reopens a waitpoint: same
-- name and token, a fresh deadline, the children still going.
WITH kids AS (
    SELECT c.id, c.state FROM tenure_jobs c
    WHERE c.id = ANY(%(children)s::bigint[])
    ORDER BY c.id
    FOR SHARE
), pending AS (
    SELECT coalesce(array_agg(k.id ORDER BY k.id)
                        FILTER (WHERE k.state NOT IN ('succeeded', 'failed', 'cancelled')),
                    '{}'::bigint[]) AS ids
    FROM kids k
), suspended AS (
    UPDATE tenure_jobs j
    SET state = CASE WHEN cardinality(p.ids) > 0 THEN 'waiting' ELSE 'queued' END,
        attempt = j.attempt - CASE WHEN cardinality(p.ids) > 0 THEN 0 ELSE 1 END,
        lease_until = NULL,
        run_after = clock_timestamp(),
        updated_at = clock_timestamp(),
        waitpoints = CASE WHEN cardinality(p.ids) > 0 THEN j.waitpoints
                          ELSE coalesce(j.waitpoints, '{}'::jsonb)
                               || jsonb_build_object(%(name)s::text, jsonb_build_object(
                                      'answer', NULL, 'timed_out', false,
                                      'at', clock_timestamp())) END,
        progress = coalesce(%(progress)s::jsonb || jsonb_build_object('at', clock_timestamp()),
                            j.progress)
    FROM pending p
    WHERE j.id = %(id)s
      AND j.token = %(token)s
      AND j.owner = %(owner)s
      AND j.state = 'running'
      AND tenure_lease_end(j.lease_until, j.lease_ms,
                           (SELECT s.beat_at FROM tenure_sessions s WHERE s.owner = j.owner))
          > clock_timestamp()
    RETURNING j.id, j.tool, j.token, j.attempt, j.state, j.payload_hmac,
              (extract(epoch FROM clock_timestamp() - j.claimed_at) * 1000)::bigint AS ran_ms
), reopened AS (
    UPDATE tenure_waitpoints w
    SET state = CASE WHEN s.state = 'waiting' THEN 'open' ELSE 'answered' END,
        token_hash = %(token_hash)s, token = s.token, on_timeout = %(on_timeout)s,
        deadline = clock_timestamp() + %(timeout_ms)s * interval '1 millisecond',
        request = NULL, answer = NULL, created_at = clock_timestamp(),
        closed_at = CASE WHEN s.state = 'waiting' THEN NULL ELSE clock_timestamp() END,
        answered_by = 'nobody', answer_schema = NULL, kind = 'children', waiting_on = p.ids
    FROM suspended s, pending p
    WHERE w.job_id = s.id AND w.name = %(name)s AND w.state IN ('timed_out', 'cancelled')
    RETURNING w.id
), opened AS (
    INSERT INTO tenure_waitpoints (job_id, name, token_hash, token, on_timeout, deadline,
                                   answered_by, kind, waiting_on, state, closed_at)
    SELECT s.id, %(name)s, %(token_hash)s, s.token, %(on_timeout)s,
           clock_timestamp() + %(timeout_ms)s * interval '1 millisecond', 'nobody', 'children',
           p.ids,
           CASE WHEN s.state = 'waiting' THEN 'open' ELSE 'answered' END,
           CASE WHEN s.state = 'waiting' THEN NULL ELSE clock_timestamp() END
    FROM suspended s, pending p
    WHERE NOT EXISTS (SELECT 1 FROM tenure_waitpoints w
                      WHERE w.job_id = s.id AND w.name = %(name)s
                        AND w.state IN ('timed_out', 'cancelled'))
    RETURNING id
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    -- detail pending 0: every child had ended, so the job was queued again at once.
    SELECT 'suspended', s.id, s.token, s.attempt, %(owner)s, s.tool,
           jsonb_build_object('waitpoint', %(name)s::text, 'timeout_ms', %(timeout_ms)s::bigint,
                              'on_timeout', %(on_timeout)s::text, 'kind', 'children',
                              'children', cardinality(%(children)s::bigint[]),
                              'pending', cardinality(p.ids))
           || CASE WHEN EXISTS (SELECT 1 FROM reopened) THEN '{"reopened": true}'::jsonb
                   ELSE '{}'::jsonb END,
           NULL, s.ran_ms, s.payload_hmac
    FROM suspended s, pending p
    UNION ALL
    -- and, with none pending, the wait answered at once, as a child's end would have answered
    -- it: the journal of a wait reads the same whichever came first, the children or the wait.
    SELECT 'waitpoint_answered', s.id, s.token, s.attempt, NULL, s.tool,
           jsonb_build_object('waitpoint', %(name)s::text, 'kind', 'children'), NULL, 0,
           s.payload_hmac
    FROM suspended s, pending p
    WHERE cardinality(p.ids) = 0
), notified AS (
    SELECT tenure_notify('tenure_progress', array_agg(s.id::text)) AS n FROM suspended s
)
SELECT s.id, s.state, (SELECT count(*) FROM opened) + (SELECT count(*) FROM reopened) AS opened
FROM notified, suspended s

-- name: resume_children_waits
-- The rescuer's backstop for children waits: an open one none of whose children is still
-- going (each child's end normally answers it in its own transaction; a child deleted by hand
-- never ends) is answered and its job queued again. A bounded batch, FOR UPDATE SKIP LOCKED.
-- One past its deadline is left to expire_waitpoints (no wait is answered after it).
WITH due AS (
    SELECT w.id, w.name, w.token, w.created_at FROM tenure_waitpoints w
    WHERE w.state = 'open'
      AND w.kind = 'children'
      AND w.deadline > clock_timestamp()
      AND NOT EXISTS (SELECT FROM tenure_jobs c
                      WHERE c.id = ANY(w.waiting_on)
                        AND c.state NOT IN ('succeeded', 'failed', 'cancelled'))
    ORDER BY w.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
SELECT d.id FROM due d WHERE tenure_resume_children_wait(d.id, d.name, d.token, d.created_at)

-- name: complete_waitpoint
-- Compare-and-set: the waitpoint must be open, its deadline not yet passed on the database's
-- clock, and its job still waiting under the token it suspended with. The answer lands on the
-- job (waitpoints.<name>) and the job is queued again, keeping its place in line; the requeue
-- trigger wakes the workers. A second answer, or one at or past the deadline (whether or not
-- the rescuer has swept it yet), matches zero rows and writes nothing. Found by its token
-- (token_hash; job_id NULL), or, for the job's caller, by job, name and tenant (token_hash
-- NULL): only a waitpoint declared answered_by 'caller' is found that way, so a caller can
-- never answer a person's. Only a waitpoint of kind 'answer' is ever answered here: a durable
-- sleep or a wait for child jobs (answered_by 'nobody') has a token derived like any other,
-- but no token and no caller can end it; only its deadline or its children do.
WITH answered AS (
    UPDATE tenure_waitpoints w
    SET state = 'answered', answer = %(answer)s::jsonb, closed_at = clock_timestamp()
    FROM tenure_jobs j
    WHERE (w.token_hash = %(token_hash)s
           OR (w.job_id = %(job_id)s AND w.name = %(name)s AND w.answered_by = 'caller'
               AND j.tenant = %(tenant)s))
      AND w.state = 'open'
      AND w.kind = 'answer'
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
-- who may answer it, the type of its answer, and what it waits for (its kind).
SELECT name, state, on_timeout, deadline, request, created_at, closed_at, answered_by,
       answer_schema, kind,
       extract(epoch FROM deadline - clock_timestamp())::float8 AS seconds_left
FROM tenure_waitpoints
WHERE job_id = %(job_id)s
ORDER BY id
