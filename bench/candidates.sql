-- Prototypes of the storage candidates priced by bench/candidates.py (issue #26).
-- Each keeps the full protocol's conditions: a fencing token from tenure_fence_token,
-- owner, state 'running' and a live lease on the database clock in one statement, a
-- journal row per claim and per outcome (the history checker's token audit), per-tool
-- lease lengths from the worker's policy, and the idempotency window (a repeated key
-- returns the finished job). Candidate A is tenure's shipped statements (the store's
-- queries, not copied here). Schemas are made by the *_schema entries, run after
-- tenure's migrations on a fresh database.


-- == B: the lease in a narrow table of its own =================================================
-- tenure_jobs keeps state/owner/token (written at claim and end); the lease's clock lives in
-- tenure_leases, one narrow row per running job with only its primary key indexed, so an
-- extension is a HOT update. Expired leases are found by a scan of that narrow table.

-- name: b_schema
DROP INDEX tenure_jobs_lease_until;
ALTER TABLE tenure_jobs DROP CONSTRAINT running_has_lease,
    ADD CONSTRAINT running_has_owner CHECK (state <> 'running' OR owner IS NOT NULL);
CREATE TABLE tenure_leases (
    job_id       bigint      PRIMARY KEY,
    token        bigint      NOT NULL,
    owner        text        NOT NULL,
    lease_until  timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL
) WITH (fillfactor = 50);

-- name: b_claim
WITH policy AS (
    SELECT * FROM unnest(%(tools)b::text[], %(lease_ms)b::integer[]) AS p(tool, lease_ms)
), clock AS (
    SELECT clock_timestamp() AS now
), expired AS (
    SELECT j.id, j.owner AS previous_owner, j.token AS previous_token
    FROM tenure_leases l JOIN tenure_jobs j ON j.id = l.job_id
    WHERE l.lease_until < (SELECT now FROM clock)
      AND j.state = 'running' AND j.token = l.token
      AND j.attempt < j.max_attempts AND NOT j.held AND j.tool = ANY(%(tools)b::text[])
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), queued AS (
    SELECT j.id, NULL::text AS previous_owner, NULL::bigint AS previous_token
    FROM tenure_jobs j
    WHERE j.state = 'queued' AND NOT j.held AND j.run_after <= (SELECT now FROM clock)
      AND j.tool = ANY(%(tools)b::text[])
    ORDER BY j.priority DESC, j.position, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), picked AS (
    (SELECT * FROM expired) UNION ALL (SELECT * FROM queued) LIMIT %(limit)s
), claimed AS (
    UPDATE tenure_jobs j
    SET state = 'running', owner = %(owner)s, token = nextval('tenure_fence_token'),
        attempt = j.attempt + 1, claimed_at = clock_timestamp(), updated_at = clock_timestamp(),
        progress = NULL
    FROM picked, policy p
    WHERE j.id = picked.id AND p.tool = j.tool
    RETURNING j.id, j.tool, j.token, j.attempt, j.max_attempts, j.payload, j.payload_hash,
              j.idempotency_key, p.lease_ms, picked.previous_owner, picked.previous_token,
              j.payload_hmac, j.run_after, j.waitpoints, j.trace_context, j.tenant
), leased AS (
    INSERT INTO tenure_leases (job_id, token, owner, lease_until, heartbeat_at)
    SELECT c.id, c.token, %(owner)s, clock_timestamp() + c.lease_ms * interval '1 millisecond',
           clock_timestamp()
    FROM claimed c
    ON CONFLICT (job_id) DO UPDATE
    SET token = EXCLUDED.token, owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until,
        heartbeat_at = EXCLUDED.heartbeat_at
    RETURNING job_id, lease_until
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT 'job_claimed', c.id, c.token, c.attempt, %(owner)s, c.tool, '{}'::jsonb, NULL,
           (extract(epoch FROM clock_timestamp() - c.run_after) * 1000)::bigint, c.payload_hmac
    FROM claimed c
)
SELECT c.*, l.lease_until, clock_timestamp() AS db_now
FROM claimed c JOIN leased l ON l.job_id = c.id ORDER BY c.token

