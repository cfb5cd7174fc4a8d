-- Every statement tenure sends to its own database, by name.
-- Lease decisions compare against clock_timestamp(): the database's clock is the
-- only arbiter; a worker never sends its own time into a lease condition.
-- `(SELECT clock_timestamp())` is evaluated once per statement, which lets the
-- planner use it as an index bound (a bare volatile call cannot be one).
-- Arrays on the hot path are bound in binary (`%(name)b`): psycopg's text array dumper
-- scans every element for characters to quote, which cost a claiming and committing
-- worker about 5 µs per job.

-- name: enqueue
-- parent_id: the job that started this one with ctx.enqueue (NULL for everything else).
WITH inserted AS (
    INSERT INTO tenure_jobs (tool, idempotency_key, payload, payload_hash, max_attempts,
                             priority, run_after, payload_hmac, concurrency_key,
                             concurrency_limit, held, tenant, position, retain_ms,
                             trace_context, parent_id)
    VALUES (%(tool)s, %(key)s, %(payload)s, %(payload_hash)s, %(max_attempts)s, %(priority)s,
            clock_timestamp() + %(delay_ms)s * interval '1 millisecond', %(payload_hmac)s,
            %(concurrency_key)s, %(concurrency_limit)s, %(concurrency_key)s::text IS NOT NULL,
            %(tenant)s, tenure_place(%(tenant)s, 1, %(quota)s), %(retain_ms)s,
            %(trace_context)s, %(parent_id)s)
    ON CONFLICT (tenant, idempotency_key) DO NOTHING
    RETURNING *
)
SELECT true AS created, * FROM inserted

-- name: job_by_key
-- Keys are unique per tenant: another tenant's job under the same key is never seen.
SELECT false AS created, * FROM tenure_jobs
WHERE tenant = %(tenant)s AND idempotency_key = %(key)s

-- name: enqueue_many
-- One tenant per batch: its places are taken (and its quota checked) once, for the whole
-- batch, repeated keys included, and handed out in the batch's order.
WITH first AS MATERIALIZED (
    SELECT tenure_place(%(tenant)s, cardinality(%(keys)b::text[]), %(quota)s) AS position
)
INSERT INTO tenure_jobs (tool, idempotency_key, payload, payload_hash, max_attempts, priority,
                         payload_hmac, concurrency_key, concurrency_limit, held, tenant,
                         position, retain_ms, trace_context)
SELECT u.tool, u.idempotency_key, u.payload, u.payload_hash, u.max_attempts, u.priority,
       u.payload_hmac, u.concurrency_key, u.concurrency_limit, u.concurrency_key IS NOT NULL,
       %(tenant)s, first.position + u.n - 1, u.retain_ms, %(trace_context)s::jsonb
FROM first,
     unnest(%(tools)b::text[], %(keys)b::text[], %(payloads)b::jsonb[],
            %(payload_hashes)b::text[], %(max_attempts)b::integer[],
            %(priorities)b::smallint[], %(payload_hmacs)b::text[],
            %(concurrency_keys)b::text[], %(concurrency_limits)b::integer[],
            %(retains_ms)b::bigint[])
         WITH ORDINALITY
    AS u(tool, idempotency_key, payload, payload_hash, max_attempts, priority, payload_hmac,
         concurrency_key, concurrency_limit, retain_ms, n)
ON CONFLICT (tenant, idempotency_key) DO NOTHING
RETURNING id, idempotency_key

