-- Durable pipelines: runs, their stage executions, and the one statement that moves a run on.
-- Every writer of a run's stages holds the run's row lock (lock_run) first, so a transition
-- reads a current picture of its run and joins can never be decided on a stale one.

-- name: set_local_timeout
-- For this transaction only: no statement may run longer, and a client that stops talking
-- in the middle (paused, partitioned) is cut off, which releases the run locks it held.
SELECT set_config('statement_timeout', %(ms)s::text, true),
       set_config('idle_in_transaction_session_timeout', %(ms)s::text, true)

-- name: insert_run
INSERT INTO tenure_runs (pipeline, idempotency_key, input, input_hash, graph, context)
VALUES (%(pipeline)s, %(key)s, %(input)s, %(input_hash)s, %(graph)s, %(input)s)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id

-- name: lock_run
SELECT * FROM tenure_runs WHERE id = %(id)s FOR UPDATE

-- name: try_lock_run
-- The rescuer's lock: a run another transaction is moving on is left to it.
SELECT * FROM tenure_runs WHERE id = %(id)s FOR UPDATE SKIP LOCKED

-- name: get_run
SELECT * FROM tenure_runs WHERE id = %(id)s

-- name: run_by_key
SELECT * FROM tenure_runs WHERE idempotency_key = %(key)s

-- name: run_stages
SELECT s.*, j.id IS NOT NULL AS job_exists, j.state AS job_state, j.token AS job_token,
       j.result AS job_result, j.error AS job_error, j.finished_at AS job_finished_at,
       clock_timestamp() AS db_now
FROM tenure_run_stages s
LEFT JOIN tenure_jobs j ON j.id = s.job_id
WHERE s.run_id = %(run_id)s
ORDER BY s.id

-- name: jobs_by_ids
SELECT * FROM tenure_jobs WHERE id = ANY(%(ids)s::bigint[])