-- name: b_extend
WITH held AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(lease_ms)s::integer[])
        AS h(id, token, lease_ms)
), extended AS (
    UPDATE tenure_leases l
    SET lease_until = clock_timestamp() + h.lease_ms * interval '1 millisecond',
        heartbeat_at = clock_timestamp()
    FROM held h
    WHERE l.job_id = h.id AND l.token = h.token AND l.owner = %(owner)s
      AND l.lease_until > clock_timestamp()
    RETURNING l.job_id, l.lease_until
)
SELECT h.id, e.lease_until, clock_timestamp() AS db_now
FROM held h LEFT JOIN extended e ON e.job_id = h.id

-- name: b_finish
WITH outcome AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[], %(states)b::text[],
                         %(results)b::jsonb[], %(errors)b::jsonb[])
        AS o(id, token, state, result, error)
), finished AS (
    UPDATE tenure_jobs j
    SET state = o.state, result = o.result, error = o.error, finished_at = clock_timestamp(),
        prune_after = clock_timestamp() + j.retain_ms * interval '1 millisecond',
        updated_at = clock_timestamp()
    FROM outcome o, tenure_leases l
    WHERE j.id = o.id AND j.token = o.token AND j.owner = %(owner)s AND j.state = 'running'
      AND l.job_id = o.id AND l.token = o.token AND l.lease_until > clock_timestamp()
    RETURNING j.id, j.tool, j.token, j.attempt, j.state, j.payload_hmac,
              (extract(epoch FROM clock_timestamp() - j.claimed_at) * 1000)::bigint AS ran_ms
), released AS (
    DELETE FROM tenure_leases l USING finished f WHERE l.job_id = f.id
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT f.state, f.id, f.token, f.attempt, %(owner)s, f.tool, '{}'::jsonb, NULL, f.ran_ms,
           f.payload_hmac
    FROM finished f
), notified AS (
    SELECT tenure_notify('tenure_done', array_agg(f.id::text)) AS n FROM finished f
)
SELECT o.id, f.id IS NOT NULL AS accepted
FROM notified, outcome o LEFT JOIN finished f ON f.id = o.id


-- == C: liveness per worker process (sessions) =================================================
-- One row per worker process; its heartbeat is one conditional UPDATE of that row per period,
-- whatever the number of leases it holds. A job's lease ends at
--   coalesce(j.lease_until, greatest(s.beat_at, j.claimed_at) + j.lease_ms)
-- j.lease_ms is the job's tool's (capped) lease from the claim; j.lease_until is set only when
-- the worker released that one job (its executor became unobservable): the lease is frozen
-- where it stands and runs out. A beat is accepted only while the session's previous beat is
-- live for the shortest lease it serves (s.lease_ms), so a late beat never revives a lease.

-- name: c_schema
DROP INDEX tenure_jobs_lease_until;
ALTER TABLE tenure_jobs DROP CONSTRAINT running_has_lease,
    ADD CONSTRAINT running_has_owner CHECK (state <> 'running' OR owner IS NOT NULL);
ALTER TABLE tenure_jobs ADD COLUMN lease_ms integer;
CREATE INDEX tenure_jobs_owner_running ON tenure_jobs (owner) WHERE state = 'running';
CREATE INDEX tenure_jobs_frozen ON tenure_jobs (lease_until) WHERE lease_until IS NOT NULL;
CREATE TABLE tenure_sessions (
    name     text        PRIMARY KEY,
    beat_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    lease_ms integer     NOT NULL
) WITH (fillfactor = 50);

-- name: c_open
INSERT INTO tenure_sessions (name, lease_ms) VALUES (%(owner)s, %(lease_ms)s)