-- name: claim
WITH policy AS (
    SELECT * FROM unnest(%(tools)b::text[], %(lease_ms)b::integer[]) AS p(tool, lease_ms)
), clock AS (
    SELECT clock_timestamp() AS now
), expired AS (
    -- Leases of their own row that ran out (tenure_jobs_row_leases).
    SELECT j.id, j.tool, j.owner AS previous_owner, j.token AS previous_token,
           j.lease_until AS previous_end
    FROM tenure_jobs j
    WHERE j.lease_until < (SELECT now FROM clock)
      AND j.state = 'running'
      AND j.lease_ms IS NULL
      AND j.attempt < j.max_attempts
      AND NOT j.held
      AND j.tool = ANY(%(tools)b::text[])
    ORDER BY j.lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), stale AS MATERIALIZED (
    -- Sessions unheard of for their shortest lease (a handful at most): only their jobs are
    -- walked (tenure_jobs_session_leases, = ANY(ARRAY)), never the live sessions'.
    SELECT s.owner FROM tenure_sessions s
    WHERE s.beat_at + s.min_lease_ms * interval '1 millisecond' < (SELECT now FROM clock)
), orphaned AS (
    -- Session leases (0023) of a session too late for its shortest lease, whose own end has
    -- passed. FOR SHARE of the session: its owner's beat waits for this claim, then finds it
    -- stale and is refused, so no beat confirms a lease taken here (a beat already running
    -- holds the row, and the session is skipped).
    -- Driven from the stale sessions (a one-time gate: none, no scan at all), each one's jobs
    -- by tenure_jobs_session_leases (the lateral owner = s.owner), never a scan of the table.
    SELECT o.id, o.tool, o.previous_owner, o.previous_token, o.previous_end
    FROM (SELECT s.owner, s.beat_at FROM tenure_sessions s
          WHERE EXISTS (SELECT FROM stale)
            AND s.owner = ANY(ARRAY(SELECT owner FROM stale))
            AND s.beat_at + s.min_lease_ms * interval '1 millisecond' < (SELECT now FROM clock)
          FOR SHARE SKIP LOCKED) s
    CROSS JOIN LATERAL (
        SELECT j.id, j.tool, j.owner AS previous_owner, j.token AS previous_token,
               tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at) AS previous_end
        FROM tenure_jobs j
        WHERE j.owner = s.owner AND j.state = 'running' AND j.lease_ms IS NOT NULL
          AND tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at) < (SELECT now FROM clock)
          AND j.attempt < j.max_attempts
          AND NOT j.held
          AND j.tool = ANY(%(tools)b::text[])
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED) o
    LIMIT %(limit)s
), queued AS (
    -- Bounded by a constant at least the claim's limit, not by the limit itself: `picked`
    -- reads no more of it than the limit (a WITH query runs only as far as it is read, and
    -- SKIP LOCKED locks only the rows it returns), and the planner sizes a generic plan by
    -- what a claim takes, not by a tenth of the queue. Sized by a tenth of a long queue, a
    -- generic plan looked dearer than every custom one, so each claim was planned afresh
    -- (about a millisecond a call). 100 serves claims up to the default batch; the store
    -- sends larger ones as claim_large, this statement bounded by 1,000 (a bound of 1,000
    -- on a short queue is planned as a sort of all of it).
    SELECT j.id, j.tool, NULL::text AS previous_owner, NULL::bigint AS previous_token,
           NULL::timestamptz AS previous_end
    FROM tenure_jobs j
    WHERE j.state = 'queued'
      AND NOT j.held
      AND j.run_after <= (SELECT now FROM clock)
      AND j.tool = ANY(%(tools)b::text[])
    ORDER BY j.priority DESC, j.position, j.id
    LIMIT 100
    FOR UPDATE SKIP LOCKED
), picked AS (
    (SELECT * FROM expired) UNION ALL (SELECT * FROM orphaned) UNION ALL (SELECT * FROM queued)
    LIMIT %(limit)s
), shortest AS (
    -- The shortest lease this claim gives (NULL: it takes nothing).
    SELECT min(p.lease_ms) AS lease_ms FROM picked JOIN policy p ON p.tool = picked.tool
), opened AS (
    -- The claimer's session, made by its first claim that takes a job: its first beat is this
    -- statement's start, so it adds nothing to the leases the claim gives (they start later).
    -- Its shortest lease is the shortest it has given, never that of a tool it only offers
    -- to run: a short-lease tool it never claimed had made every process look stale
    -- between its beats, and every claim and rescuer round then walked every running job.
    INSERT INTO tenure_sessions (owner, beat_at, min_lease_ms)
    SELECT %(owner)s, (SELECT now FROM clock), x.lease_ms FROM shortest x
    WHERE x.lease_ms IS NOT NULL
    ON CONFLICT (owner) DO NOTHING
    RETURNING owner
), session AS (
    -- KEY SHARE keeps the rescuer from deleting the session until this claim has committed
    -- (it skips a locked session); a beat may go on meanwhile.
    SELECT s.owner FROM tenure_sessions s WHERE s.owner = %(owner)s FOR KEY SHARE
), shortened AS (
    -- A lease shorter than any the session gave before: the session is stale sooner from now
    -- on (it is never made longer, so it stays at most every lease the session has given).
    UPDATE tenure_sessions s SET min_lease_ms = x.lease_ms
    FROM shortest x
    WHERE s.owner = %(owner)s AND x.lease_ms < s.min_lease_ms
), claimed AS (
    UPDATE tenure_jobs j
    SET state = 'running',
        owner = %(owner)s,
        token = nextval('tenure_fence_token'),
        attempt = j.attempt + 1,
        lease_until = clock_timestamp() + p.lease_ms * interval '1 millisecond',
        -- The lease follows the claimer's session (a brand-new one too: its first beat is
        -- this statement's start); if the rescuer just deleted it, it is the row's own.
        lease_ms = CASE WHEN EXISTS (SELECT FROM session) OR EXISTS (SELECT FROM opened)
                        THEN p.lease_ms END,
        heartbeat_at = clock_timestamp(),
        claimed_at = clock_timestamp(),
        updated_at = clock_timestamp(),
        progress = NULL
    FROM picked, policy p
    WHERE j.id = picked.id AND p.tool = j.tool
    RETURNING j.id, j.tool, j.token, j.attempt, j.max_attempts, j.payload, j.payload_hash,
              j.idempotency_key, j.lease_until, picked.previous_owner, picked.previous_token,
              j.payload_hmac, j.run_after, j.waitpoints, j.trace_context, j.tenant,
              j.lease_ms IS NOT NULL AS session_lease, picked.previous_end
), journal AS (
    -- A reclaim journals the expired lease under its own token, attempt and owner, then the
    -- claim. duration_ms: how long the job had been claimable (since run_after, or since the
    -- previous lease ended: previous_end, read by the branch that found it expired). No
    -- sub-select per row: the planner charged one to every row, claims or reclaims, and that
    -- estimate alone kept every claim on a custom plan.
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT 'lease_expired', c.id, c.previous_token, c.attempt - 1, c.previous_owner, c.tool,
           jsonb_build_object('reclaimed_by', %(owner)s::text), 'lease_expired',
           (extract(epoch FROM clock_timestamp() - c.previous_end) * 1000)::bigint,
           c.payload_hmac
    FROM claimed c
    WHERE c.previous_token IS NOT NULL
    UNION ALL
    SELECT 'job_claimed', c.id, c.token, c.attempt, %(owner)s, c.tool,
           CASE WHEN c.previous_token IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('reclaimed_from', c.previous_owner,
                                        'previous_token', c.previous_token) END,
           NULL,
           (extract(epoch FROM clock_timestamp()
                               - coalesce(c.previous_end, c.run_after)) * 1000)::bigint,
           c.payload_hmac
    FROM claimed c
)
SELECT c.id, c.tool, c.token, c.attempt, c.max_attempts, c.payload, c.payload_hash,
       c.idempotency_key, c.lease_until, c.previous_owner, c.previous_token, c.payload_hmac,
       c.run_after, c.waitpoints, c.trace_context, c.tenant, c.session_lease,
       clock_timestamp() AS db_now