-- name: apply_transition
-- One transition of one run, all or nothing. `go` is the gate every write passes through:
--   commit: the stage's job is committed under owner + token + state + lease (the same
--           predicate as finish_many; owner is NULL for a verdict recorded through the API)
--           and only while that very job still holds the open stage (compare-and-set);
--   adopt:  the job already ended outside a transition (rescuer); it must still be in the
--           state the plan was made from;
--   none:   no job decides (a start, or a rescue that dispatches a stage again).
-- If `go` is empty, no CTE below writes anything.
WITH owned AS (
    SELECT s.id FROM tenure_run_stages s
    WHERE s.id = %(stage_id)s::bigint
      AND s.state = 'open'
      AND s.job_id = %(job_id)s::bigint
), committed AS (
    UPDATE tenure_jobs j
    SET state = %(job_state)s::text,
        result = %(result)s::jsonb,
        error = %(error)s::jsonb,
        lease_until = NULL,
        finished_at = clock_timestamp(),
        prune_after = clock_timestamp() + j.retain_ms * interval '1 millisecond',
        updated_at = clock_timestamp()
    WHERE %(mode)s::text = 'commit'
      AND j.id = %(job_id)s::bigint
      AND j.token = %(token)s::bigint
      AND (%(owner)s::text IS NULL OR j.owner = %(owner)s::text)
      -- A running job under a live lease; or, for a verdict recorded from outside (no owner),
      -- a gate's job waiting at its waitpoint under the same token: no lease to check there,
      -- but the waitpoint's deadline (the database's clock), as for any answer.
      AND ((j.state = 'running' AND tenure_lease_end(j.lease_until, j.lease_ms,
                           (SELECT s.beat_at FROM tenure_sessions s WHERE s.owner = j.owner))
          > clock_timestamp())
           OR (%(owner)s::text IS NULL AND j.state = 'waiting'
               AND NOT EXISTS (SELECT 1 FROM tenure_waitpoints w
                               WHERE w.job_id = j.id AND w.state = 'open'
                                 AND w.deadline <= clock_timestamp())))
      AND EXISTS (SELECT 1 FROM owned)
    RETURNING j.id, j.tool, j.token, j.attempt, j.owner, j.payload_hmac,
              (extract(epoch FROM clock_timestamp() - j.claimed_at) * 1000)::bigint AS ran_ms
), verdict_closes AS (
    -- The verdict is the answer the gate waited for: its open waitpoint closes with it.
    UPDATE tenure_waitpoints w SET state = 'answered', closed_at = clock_timestamp()
    FROM committed c WHERE w.job_id = c.id AND w.state = 'open'
), adopted AS (
    SELECT j.id FROM tenure_jobs j
    WHERE %(mode)s::text = 'adopt'
      AND j.id = %(job_id)s::bigint
      AND j.state = %(expect_state)s::text
      AND EXISTS (SELECT 1 FROM owned)
    FOR UPDATE
), go AS (
    SELECT 1 FROM committed
    UNION ALL SELECT 1 FROM adopted
    UNION ALL SELECT 1 WHERE %(mode)s::text = 'none'
), closed AS (
    UPDATE tenure_run_stages s
    SET state = %(stage_state)s::text, decision = %(decision)s::text,
        decided_at = clock_timestamp()
    WHERE s.id = %(stage_id)s::bigint
      AND %(stage_state)s::text IS NOT NULL
      AND EXISTS (SELECT 1 FROM go)
), moved AS (
    UPDATE tenure_runs r
    SET state = coalesce(%(run_state)s::text, r.state),
        context = coalesce(%(context)s::jsonb, r.context),
        result = coalesce(%(run_result)s::jsonb, r.result),
        error = coalesce(%(run_error)s::jsonb, r.error),
        finished_at = CASE WHEN %(run_state)s::text IS NULL THEN r.finished_at
                           ELSE clock_timestamp() END,
        updated_at = clock_timestamp()
    WHERE r.id = %(run_id)s::bigint
      AND (%(run_state)s::text IS NOT NULL OR %(context)s::jsonb IS NOT NULL)
      AND EXISTS (SELECT 1 FROM go)
), incoming AS (
    SELECT n.*, tenure_stage_key(%(run_id)s::bigint, n.name, n.round) AS job_key
    FROM unnest(%(names)s::text[], %(rounds)s::integer[], %(kinds)s::text[],
                %(states)s::text[], %(arrived)s::jsonb[], %(tools)s::text[],
                %(payloads)s::jsonb[], %(payload_hashes)s::text[], %(max_attempts)s::integer[],
                %(priorities)s::smallint[])
        AS n(name, round, kind, state, arrived, tool, payload, payload_hash, max_attempts,
             priority)
    WHERE EXISTS (SELECT 1 FROM go)
), dispatched AS (
    INSERT INTO tenure_jobs (tool, idempotency_key, payload, payload_hash, max_attempts,
                             priority)
    SELECT i.tool, i.job_key, i.payload, i.payload_hash, i.max_attempts, i.priority
    FROM incoming i WHERE i.state = 'open'
    ON CONFLICT (tenant, idempotency_key) DO NOTHING
    RETURNING id, tool, idempotency_key, payload_hmac
), placed AS (
    INSERT INTO tenure_run_stages AS s (run_id, name, round, kind, state, arrived, tool,
                                        job_key, payload, payload_hash, max_attempts, job_id)
    SELECT %(run_id)s::bigint, i.name, i.round, i.kind, i.state,
           ARRAY(SELECT jsonb_array_elements_text(i.arrived)),
           i.tool, CASE WHEN i.state = 'open' THEN i.job_key END, i.payload, i.payload_hash,
           i.max_attempts, coalesce(d.id, earlier.id)
    FROM incoming i
    LEFT JOIN dispatched d ON d.idempotency_key = i.job_key
    LEFT JOIN tenure_jobs earlier
        ON earlier.tenant = '' AND earlier.idempotency_key = i.job_key AND i.state = 'open'
    ON CONFLICT (run_id, name, round) DO UPDATE
    SET state = EXCLUDED.state, arrived = EXCLUDED.arrived, tool = EXCLUDED.tool,
        job_key = EXCLUDED.job_key, payload = EXCLUDED.payload,
        payload_hash = EXCLUDED.payload_hash, max_attempts = EXCLUDED.max_attempts,
        job_id = EXCLUDED.job_id
    WHERE s.state IN ('waiting', 'open')
), stopped AS (
    UPDATE tenure_run_stages s
    SET state = 'cancelled', decided_at = clock_timestamp()
    WHERE %(stop_open)s::boolean
      AND s.run_id = %(run_id)s::bigint
      AND s.kind = 'stage'
      AND s.state IN ('open', 'waiting')
      AND s.id IS DISTINCT FROM %(stage_id)s::bigint
      AND EXISTS (SELECT 1 FROM go)
    RETURNING s.job_id
), stopped_jobs AS (
    UPDATE tenure_jobs j
    SET state = 'cancelled', lease_until = NULL, finished_at = clock_timestamp(),
        prune_after = clock_timestamp() + j.retain_ms * interval '1 millisecond',
        updated_at = clock_timestamp(),
        error = jsonb_build_object('code', 'run_ended',
                                   'message', 'the run ended before this stage did')
    FROM stopped st
    WHERE j.id = st.job_id AND j.state IN ('queued', 'running', 'waiting')
    RETURNING j.id, j.token, j.attempt, j.owner, j.tool, j.payload_hmac
), stopped_waits AS (
    UPDATE tenure_waitpoints w SET state = 'cancelled', closed_at = clock_timestamp()
    FROM stopped_jobs x WHERE w.job_id = x.id AND w.state = 'open'
), journal AS (
    -- The same columns as the job statements' rows: code, duration_ms (how long the
    -- committed attempt ran) and the keyed payload hash copied from the job.
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT %(job_state)s::text, c.id, c.token, c.attempt, c.owner, c.tool,
           jsonb_strip_nulls(jsonb_build_object('run', %(run_id)s::bigint,
                                                'stage', %(stage_name)s::text,
                                                'decision', %(decision)s::text,
                                                'code', %(error)s::jsonb ->> 'code')),
           %(error)s::jsonb ->> 'code', c.ran_ms, c.payload_hmac
    FROM committed c
    UNION ALL
    SELECT 'dispatched', d.id, NULL, 0, NULL, d.tool,
           jsonb_strip_nulls(jsonb_build_object('run', %(run_id)s::bigint,
                                                'after_job', %(job_id)s::bigint)),
           NULL, NULL, d.payload_hmac
    FROM dispatched d
    UNION ALL
    SELECT 'cancelled', x.id, x.token, x.attempt, x.owner, x.tool,
           jsonb_build_object('code', 'run_ended', 'run', %(run_id)s::bigint),
           'run_ended', NULL, x.payload_hmac
    FROM stopped_jobs x
), notified AS (
    SELECT tenure_notify('tenure_done', array_agg(ended.id::text))
           + tenure_notify('tenure_cancel', array_agg(ended.id || ':' || ended.token)
                                            FILTER (WHERE ended.stopped)) AS n
    FROM (SELECT c.id, c.token, false AS stopped FROM committed c
          WHERE %(job_state)s::text <> 'queued'
          UNION ALL
          SELECT x.id, x.token, x.owner IS NOT NULL FROM stopped_jobs x) AS ended
)
SELECT EXISTS (SELECT 1 FROM owned) AS owned, EXISTS (SELECT 1 FROM go) AS applied
FROM notified

-- name: runs_to_rescue
-- Runs the rescuer must look at: an open stage whose job ended outside a transition or
-- vanished, an outbox delivery that failed at least `resend_after` ago, or a running run
-- without any open stage. This list only says where to look: the rescuer takes each run
-- with try_lock_run and decides from what it reads under that lock.
WITH due AS (
    SELECT s.run_id
    FROM tenure_run_stages s
    LEFT JOIN tenure_jobs j ON j.id = s.job_id
    WHERE s.state = 'open'
      AND (j.id IS NULL
           OR j.state IN ('succeeded', 'cancelled')
           OR (j.state = 'failed'
               AND (s.kind = 'stage'
                    OR j.finished_at <= clock_timestamp()
                                        - %(resend_after_ms)s * interval '1 millisecond')))
    UNION
    SELECT r.id
    FROM tenure_runs r
    WHERE r.state = 'running'
      AND NOT EXISTS (SELECT 1 FROM tenure_run_stages s
                      WHERE s.run_id = r.id AND s.kind = 'stage' AND s.state = 'open')
)
SELECT run_id AS id FROM due ORDER BY run_id LIMIT %(limit)s