-- name: c_claim
WITH policy AS (
    SELECT * FROM unnest(%(tools)b::text[], %(lease_ms)b::integer[]) AS p(tool, lease_ms)
), clock AS (
    SELECT clock_timestamp() AS now
), me AS (
    -- Claims are made only under a live session.
    SELECT s.name FROM tenure_sessions s
    WHERE s.name = %(owner)s
      AND s.beat_at + s.lease_ms * interval '1 millisecond' > (SELECT now FROM clock)
), expired AS (
    SELECT j.id, j.owner AS previous_owner, j.token AS previous_token
    FROM tenure_sessions s JOIN tenure_jobs j ON j.owner = s.name AND j.state = 'running'
    WHERE s.beat_at + s.lease_ms * interval '1 millisecond' < (SELECT now FROM clock)
      AND coalesce(j.lease_until, greatest(s.beat_at, j.claimed_at)
                                  + j.lease_ms * interval '1 millisecond') < (SELECT now FROM clock)
      AND j.attempt < j.max_attempts AND NOT j.held AND j.tool = ANY(%(tools)b::text[])
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), frozen AS (
    SELECT j.id, j.owner AS previous_owner, j.token AS previous_token
    FROM tenure_jobs j
    WHERE j.lease_until < (SELECT now FROM clock) AND j.state = 'running'
      AND j.attempt < j.max_attempts AND NOT j.held AND j.tool = ANY(%(tools)b::text[])
    ORDER BY j.lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), queued AS (
    SELECT j.id, NULL::text AS previous_owner, NULL::bigint AS previous_token
    FROM tenure_jobs j
    WHERE j.state = 'queued' AND NOT j.held AND j.run_after <= (SELECT now FROM clock)
      AND j.tool = ANY(%(tools)b::text[])
    ORDER BY j.priority DESC, j.position, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), picked AS (
    (SELECT * FROM expired) UNION ALL (SELECT * FROM frozen) UNION ALL (SELECT * FROM queued)
    LIMIT %(limit)s
), claimed AS (
    UPDATE tenure_jobs j
    SET state = 'running', owner = me.name, token = nextval('tenure_fence_token'),
        attempt = j.attempt + 1, lease_ms = p.lease_ms, lease_until = NULL,
        claimed_at = clock_timestamp(), updated_at = clock_timestamp(), progress = NULL
    FROM picked, policy p, me
    WHERE j.id = picked.id AND p.tool = j.tool
    RETURNING j.id, j.tool, j.token, j.attempt, j.max_attempts, j.payload, j.payload_hash,
              j.idempotency_key, j.claimed_at + j.lease_ms * interval '1 millisecond'
              AS lease_until, picked.previous_owner, picked.previous_token,
              j.payload_hmac, j.run_after, j.waitpoints, j.trace_context, j.tenant
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT 'job_claimed', c.id, c.token, c.attempt, %(owner)s, c.tool, '{}'::jsonb, NULL,
           (extract(epoch FROM clock_timestamp() - c.run_after) * 1000)::bigint, c.payload_hmac
    FROM claimed c
)
SELECT c.*, clock_timestamp() AS db_now FROM claimed c ORDER BY c.token

-- name: c_beat
-- The whole heartbeat of a process: zero rows = every lease it holds is lost.
UPDATE tenure_sessions
SET beat_at = clock_timestamp()
WHERE name = %(owner)s
  AND beat_at + lease_ms * interval '1 millisecond' > clock_timestamp()
RETURNING beat_at, clock_timestamp() AS db_now

-- name: c_release
-- One job whose executor became unobservable: its lease stops following the session's
-- beats and runs out where it stands (fenced like an extension).
UPDATE tenure_jobs j
SET lease_until = greatest(s.beat_at, j.claimed_at) + j.lease_ms * interval '1 millisecond'
FROM tenure_sessions s
WHERE j.id = %(id)s AND j.token = %(token)s AND j.owner = %(owner)s AND j.state = 'running'
  AND s.name = j.owner AND j.lease_until IS NULL
  AND greatest(s.beat_at, j.claimed_at) + j.lease_ms * interval '1 millisecond'
      > clock_timestamp()
RETURNING j.id, j.lease_until