FROM claimed c ORDER BY c.token

-- name: next_expiry
-- Seconds until the earliest lease of another owner on one of these tools runs out, so an
-- idle worker wakes to reclaim it when it expires instead of at its next poll: a lease of
-- its own row (tenure_jobs_row_leases from the earliest), or a session going stale (its
-- jobs are frozen by the claim that finds it, and taken by the next). No row when nothing
-- else is running.
SELECT extract(epoch FROM e.at - clock_timestamp())::float8 AS seconds
FROM (SELECT least(
        (SELECT j.lease_until FROM tenure_jobs j
         WHERE j.lease_until IS NOT NULL
           AND j.state = 'running'
           AND j.lease_ms IS NULL
           AND j.owner <> %(owner)s
           AND j.tool = ANY(%(tools)s::text[])
         ORDER BY j.lease_until
         LIMIT 1),
        (SELECT min(s.beat_at + s.min_lease_ms * interval '1 millisecond')
         FROM tenure_sessions s
         WHERE s.owner <> %(owner)s
           AND EXISTS (SELECT FROM tenure_jobs j
                       WHERE j.owner = s.owner AND j.state = 'running'
                         AND j.lease_ms IS NOT NULL AND j.tool = ANY(%(tools)s::text[])))
      ) AS at) e
WHERE e.at IS NOT NULL