-- name: c_finish
WITH outcome AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[], %(states)b::text[],
                         %(results)b::jsonb[], %(errors)b::jsonb[])
        AS o(id, token, state, result, error)
), finished AS (
    UPDATE tenure_jobs j
    SET state = o.state, result = o.result, error = o.error, lease_until = NULL,
        finished_at = clock_timestamp(),
        prune_after = clock_timestamp() + j.retain_ms * interval '1 millisecond',
        updated_at = clock_timestamp()
    FROM outcome o, tenure_sessions s
    WHERE j.id = o.id AND j.token = o.token AND j.owner = %(owner)s AND j.state = 'running'
      AND s.name = %(owner)s
      AND coalesce(j.lease_until, greatest(s.beat_at, j.claimed_at)
                                  + j.lease_ms * interval '1 millisecond') > clock_timestamp()
    RETURNING j.id, j.tool, j.token, j.attempt, j.state, j.payload_hmac,
              (extract(epoch FROM clock_timestamp() - j.claimed_at) * 1000)::bigint AS ran_ms
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT f.state, f.id, f.token, f.attempt, %(owner)s, f.tool, '{}'::jsonb, NULL, f.ran_ms,
           f.payload_hmac
    FROM finished f
), notified AS (
    SELECT tenure_notify('tenure_done', array_agg(f.id::text)) AS n FROM finished f
)
SELECT o.id, f.id IS NOT NULL AS accepted
FROM notified, outcome o LEFT JOIN finished f ON f.id = o.id


-- == D: a small hot table of queued/running jobs, finished jobs apart =========================
-- tenure_keys holds every key for its window (enqueue inserts there first, so a key is unique
-- across both tables for as long as either keeps its job); tenure_queue holds queued and
-- running jobs with only the claim's indexes; the commit deletes the row and inserts it,
-- finished, into tenure_done, which carries the explorer's and the pruner's indexes. The
-- lease is today's (lease_until on the hot row, indexed).

-- name: d_schema
CREATE TABLE tenure_keys (
    tenant          text   NOT NULL,
    idempotency_key text   NOT NULL,
    id              bigint GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (tenant, idempotency_key)
);
CREATE TABLE tenure_queue (LIKE tenure_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE tenure_queue ADD PRIMARY KEY (id);
CREATE INDEX tenure_queue_queued ON tenure_queue (held, priority DESC, position, id, run_after)
    WHERE state = 'queued';
CREATE INDEX tenure_queue_tenant_queued ON tenure_queue (tenant, position)
    WHERE state = 'queued';
CREATE INDEX tenure_queue_lease_until ON tenure_queue (lease_until);
CREATE TRIGGER tenure_queue_notify AFTER INSERT ON tenure_queue
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION tenure_notify_inserted();
CREATE TABLE tenure_done (LIKE tenure_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE tenure_done ADD PRIMARY KEY (id);
CREATE INDEX tenure_done_created ON tenure_done (created_at, id);
CREATE INDEX tenure_done_state_created ON tenure_done (state, created_at, id);
CREATE INDEX tenure_done_tool_created ON tenure_done (tool, created_at, id);
CREATE INDEX tenure_done_tenant_created ON tenure_done (tenant, created_at, id)
    WHERE tenant <> '';
CREATE INDEX tenure_done_prune ON tenure_done (tool, prune_after);
CREATE INDEX tenure_done_parent ON tenure_done (parent_id) WHERE parent_id IS NOT NULL;

-- name: d_enqueue_many
WITH input AS MATERIALIZED (
    SELECT * FROM unnest(%(tools)b::text[], %(keys)b::text[], %(payloads)b::jsonb[],
                         %(payload_hashes)b::text[], %(max_attempts)b::integer[],
                         %(priorities)b::smallint[], %(retains_ms)b::bigint[])
        WITH ORDINALITY AS u(tool, idempotency_key, payload, payload_hash, max_attempts,
                             priority, retain_ms, n)
), keyed AS (
    INSERT INTO tenure_keys (tenant, idempotency_key)
    SELECT %(tenant)s, u.idempotency_key FROM input u
    ON CONFLICT DO NOTHING
    RETURNING id, idempotency_key
), first AS MATERIALIZED (
    SELECT cand_place(%(tenant)s, cardinality(%(keys)b::text[]), NULL) AS position
)
INSERT INTO tenure_queue (id, tool, idempotency_key, payload, payload_hash, max_attempts,
                          priority, held, tenant, position, retain_ms)
SELECT k.id, u.tool, u.idempotency_key, u.payload, u.payload_hash, u.max_attempts, u.priority,
       false, %(tenant)s, first.position + u.n - 1, u.retain_ms
FROM first, keyed k JOIN input u ON u.idempotency_key = k.idempotency_key
RETURNING id, idempotency_key

-- name: d_enqueue
-- One job (the agent loop's call); a repeated key returns the job from whichever table holds it.
WITH keyed AS (
    INSERT INTO tenure_keys (tenant, idempotency_key) VALUES (%(tenant)s, %(key)s)
    ON CONFLICT DO NOTHING
    RETURNING id
), inserted AS (
    INSERT INTO tenure_queue (id, tool, idempotency_key, payload, payload_hash, max_attempts,
                              priority, held, tenant, position, retain_ms)
    SELECT k.id, %(tool)s, %(key)s, %(payload)s, 'h', 3, 0, false, %(tenant)s,
           cand_place(%(tenant)s, 1, NULL), 604800000
    FROM keyed k
    RETURNING id, state
)
SELECT true AS created, id, state FROM inserted

-- name: d_job_by_key
SELECT false AS created, j.id, j.state
FROM tenure_keys k
JOIN LATERAL (SELECT q.id, q.state FROM tenure_queue q WHERE q.id = k.id
              UNION ALL
              SELECT d.id, d.state FROM tenure_done d WHERE d.id = k.id) j ON true
WHERE k.tenant = %(tenant)s AND k.idempotency_key = %(key)s

-- name: d_claim
WITH policy AS (
    SELECT * FROM unnest(%(tools)b::text[], %(lease_ms)b::integer[]) AS p(tool, lease_ms)
), clock AS (
    SELECT clock_timestamp() AS now
), expired AS (
    SELECT j.id, j.owner AS previous_owner, j.token AS previous_token
    FROM tenure_queue j
    WHERE j.lease_until < (SELECT now FROM clock) AND j.state = 'running'
      AND j.attempt < j.max_attempts AND NOT j.held AND j.tool = ANY(%(tools)b::text[])
    ORDER BY j.lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), queued AS (
    SELECT j.id, NULL::text AS previous_owner, NULL::bigint AS previous_token
    FROM tenure_queue j
    WHERE j.state = 'queued' AND NOT j.held AND j.run_after <= (SELECT now FROM clock)
      AND j.tool = ANY(%(tools)b::text[])
    ORDER BY j.priority DESC, j.position, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), picked AS (
    (SELECT * FROM expired) UNION ALL (SELECT * FROM queued) LIMIT %(limit)s
), claimed AS (
    UPDATE tenure_queue j
    SET state = 'running', owner = %(owner)s, token = nextval('tenure_fence_token'),
        attempt = j.attempt + 1,
        lease_until = clock_timestamp() + p.lease_ms * interval '1 millisecond',
        heartbeat_at = clock_timestamp(), claimed_at = clock_timestamp(),
        updated_at = clock_timestamp(), progress = NULL
    FROM picked, policy p
    WHERE j.id = picked.id AND p.tool = j.tool
    RETURNING j.id, j.tool, j.token, j.attempt, j.max_attempts, j.payload, j.payload_hash,
              j.idempotency_key, j.lease_until, picked.previous_owner, picked.previous_token,
              j.payload_hmac, j.run_after, j.waitpoints, j.trace_context, j.tenant
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT 'job_claimed', c.id, c.token, c.attempt, %(owner)s, c.tool, '{}'::jsonb, NULL,
           (extract(epoch FROM clock_timestamp() - c.run_after) * 1000)::bigint, c.payload_hmac
    FROM claimed c
)
SELECT c.*, clock_timestamp() AS db_now FROM claimed c ORDER BY c.token

-- name: d_extend
WITH held AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(lease_ms)s::integer[])
        AS h(id, token, lease_ms)
), extended AS (
    UPDATE tenure_queue j
    SET lease_until = clock_timestamp() + h.lease_ms * interval '1 millisecond',
        heartbeat_at = clock_timestamp()
    FROM held h
    WHERE j.id = h.id AND j.token = h.token AND j.owner = %(owner)s AND j.state = 'running'
      AND j.lease_until > clock_timestamp()
    RETURNING j.id, j.lease_until
)
SELECT h.id, e.lease_until, clock_timestamp() AS db_now
FROM held h LEFT JOIN extended e ON e.id = h.id

-- name: d_finish
WITH outcome AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[], %(states)b::text[],
                         %(results)b::jsonb[], %(errors)b::jsonb[])
        AS o(id, token, state, result, error)
), gone AS (
    DELETE FROM tenure_queue j
    USING outcome o
    WHERE j.id = o.id AND j.token = o.token AND j.owner = %(owner)s AND j.state = 'running'
      AND j.lease_until > clock_timestamp()
    RETURNING j.*, o.state AS outcome, o.result AS outcome_result, o.error AS outcome_error
), finished AS (
    INSERT INTO tenure_done (id, tool, state, owner, token, attempt, max_attempts, priority,
                             run_after, idempotency_key, payload, payload_hash, result, error,
                             created_at, updated_at, finished_at, payload_hmac, claimed_at,
                             tenant, position, retain_ms, prune_after, trace_context, parent_id)
    SELECT g.id, g.tool, g.outcome, g.owner, g.token, g.attempt, g.max_attempts, g.priority,
           g.run_after, g.idempotency_key, g.payload, g.payload_hash, g.outcome_result,
           g.outcome_error, g.created_at, clock_timestamp(), clock_timestamp(), g.payload_hmac,
           g.claimed_at, g.tenant, g.position, g.retain_ms,
           clock_timestamp() + g.retain_ms * interval '1 millisecond', g.trace_context,
           g.parent_id
    FROM gone g
    RETURNING id, tool, token, attempt, state, payload_hmac,
              (extract(epoch FROM clock_timestamp() - claimed_at) * 1000)::bigint AS ran_ms
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT f.state, f.id, f.token, f.attempt, %(owner)s, f.tool, '{}'::jsonb, NULL, f.ran_ms,
           f.payload_hmac
    FROM finished f
), notified AS (
    SELECT tenure_notify('tenure_done', array_agg(f.id::text)) AS n FROM finished f
)
SELECT o.id, f.id IS NOT NULL AS accepted
FROM notified, outcome o LEFT JOIN finished f ON f.id = o.id