-- name: extend_leases
-- The heartbeat thread's one statement per tick. (id, token, lease_ms) lists every lease the
-- process holds whose executor is observable and that are due; `kept`, the ids of the others it
-- holds and can observe (due later). Leases that follow the process's session
-- (migration 0023) are all extended by one update of the session row; the same statement
-- freezes, first, every one of them whose end has passed (zero rows for it: lost), so a late
-- beat revives nothing. Leases of their own row (claimed before 0023, or frozen) are extended
-- row by row as before. A session lease in neither list (its executor became unobservable,
-- or the process forgot it) and claimed before the previous beat is frozen where it stands
-- (unless `freeze_unnamed` is false: a claim of the process is still on its way), and so is
-- a listed one whose lease already ended: from then on it is a lease of its own row, which
-- runs out unless its owner extends it again.
WITH held AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(lease_ms)s::integer[])
        AS h(id, token, lease_ms)
), previous AS (
    SELECT s.beat_at FROM tenure_sessions s WHERE s.owner = %(owner)s
), mine AS (
    -- This process's session leases (tenure_jobs_session_leases), as of the previous beat.
    SELECT j.id, j.token, j.lease_ms, j.claimed_at,
           tenure_lease_end(j.lease_until, j.lease_ms, (SELECT beat_at FROM previous)) AS ends
    FROM tenure_jobs j
    WHERE j.owner = %(owner)s AND j.state = 'running' AND j.lease_ms IS NOT NULL
), beat AS (
    UPDATE tenure_sessions s SET beat_at = clock_timestamp() WHERE s.owner = %(owner)s
    RETURNING s.beat_at
), named AS (
    -- Every lease the process named, due or kept (hash-joined below, never searched per row).
    SELECT h.id FROM held h
    UNION ALL
    SELECT k.id FROM unnest(%(kept)s::bigint[]) AS k(id)
), doomed AS MATERIALIZED (
    SELECT m.id, m.token, m.ends
    FROM mine m LEFT JOIN named n ON n.id = m.id
    WHERE m.ends <= clock_timestamp()
       -- Unless a claim of this process sent before its previous beat ended is still on its
       -- way (`freeze_unnamed` false): that claim's jobs are not held yet, not forgotten.
       OR (n.id IS NULL AND m.claimed_at < (SELECT beat_at FROM previous)
           AND %(freeze_unnamed)s::boolean)
), frozen AS (
    -- `= ANY(ARRAY(...))`: the few rows are looked up by primary key, whatever the planner
    -- thinks of the CTE's size (a hash join read the whole jobs table on every beat).
    UPDATE tenure_jobs j
    SET lease_ms = NULL, lease_until = d.ends
    FROM doomed d
    WHERE j.id = ANY(ARRAY(SELECT d2.id FROM doomed d2))
      AND j.id = d.id AND j.token = d.token AND j.state = 'running'
      AND coalesce(j.lease_ms, 0) > 0
    RETURNING j.id
), own_rows AS MATERIALIZED (
    -- The named leases that are not session leases: claimed before 0023, or frozen.
    SELECT h.* FROM held h LEFT JOIN mine m ON m.id = h.id WHERE m.id IS NULL
), extended AS (
    UPDATE tenure_jobs j
    SET lease_until = clock_timestamp() + h.lease_ms * interval '1 millisecond',
        heartbeat_at = clock_timestamp()
    FROM own_rows h
    WHERE j.id = ANY(ARRAY(SELECT o.id FROM own_rows o))
      AND j.id = h.id
      AND j.token = h.token
      AND j.owner = %(owner)s
      AND j.state = 'running'
      -- coalesce: unprovable for the partial lease indexes, so the rows are looked up by key.
      AND coalesce(j.lease_ms, 0) = 0
      AND j.lease_until > clock_timestamp()
    RETURNING j.id, j.lease_until
), seen AS (
    -- The beat is also the worker's keep-alive in the registry (migration 0011): one row by
    -- primary key, in the statement the heartbeat thread sends anyway. Runs whether or not
    -- anything reads it (a data-modifying CTE always does); zero rows if the worker never
    -- registered, which costs nothing.
    UPDATE tenure_workers SET last_seen_at = clock_timestamp() WHERE name = %(owner)s
)
SELECT h.id,
       coalesce(e.lease_until,
                CASE WHEN m.ends > clock_timestamp()
                     THEN (SELECT b.beat_at FROM beat b) + m.lease_ms * interval '1 millisecond'
                END) AS lease_until,
       clock_timestamp() AS db_now
FROM held h
LEFT JOIN extended e ON e.id = h.id
LEFT JOIN mine m ON m.id = h.id AND m.token = h.token