-- == E: C + D (sessions over a hot table, finished jobs apart) ================================

-- name: e_schema
CREATE TABLE tenure_keys (
    tenant          text   NOT NULL,
    idempotency_key text   NOT NULL,
    id              bigint GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (tenant, idempotency_key)
);
CREATE TABLE tenure_queue (LIKE tenure_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE tenure_queue ADD PRIMARY KEY (id);
ALTER TABLE tenure_queue ADD COLUMN lease_ms integer;
ALTER TABLE tenure_queue DROP CONSTRAINT running_has_lease,
    ADD CONSTRAINT running_has_owner CHECK (state <> 'running' OR owner IS NOT NULL);
CREATE INDEX tenure_queue_queued ON tenure_queue (held, priority DESC, position, id, run_after)
    WHERE state = 'queued';
CREATE INDEX tenure_queue_tenant_queued ON tenure_queue (tenant, position)
    WHERE state = 'queued';
CREATE INDEX tenure_queue_owner_running ON tenure_queue (owner) WHERE state = 'running';
CREATE INDEX tenure_queue_frozen ON tenure_queue (lease_until) WHERE lease_until IS NOT NULL;
CREATE TRIGGER tenure_queue_notify AFTER INSERT ON tenure_queue
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION tenure_notify_inserted();
CREATE TABLE tenure_done (LIKE tenure_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE tenure_done ADD PRIMARY KEY (id);
CREATE INDEX tenure_done_created ON tenure_done (created_at, id);
CREATE INDEX tenure_done_state_created ON tenure_done (state, created_at, id);
CREATE INDEX tenure_done_tool_created ON tenure_done (tool, created_at, id);
CREATE INDEX tenure_done_tenant_created ON tenure_done (tenant, created_at, id)
    WHERE tenant <> '';
CREATE INDEX tenure_done_prune ON tenure_done (tool, prune_after);
CREATE INDEX tenure_done_parent ON tenure_done (parent_id) WHERE parent_id IS NOT NULL;
CREATE TABLE tenure_sessions (
    name     text        PRIMARY KEY,
    beat_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    lease_ms integer     NOT NULL
) WITH (fillfactor = 50);

-- name: e_claim
WITH policy AS (
    SELECT * FROM unnest(%(tools)b::text[], %(lease_ms)b::integer[]) AS p(tool, lease_ms)
), clock AS (
    SELECT clock_timestamp() AS now
), me AS (
    SELECT s.name FROM tenure_sessions s
    WHERE s.name = %(owner)s
      AND s.beat_at + s.lease_ms * interval '1 millisecond' > (SELECT now FROM clock)
), expired AS (
    SELECT j.id, j.owner AS previous_owner, j.token AS previous_token
    FROM tenure_sessions s JOIN tenure_queue j ON j.owner = s.name AND j.state = 'running'
    WHERE s.beat_at + s.lease_ms * interval '1 millisecond' < (SELECT now FROM clock)
      AND coalesce(j.lease_until, greatest(s.beat_at, j.claimed_at)
                                  + j.lease_ms * interval '1 millisecond') < (SELECT now FROM clock)
      AND j.attempt < j.max_attempts AND NOT j.held AND j.tool = ANY(%(tools)b::text[])
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), frozen AS (
    SELECT j.id, j.owner AS previous_owner, j.token AS previous_token
    FROM tenure_queue j
    WHERE j.lease_until < (SELECT now FROM clock) AND j.state = 'running'
      AND j.attempt < j.max_attempts AND NOT j.held AND j.tool = ANY(%(tools)b::text[])
    ORDER BY j.lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), queued AS (
    SELECT j.id, NULL::text AS previous_owner, NULL::bigint AS previous_token
    FROM tenure_queue j
    WHERE j.state = 'queued' AND NOT j.held AND j.run_after <= (SELECT now FROM clock)
      AND j.tool = ANY(%(tools)b::text[])
    ORDER BY j.priority DESC, j.position, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), picked AS (
    (SELECT * FROM expired) UNION ALL (SELECT * FROM frozen) UNION ALL (SELECT * FROM queued)
    LIMIT %(limit)s
), claimed AS (
    UPDATE tenure_queue j
    SET state = 'running', owner = me.name, token = nextval('tenure_fence_token'),
        attempt = j.attempt + 1, lease_ms = p.lease_ms, lease_until = NULL,
        claimed_at = clock_timestamp(), updated_at = clock_timestamp(), progress = NULL
    FROM picked, policy p, me
    WHERE j.id = picked.id AND p.tool = j.tool
    RETURNING j.id, j.tool, j.token, j.attempt, j.max_attempts, j.payload, j.payload_hash,
              j.idempotency_key, j.claimed_at + j.lease_ms * interval '1 millisecond'
              AS lease_until, picked.previous_owner, picked.previous_token,
              j.payload_hmac, j.run_after, j.waitpoints, j.trace_context, j.tenant
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT 'job_claimed', c.id, c.token, c.attempt, %(owner)s, c.tool, '{}'::jsonb, NULL,
           (extract(epoch FROM clock_timestamp() - c.run_after) * 1000)::bigint, c.payload_hmac
    FROM claimed c
)
SELECT c.*, clock_timestamp() AS db_now FROM claimed c ORDER BY c.token

-- name: e_finish
WITH outcome AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[], %(states)b::text[],
                         %(results)b::jsonb[], %(errors)b::jsonb[])
        AS o(id, token, state, result, error)
), gone AS (
    DELETE FROM tenure_queue j
    USING outcome o, tenure_sessions s
    WHERE j.id = o.id AND j.token = o.token AND j.owner = %(owner)s AND j.state = 'running'
      AND s.name = %(owner)s
      AND coalesce(j.lease_until, greatest(s.beat_at, j.claimed_at)
                                  + j.lease_ms * interval '1 millisecond') > clock_timestamp()
    RETURNING j.*, o.state AS outcome, o.result AS outcome_result, o.error AS outcome_error
), finished AS (
    INSERT INTO tenure_done (id, tool, state, owner, token, attempt, max_attempts, priority,
                             run_after, idempotency_key, payload, payload_hash, result, error,
                             created_at, updated_at, finished_at, payload_hmac, claimed_at,
                             tenant, position, retain_ms, prune_after, trace_context, parent_id)
    SELECT g.id, g.tool, g.outcome, g.owner, g.token, g.attempt, g.max_attempts, g.priority,
           g.run_after, g.idempotency_key, g.payload, g.payload_hash, g.outcome_result,
           g.outcome_error, g.created_at, clock_timestamp(), clock_timestamp(), g.payload_hmac,
           g.claimed_at, g.tenant, g.position, g.retain_ms,
           clock_timestamp() + g.retain_ms * interval '1 millisecond', g.trace_context,
           g.parent_id
    FROM gone g
    RETURNING id, tool, token, attempt, state, payload_hmac,
              (extract(epoch FROM clock_timestamp() - claimed_at) * 1000)::bigint AS ran_ms
), journal AS (
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    SELECT f.state, f.id, f.token, f.attempt, %(owner)s, f.tool, '{}'::jsonb, NULL, f.ran_ms,
           f.payload_hmac
    FROM finished f
), notified AS (
    SELECT tenure_notify('tenure_done', array_agg(f.id::text)) AS n FROM finished f
)
SELECT o.id, f.id IS NOT NULL AS accepted
FROM notified, outcome o LEFT JOIN finished f ON f.id = o.id