-- name: beat_session
-- The heartbeat's fast path (migration 0023): one update of the process's session row
-- confirms every lease that follows it, whatever their number, and reads no job row. It
-- is refused (beat_at NULL) when the session is missing or was last heard of too long
-- ago for its shortest lease (the lesser of what the session recorded and what the caller
-- holds): then some lease of it may have ended, and only extend_leases, which looks at
-- each, may decide which. `freeze` names (id, token) of session leases whose executor
-- became unobservable: each is frozen where the previous beat left it, as extend_leases
-- freezes a lease it is not told of, and is a lease of its own row from then on.
WITH previous AS (
    SELECT s.beat_at FROM tenure_sessions s WHERE s.owner = %(owner)s
), beat AS (
    UPDATE tenure_sessions s SET beat_at = clock_timestamp()
    WHERE s.owner = %(owner)s
      AND s.beat_at + least(s.min_lease_ms, %(shortest_ms)s) * interval '1 millisecond'
          > clock_timestamp()
    RETURNING s.beat_at
), frozen AS (
    UPDATE tenure_jobs j
    SET lease_ms = NULL,
        lease_until = tenure_lease_end(j.lease_until, j.lease_ms, (SELECT beat_at FROM previous))
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS f(id, token)
    WHERE j.id = ANY(%(ids)s::bigint[])
      AND j.id = f.id AND j.token = f.token AND j.owner = %(owner)s AND j.state = 'running'
      AND coalesce(j.lease_ms, 0) > 0
    RETURNING j.id
), seen AS (
    -- The registry's keep-alive, as in extend_leases.
    UPDATE tenure_workers SET last_seen_at = clock_timestamp() WHERE name = %(owner)s
)
SELECT (SELECT b.beat_at FROM beat b) AS beat_at, clock_timestamp() AS db_now,
       ARRAY(SELECT f.id FROM frozen f) AS frozen

-- name: finish_many
WITH outcome AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[], %(states)b::text[],
                         %(results)b::jsonb[], %(errors)b::jsonb[], %(delays_ms)b::integer[],
                         %(attempt_refunds)b::integer[], %(progress)b::text[])
        AS o(id, token, state, result, error, delay_ms, attempt_refund, progress)
), finished AS (
    -- A retry asked for after the last allowed attempt is a failure: the attempt count
    -- never passes max_attempts, whatever the caller sends. The row goes back to the
    -- queue only when `o.attempt_refund <> 0 OR j.attempt < j.max_attempts` (the row's
    -- own attempt, read by the UPDATE that changes it: only a claim changes it, and a
    -- claim changes the token too). Decided in the UPDATE rather than in a CTE joined to
    -- tenure_jobs, which looked every row up twice.
    UPDATE tenure_jobs j
    SET state = CASE WHEN o.state <> 'queued' THEN o.state
                     WHEN o.attempt_refund <> 0 OR j.attempt < j.max_attempts THEN 'queued'
                     ELSE 'failed' END,
        result = o.result,
        error = o.error,
        attempt = j.attempt - o.attempt_refund,
        lease_until = NULL,
        run_after = CASE WHEN o.state = 'queued'
                              AND (o.attempt_refund <> 0 OR j.attempt < j.max_attempts)
                         THEN clock_timestamp() + o.delay_ms * interval '1 millisecond'
                         ELSE j.run_after END,
        finished_at = CASE WHEN o.state = 'queued'
                                AND (o.attempt_refund <> 0 OR j.attempt < j.max_attempts)
                           THEN NULL ELSE clock_timestamp() END,
        prune_after = CASE WHEN o.state = 'queued'
                                AND (o.attempt_refund <> 0 OR j.attempt < j.max_attempts)
                           THEN NULL
                           ELSE clock_timestamp() + j.retain_ms * interval '1 millisecond' END,
        updated_at = clock_timestamp(),
        -- A session lease (0023) was last confirmed by its session's last beat: the row
        -- keeps it, for whoever asks later when the lease was last confirmed.
        heartbeat_at = CASE WHEN j.lease_ms IS NULL THEN j.heartbeat_at
                            ELSE greatest(j.heartbeat_at,
                                          (SELECT s.beat_at FROM tenure_sessions s
                                           WHERE s.owner = %(owner)s)) END,
        progress = coalesce(o.progress::jsonb || jsonb_build_object('at', clock_timestamp()),
                            j.progress)
    FROM outcome o
    WHERE j.id = o.id
      AND j.token = o.token
      AND j.owner = %(owner)s
      AND j.state = 'running'
      -- The session is the caller's own (j.owner = owner above): read once per statement,
      -- not once per row.
      AND tenure_lease_end(j.lease_until, j.lease_ms,
                           (SELECT s.beat_at FROM tenure_sessions s WHERE s.owner = %(owner)s))
          > clock_timestamp()
    RETURNING j.id, j.tool, j.token, j.attempt, j.state, o.error ->> 'code' AS code,
              o.attempt_refund, j.payload_hmac,
              (extract(epoch FROM clock_timestamp() - j.claimed_at) * 1000)::bigint AS ran_ms
), journal AS (
    -- duration_ms: how long the attempt ran, from its claim to this commit (database clock).
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT CASE WHEN f.state <> 'queued' THEN f.state
                WHEN f.attempt_refund > 0 THEN 'released'
                ELSE 'retried' END,
           f.id, f.token, f.attempt, %(owner)s, f.tool,
           CASE WHEN f.code IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('code', f.code) END,
           f.code, f.ran_ms, f.payload_hmac
    FROM finished f
), notified AS (
    -- Waiters hear of every job that ended, in this statement's transaction.
    SELECT tenure_notify('tenure_done', array_agg(f.id::text)) AS n
    FROM finished f WHERE f.state <> 'queued'
)
SELECT o.id, f.id IS NOT NULL AS accepted
FROM notified, outcome o LEFT JOIN finished f ON f.id = o.id

-- name: record_event
-- code comes from the detail (an error code, or the reason a lease was lost); the keyed payload
-- hash is copied from the job.
INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                           duration_ms, payload_hmac)
SELECT %(kind)s::text, %(job_id)s::bigint, %(token)s::bigint, %(attempt)s::integer,
       %(worker)s::text, %(tool)s::text, %(detail)s::jsonb,
       coalesce(%(detail)s::jsonb ->> 'code', %(detail)s::jsonb ->> 'reason'),
       %(duration_ms)s::bigint,
       (SELECT j.payload_hmac FROM tenure_jobs j WHERE j.id = %(job_id)s::bigint)

-- name: job_states
SELECT id, state, owner, token FROM tenure_jobs WHERE id = ANY(%(ids)s::bigint[])

-- name: report_progress
-- The heartbeat thread's batch of progress reports, fenced like an extension: a stale owner's
-- progress matches zero rows and is dropped. Watchers hear of the jobs that changed.
WITH reported AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(progress)s::jsonb[])
        AS p(id, token, progress)
), written AS (
    UPDATE tenure_jobs j
    SET progress = p.progress || jsonb_build_object('at', clock_timestamp())
    FROM reported p
    WHERE j.id = p.id
      AND j.token = p.token
      AND j.owner = %(owner)s
      AND j.state = 'running'
      AND tenure_lease_end(j.lease_until, j.lease_ms,
                           (SELECT s.beat_at FROM tenure_sessions s WHERE s.owner = %(owner)s))
          > clock_timestamp()
    RETURNING j.id
), notified AS (
    SELECT tenure_notify('tenure_progress', array_agg(w.id::text)) AS n FROM written w
)
SELECT w.id FROM notified, written w

-- name: get_job
SELECT * FROM tenure_jobs WHERE id = %(id)s

-- name: job_status
-- What a waiter looks at each time it is told to look again: never the payload or result.
SELECT id, state, attempt, progress, updated_at FROM tenure_jobs WHERE id = ANY(%(ids)s::bigint[])

-- name: jobs_by_keys
-- The existing jobs of one tenant under these keys, for a bulk enqueue's repeated keys.
SELECT id, idempotency_key, tool, payload_hash FROM tenure_jobs
WHERE tenant = %(tenant)s AND idempotency_key = ANY(%(keys)s::text[])

-- name: list_jobs
SELECT * FROM tenure_jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(tool)s::text IS NULL OR tool = %(tool)s::text)
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
ORDER BY id DESC
LIMIT %(limit)s