-- == F: E with claims that write no index (HOT) ==============================================
-- E's tables and statements, but nothing a claim changes is indexed and no index predicate
-- names `state`: the queue index is over every row of the hot table (queued and running: the
-- claim filters state on the row), the tenant index likewise, and no index on owner (a stale
-- session's jobs are found by a scan of the small hot table). A claim can then be a HOT
-- update (room kept on each page by fillfactor 45, enough for every claimed row to move in
-- place; at 70 only 39-49 % of claims were HOT): no B-tree insert but its journal row's.
-- Its claim is E's with the queued branch bounded by 100, as tenure's is, and f_expired for
-- E's expired branch (candidates.py, f_claim).

-- name: f_schema
-- Run after e_schema: E's tables with the claim's indexes replaced.
ALTER TABLE tenure_queue SET (fillfactor = 45);
DROP INDEX tenure_queue_queued, tenure_queue_tenant_queued, tenure_queue_owner_running;
CREATE INDEX tenure_queue_line ON tenure_queue (held, priority DESC, position, id, run_after);
CREATE INDEX tenure_queue_tenant_line ON tenure_queue (tenant, position);

-- name: f_expired
-- F's expired branch (a fragment of its claim): without an owner index, a stale session's jobs
-- come from a scan of the hot table, run only when some session is stale.
), stale AS MATERIALIZED (
    SELECT s.name, s.beat_at FROM tenure_sessions s
    WHERE s.beat_at + s.lease_ms * interval '1 millisecond' < (SELECT now FROM clock)
), expired AS (
    SELECT j.id, j.owner AS previous_owner, j.token AS previous_token
    FROM tenure_queue j JOIN stale s ON j.owner = s.name
    WHERE EXISTS (SELECT FROM stale) AND j.state = 'running'
      AND coalesce(j.lease_until, greatest(s.beat_at, j.claimed_at)
                                  + j.lease_ms * interval '1 millisecond') < (SELECT now FROM clock)
      AND j.attempt < j.max_attempts AND NOT j.held AND j.tool = ANY(%(tools)b::text[])
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), frozen AS (