-- name: cancel_job
WITH target AS (
    -- Locked first: FOR UPDATE hands back the row as it stands once the lock is ours, so
    -- held_until includes an extension that committed while this statement waited for it.
    SELECT id, state AS was,
           tenure_lease_end(lease_until, lease_ms, (SELECT s.beat_at FROM tenure_sessions s
                                                    WHERE s.owner = tenure_jobs.owner))
               AS lease_until
    FROM tenure_jobs
    WHERE id = %(id)s AND state IN ('queued', 'running', 'waiting')
    FOR UPDATE
), cancelled AS (
    UPDATE tenure_jobs j
    SET state = 'cancelled', lease_until = NULL, finished_at = clock_timestamp(),
        prune_after = clock_timestamp() + j.retain_ms * interval '1 millisecond',
        updated_at = clock_timestamp(),
        error = jsonb_build_object('code', 'cancelled', 'message', 'cancelled by an operator')
    FROM target t
    WHERE j.id = t.id
    -- held_until: the lease a running call held when it was cancelled (NULL if nothing ran);
    -- its owner's conservative local deadline ends before it.
    RETURNING j.*, CASE WHEN t.was = 'running' THEN t.lease_until END AS held_until
), closed AS (
    -- A waiting job's open waitpoint closes with it: a late answer gets a conflict.
    UPDATE tenure_waitpoints w SET state = 'cancelled', closed_at = clock_timestamp()
    FROM cancelled c WHERE w.job_id = c.id AND w.state = 'open'
), journal AS (
    -- For a running job, duration_ms is how long its attempt had run.
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT 'cancelled', c.id, c.token, c.attempt, c.owner, c.tool, '{}'::jsonb, 'cancelled',
           CASE WHEN c.held_until IS NOT NULL
                THEN (extract(epoch FROM clock_timestamp() - c.claimed_at) * 1000)::bigint END,
           c.payload_hmac
    FROM cancelled c
), notified AS (
    -- The owner of a running call stops it at once; waiters hear that it ended.
    SELECT tenure_notify('tenure_cancel', array_agg(c.id || ':' || c.token)
                                          FILTER (WHERE c.owner IS NOT NULL))
           + tenure_notify('tenure_done', array_agg(c.id::text)) AS n
    FROM cancelled c
)
SELECT c.* FROM notified, cancelled c

-- name: cancelled_among
-- Which of the calls a worker holds (id, token) were cancelled: what it looks at each time its
-- LISTEN connection is back, since a cancel announced while it was away reached nobody.
SELECT j.id, j.token
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id, token)
JOIN tenure_jobs j ON j.id = h.id AND j.token = h.token
WHERE j.state = 'cancelled'

-- name: record_stop
-- The owner of a cancelled call says the call has stopped (its task ended, its thread
-- returned): journaled as call_stopped, and announced on tenure_done, for whoever cancelled it
-- and waits until it stopped. duration_ms: from the moment the owner learned of the cancel.
WITH journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT 'call_stopped', j.id, %(token)s, %(attempt)s, %(worker)s, j.tool, '{}'::jsonb,
           'cancelled', %(duration_ms)s, j.payload_hmac
    FROM tenure_jobs j WHERE j.id = %(id)s
    RETURNING job_id
)
SELECT tenure_notify('tenure_done', array_agg(job_id::text)) AS n FROM journal

-- name: stop_settled
-- Whether a cancelled call (id, token) is over: its owner said it stopped (call_stopped), or
-- refused its commit (result_rejected: the call had returned), or the lease it held at the
-- cancel has run out on this clock. left: seconds until then (negative once past).
SELECT EXISTS (SELECT 1 FROM tenure_events e
               WHERE e.job_id = %(id)s AND e.token = %(token)s
                 AND e.kind IN ('call_stopped', 'result_rejected')) AS stopped,
       extract(epoch FROM %(held_until)s::timestamptz - clock_timestamp())::float8 AS left

-- name: retry_job
-- The call runs again from the top with the answers it had; a waitpoint that found no answer
-- (timed out) is forgotten, so the call asks again and suspend_job opens it again (as it
-- does one that timed out failing, or was cancelled with its job). A durable sleep that
-- reached its deadline is no waitpoint that found no answer: its deadline was its end, so it
-- is kept, like the steps the call recorded, and the call does not sleep again.
WITH retried AS (
    UPDATE tenure_jobs j
    SET state = 'queued', run_after = clock_timestamp(), finished_at = NULL, prune_after = NULL,
        max_attempts = GREATEST(max_attempts, attempt + 1), updated_at = clock_timestamp(),
        waitpoints = (SELECT jsonb_object_agg(e.key, e.value) FROM jsonb_each(j.waitpoints) e
                      WHERE NOT coalesce((e.value ->> 'timed_out')::boolean, false)
                         OR EXISTS (SELECT 1 FROM tenure_waitpoints w
                                    WHERE w.job_id = j.id AND w.name = e.key
                                      AND w.kind = 'sleep'))
    WHERE j.id = %(id)s AND j.state IN ('failed', 'cancelled')
    RETURNING *
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, payload_hmac)
    SELECT 'retry_requested', r.id, r.token, r.attempt, NULL, r.tool, '{}'::jsonb, r.payload_hmac
    FROM retried r
)
SELECT * FROM retried

-- name: fail_exhausted_leases
-- Expired leases of their own row, then session leases (0023) of a stale session whose end
-- has passed (FOR SHARE of the session, as in the claim).
WITH clock AS (
    SELECT clock_timestamp() AS now
), row_leases AS (
    SELECT id FROM tenure_jobs
    WHERE lease_until < (SELECT now FROM clock)
      AND state = 'running'
      AND lease_ms IS NULL
      AND attempt >= max_attempts
    ORDER BY lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), stale AS MATERIALIZED (
    -- Sessions unheard of for their shortest lease (a handful at most): their jobs are
    -- walked through tenure_jobs_session_leases, never the live sessions' (= ANY(ARRAY)).
    SELECT s.owner FROM tenure_sessions s
    WHERE s.beat_at + s.min_lease_ms * interval '1 millisecond' < (SELECT now FROM clock)
), session_leases AS (
    -- As the claim's orphaned leases: from the stale sessions, each one's jobs by index.
    SELECT o.id
    FROM (SELECT s.owner, s.beat_at FROM tenure_sessions s
          WHERE EXISTS (SELECT FROM stale)
            AND s.owner = ANY(ARRAY(SELECT owner FROM stale))
            AND s.beat_at + s.min_lease_ms * interval '1 millisecond' < (SELECT now FROM clock)
          FOR SHARE SKIP LOCKED) s
    CROSS JOIN LATERAL (
        SELECT j.id
        FROM tenure_jobs j
        WHERE j.owner = s.owner AND j.state = 'running' AND j.lease_ms IS NOT NULL
          AND tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at) < (SELECT now FROM clock)
          AND j.attempt >= j.max_attempts
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED) o
    LIMIT %(limit)s
), exhausted AS (
    SELECT id FROM row_leases UNION ALL SELECT id FROM session_leases
), failed AS (
    UPDATE tenure_jobs j
    SET state = 'failed', lease_until = NULL, finished_at = clock_timestamp(),
        prune_after = clock_timestamp() + j.retain_ms * interval '1 millisecond',
        updated_at = clock_timestamp(),
        error = jsonb_build_object('code', 'lease_expired',
                                   'message', 'the lease expired on the last allowed attempt')
    FROM exhausted e
    WHERE j.id = e.id
    RETURNING j.id, j.token, j.attempt, j.owner, j.tool, j.payload_hmac
), journal AS (
    -- The expired lease, then the verdict. duration_ms of lease_expired: how long past its
    -- end the lease was found (the sub-select sees the row as it was before this statement).
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT e.kind, f.id, f.token, f.attempt, f.owner, f.tool, e.detail, 'lease_expired',
           CASE WHEN e.n = 1 THEN (extract(epoch FROM clock_timestamp() - (
                    SELECT tenure_lease_end(o.lease_until, o.lease_ms, s.beat_at)
                    FROM tenure_jobs o LEFT JOIN tenure_sessions s ON s.owner = o.owner
                    WHERE o.id = f.id)) * 1000)::bigint
           END,
           f.payload_hmac
    FROM failed f
    CROSS JOIN LATERAL (VALUES (1, 'lease_expired', '{}'::jsonb),
                               (2, 'failed', '{"code": "lease_expired"}'::jsonb))
        AS e(n, kind, detail)
    ORDER BY f.id, e.n
), notified AS (
    SELECT tenure_notify('tenure_done', array_agg(f.id::text)) AS n FROM failed f
)
SELECT f.id FROM notified, failed f

-- name: reap_sessions
-- The rescuer's sweep of stale sessions after it failed their exhausted leases
-- (tenure_reap_sessions, migration 0023): what they still hold becomes leases of their own row.
SELECT tenure_reap_sessions() AS frozen

-- name: db_now
SELECT clock_timestamp() AS db_now

-- name: listen
LISTEN tenure_jobs

-- name: listen_cancel
LISTEN tenure_cancel

-- name: listen_done
LISTEN tenure_done

-- name: listen_progress
LISTEN tenure_progress

-- name: notify
-- A listener's probe: does a notification sent on another connection reach it?
SELECT pg_notify(%(channel)s, %(payload)s)

-- name: event_summary
-- owners: the distinct (job, token) pairs, each one owner's attempt, however many rows
-- it left (a stopped owner may journal heartbeat_lost twice: withheld, then ended).
SELECT kind, count(*) AS n,
       count(DISTINCT (job_id, token)) AS owners,
       count(*) FILTER (WHERE detail ? 'previous_token') AS reclaims
FROM tenure_events GROUP BY kind

-- name: state_summary
SELECT state, count(*) AS n, sum(attempt) AS attempts FROM tenure_jobs GROUP BY state

-- name: duplicate_commits
SELECT count(*) AS n FROM (
    SELECT job_id FROM tenure_events WHERE kind = 'succeeded'
    GROUP BY job_id HAVING count(*) > 1
) AS twice
