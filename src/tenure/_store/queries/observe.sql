-- Statements of the journal writer, the pruner, metrics, the dashboard, `tenure events`,
-- `tenure jobs show` and `tenure doctor`. None of them reads payload, result or error
-- messages: columns are always named, never `*` on tenure_jobs.

-- name: record_events
-- Events a worker (or a receiver) saw and the journal writer sends in batches. `delay_ms` is
-- how long an event waited in the writer's buffer (the database may have been unreachable:
-- that is what ownership_unknown means), so `at` is back-dated on the database's clock.
-- The keyed payload hash is copied from the job, never computed from anything sent here.
INSERT INTO tenure_events (at, kind, job_id, token, attempt, worker, tool, code, duration_ms,
                           detail, payload_hmac)
SELECT clock_timestamp() - e.delay_ms * interval '1 millisecond',
       e.kind, e.job_id, e.token, e.attempt, e.worker, e.tool, e.code, e.duration_ms, e.detail,
       (SELECT j.payload_hmac FROM tenure_jobs j WHERE j.id = e.job_id)
FROM unnest(%(kinds)s::text[], %(job_ids)s::bigint[], %(tokens)s::bigint[],
            %(attempts)s::integer[], %(workers)s::text[], %(tools)s::text[], %(codes)s::text[],
            %(durations_ms)s::bigint[], %(details)s::jsonb[], %(delays_ms)s::bigint[])
    WITH ORDINALITY AS e(kind, job_id, token, attempt, worker, tool, code, duration_ms, detail,
                         delay_ms, n)
ORDER BY e.n

-- name: prune_events
-- One bounded batch of journal rows older than the retention period, oldest first through
-- tenure_events_at (`(SELECT clock_timestamp())` is evaluated once, so it can bound the scan).
-- SKIP LOCKED: two pruners (one per worker) split the work instead of queueing on each other.
WITH old AS (
    SELECT id FROM tenure_events
    WHERE at < (SELECT clock_timestamp()) - %(older_than_ms)s * interval '1 millisecond'
    ORDER BY at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), deleted AS (
    -- `= ANY(ARRAY(...))` deletes by primary key; a join to the CTE was planned as a
    -- sequential scan of the whole journal.
    DELETE FROM tenure_events e WHERE e.id = ANY(ARRAY(SELECT id FROM old)) RETURNING e.id
)
SELECT count(*) AS n FROM deleted

-- name: count_old_events
-- How many rows a prune would remove (capped), for the progress bar of `tenure prune`.
SELECT count(*) AS n FROM (
    SELECT 1 FROM tenure_events
    WHERE at < (SELECT clock_timestamp()) - %(older_than_ms)s * interval '1 millisecond'
    LIMIT %(cap)s
) AS old

-- name: find_events
-- `tenure events`: newest first (by the database's time, then id: a back-dated event takes its
-- place in time), every filter optional. `reclaims` adds the job_claimed rows
-- that took a job over from an expired lease (job_reclaimed is derived, not journaled twice).
SELECT id, at, kind, job_id, token, attempt, worker, tool, code, duration_ms, payload_hmac,
       detail
FROM tenure_events
WHERE ((%(kinds)s::text[] IS NULL AND NOT %(reclaims)s)
       OR kind = ANY(coalesce(%(kinds)s::text[], '{}'))
       OR (%(reclaims)s AND kind = 'job_claimed' AND detail ? 'previous_token'))
  AND (%(job_id)s::bigint IS NULL OR job_id = %(job_id)s::bigint)
  AND (%(tool)s::text IS NULL OR tool = %(tool)s::text)
  AND (%(worker)s::text IS NULL OR worker = %(worker)s::text)
  AND (%(since_ms)s::bigint IS NULL
       OR at >= (SELECT clock_timestamp()) - %(since_ms)s::bigint * interval '1 millisecond')
  AND (%(since_at)s::timestamptz IS NULL OR at >= %(since_at)s::timestamptz)
ORDER BY at DESC, id DESC
LIMIT %(limit)s

-- name: notable_events
-- The dashboard's ownership feed. The predicate repeats tenure_events_notable's (migration
-- 0006) so that the planner can prove the partial index applies.
SELECT id, at, kind, job_id, token, attempt, worker, tool, code, duration_ms, detail
FROM tenure_events
WHERE kind IN ('lease_expired', 'heartbeat_lost', 'result_rejected', 'result_discarded',
               'ownership_unknown', 'stale_fence_rejected', 'cancelled', 'retry_requested')
ORDER BY at DESC, id DESC
LIMIT %(limit)s

-- name: job_timeline
-- Oldest first, by the database's time, then id (a job has few rows: they are sorted).
SELECT id, at, kind, job_id, token, attempt, worker, tool, code, duration_ms, payload_hmac, detail
FROM tenure_events
WHERE job_id = %(job_id)s
ORDER BY at, id
LIMIT %(limit)s

-- name: job_detail
-- Everything about a job an operator may see; the error's code, never its message. Progress
-- is shown as the tool reported it (its message is the tool's own words, on this row only).
-- A session lease (0023) shows its end and its last beat as its owner's session has them.
SELECT j.id, j.tool, j.state, j.idempotency_key, j.attempt, j.max_attempts, j.token, j.owner,
       tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at) AS lease_until,
       CASE WHEN j.lease_ms IS NULL THEN j.heartbeat_at
                   ELSE greatest(j.heartbeat_at, s.beat_at) END AS heartbeat_at,
       j.claimed_at, j.run_after, j.priority, j.created_at, j.updated_at, j.finished_at,
       j.error ->> 'code' AS code, j.payload_hmac, j.tenant, j.progress,
       clock_timestamp() AS db_now
FROM tenure_jobs j LEFT JOIN tenure_sessions s ON s.owner = j.owner
WHERE j.id = %(id)s

-- name: running_leases
-- Held leases, closest to expiry first (an expired one still 'running' awaits its reclaim).
-- lease_until is NULL outside 'running', so the range scan of tenure_jobs_lease_until reads
-- held leases only, however many finished rows the table keeps.
-- Ordered by the end the claim gave a session lease (0023), which its beats have moved on.
SELECT j.id, j.tool, j.attempt, j.max_attempts, j.token, j.owner, j.claimed_at,
       CASE WHEN j.lease_ms IS NULL THEN j.heartbeat_at
                   ELSE greatest(j.heartbeat_at, s.beat_at) END AS heartbeat_at,
       tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at) AS lease_until,
       clock_timestamp() AS db_now
FROM tenure_jobs j LEFT JOIN tenure_sessions s ON s.owner = j.owner
WHERE j.lease_until > '-infinity' AND j.state = 'running'
ORDER BY j.lease_until
LIMIT %(limit)s

-- name: running_summary
-- Per tool: held leases, the least lease left and the oldest heartbeat (scrape-time gauges).
SELECT tool, count(*) AS running,
       extract(epoch FROM min(lease_until) - clock_timestamp())::float8 AS lease_remaining_min,
       extract(epoch FROM clock_timestamp() - min(heartbeat_at))::float8 AS heartbeat_age_max
FROM (
    SELECT j.tool, tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at) AS lease_until,
           CASE WHEN j.lease_ms IS NULL THEN j.heartbeat_at
                   ELSE greatest(j.heartbeat_at, s.beat_at) END AS heartbeat_at
    FROM tenure_jobs j LEFT JOIN tenure_sessions s ON s.owner = j.owner
    WHERE j.lease_until > '-infinity' AND j.state = 'running'
    LIMIT %(cap)s
) AS held
GROUP BY tool

-- name: queue_depth
-- Per tool: queued jobs and the age of the oldest one that is due. Bounded: at most `cap`
-- queued rows are read (through a partial index on queued rows), so the count
-- saturates at the cap, and says so, instead of scanning a million-row backlog every scrape.
SELECT tool, count(*) AS depth,
       extract(epoch FROM clock_timestamp()
                          - min(run_after) FILTER (WHERE run_after <= clock_timestamp())
              )::float8 AS oldest_age,
       sum(count(*)) OVER () >= %(cap)s AS capped
FROM (SELECT tool, run_after FROM tenure_jobs WHERE state = 'queued' LIMIT %(cap)s) AS queued
GROUP BY tool

-- name: open_waitpoints
-- The dashboard's waiting jobs: open waitpoints, the soonest deadline first. What each asks
-- is not read here (it is the tool's text; the job's page shows it).
SELECT w.job_id, w.name, w.on_timeout, w.created_at, j.tool, j.tenant,
       extract(epoch FROM w.deadline - clock_timestamp())::float8 AS seconds_left,
       extract(epoch FROM clock_timestamp() - w.created_at)::float8 AS waited
FROM tenure_waitpoints w
JOIN tenure_jobs j ON j.id = w.job_id
WHERE w.state = 'open'
ORDER BY w.deadline
LIMIT %(limit)s

-- name: waiting_summary
-- Per tool: jobs waiting at an open waitpoint, the age of the oldest such wait and the time
-- left before the soonest deadline, bounded like queue_depth (read through
-- tenure_waitpoints_deadline, at most `cap` waits: the soonest deadlines are never cut off).
SELECT j.tool, count(*) AS waiting,
       extract(epoch FROM clock_timestamp() - min(w.created_at))::float8 AS oldest_age,
       extract(epoch FROM min(w.deadline) - clock_timestamp())::float8 AS deadline_min
FROM (SELECT job_id, created_at, deadline FROM tenure_waitpoints WHERE state = 'open'
      ORDER BY deadline LIMIT %(cap)s) AS w
JOIN tenure_jobs j ON j.id = w.job_id
GROUP BY j.tool

-- name: throughput
-- Outcomes per tool per time bucket over a recent window, for the dashboard's charts. At most
-- `cap` journal rows are read (newest first through tenure_events_at).
SELECT tool,
       date_bin(%(bucket_ms)s * interval '1 millisecond', at, timestamptz '2000-01-01') AS bucket,
       count(*) FILTER (WHERE kind = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE kind = 'failed') AS failed,
       count(*) FILTER (WHERE kind = 'retried') AS retried,
       count(*) FILTER (WHERE kind IN ('lease_expired', 'result_rejected')) AS lost
FROM (
    SELECT tool, kind, at FROM tenure_events
    WHERE at >= (SELECT clock_timestamp()) - %(window_ms)s * interval '1 millisecond'
      AND kind IN ('succeeded', 'failed', 'retried', 'lease_expired', 'result_rejected')
    ORDER BY at DESC
    LIMIT %(cap)s
) AS recent
GROUP BY tool, bucket
ORDER BY bucket

-- name: journal_head
SELECT coalesce(max(id), 0) AS id, clock_timestamp() AS db_now FROM tenure_events

-- name: journal_counts_since
-- Journal rows after `after_id`, counted by kind and tool: metrics count the journal
-- incrementally (at most `cap` rows per scrape) instead of re-counting it.
SELECT kind, tool, count(*) AS n, max(id) AS last_id
FROM (
    SELECT id, kind, tool FROM tenure_events WHERE id > %(after_id)s ORDER BY id LIMIT %(cap)s
) AS fresh
GROUP BY kind, tool

-- name: pipelines_exist
SELECT to_regclass('tenure_runs') IS NOT NULL
       AND to_regclass('tenure_run_stages') IS NOT NULL AS present

-- name: pipeline_runs
-- Recent pipeline runs with their stages in order (names, rounds, states, jobs and verdicts;
-- never the run's input, context or result), and the structure of the run's graph for the
-- dashboard's drawing: start stages, and each stage's name, next and on (never its tool's
-- arguments). Runs only once pipelines_exist said so. The newest runs older than %(before)s
-- (the largest bigint for the newest of all; run_id + 1 with limit 1 for one run).
SELECT r.id AS run_id, r.pipeline, r.state, r.updated_at,
       coalesce(jsonb_agg(jsonb_build_object('stage', s.name, 'round', s.round,
                                             'state', s.state, 'job_id', s.job_id,
                                             'decision', s.decision) ORDER BY s.id)
                    FILTER (WHERE s.id IS NOT NULL), '[]'::jsonb) AS stages,
       r.graph -> 'start' AS start,
       (SELECT jsonb_agg(jsonb_build_object('name', g -> 'name', 'next', g -> 'next',
                                            'on', g -> 'on') ORDER BY n)
        FROM jsonb_array_elements(CASE jsonb_typeof(r.graph -> 'stages')
                                      WHEN 'array' THEN r.graph -> 'stages' END)
             WITH ORDINALITY AS e (g, n)) AS graph
FROM (SELECT id, pipeline, state, updated_at, graph
      FROM tenure_runs WHERE id < %(before)s ORDER BY id DESC LIMIT %(limit)s) r
LEFT JOIN tenure_run_stages s ON s.run_id = r.id AND s.kind = 'stage'
GROUP BY r.id, r.pipeline, r.state, r.updated_at, r.graph
ORDER BY r.id DESC

-- name: server_info
SELECT current_setting('server_version') AS version,
       current_setting('server_version_num')::integer AS version_num,
       current_database() AS database, clock_timestamp() AS db_now

-- name: migrations_table_exists
SELECT to_regclass('tenure_migrations') IS NOT NULL AS present

-- name: applied_migrations
SELECT version, name, applied_at FROM tenure_migrations ORDER BY version

-- name: table_indexes
-- Indexes of tenure's tables as the search path resolves them, with their row estimates.
SELECT t.relname AS table_name, i.relname AS index_name, t.reltuples::float8 AS table_rows
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
WHERE x.indrelid = ANY(ARRAY[to_regclass('tenure_jobs'), to_regclass('tenure_events')]::oid[])
ORDER BY t.relname, i.relname

-- name: queue_flow
-- The queue charts' journal side: per tool and minute (`bucket_ms`) since `since` (the
-- window's first bucket, from the server's clock), jobs that started running (claims), were
-- reclaimed (claims that took over an expired lease), succeeded or failed. Counted here, so
-- at most tools x buckets rows come back, whatever the traffic; the range is read through
-- tenure_events_at. Only the `tools` busiest tools come back; `tools` counts them all.
-- Buckets are aligned in UTC, whatever the session's TimeZone. The bucket is computed in a
-- subquery kept apart (OFFSET 0) so the planner does not take every distinct `at` for a
-- group: it hashes the few thousand groups instead of sorting the window's rows.
WITH per_bucket AS (
    SELECT tool, bucket,
           count(*) FILTER (WHERE kind = 'job_claimed') AS running,
           count(*) FILTER (WHERE kind = 'job_claimed' AND took_over) AS reclaimed,
           count(*) FILTER (WHERE kind = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE kind = 'failed') AS failed
    FROM (SELECT coalesce(tool, '-') AS tool, kind, detail ? 'previous_token' AS took_over,
                 date_bin(%(bucket_ms)s * interval '1 millisecond', at,
                          timestamptz '2000-01-01 00:00+00') AS bucket
          FROM tenure_events
          WHERE at >= %(since)s AND kind IN ('job_claimed', 'succeeded', 'failed')
          OFFSET 0) AS recent
    GROUP BY tool, bucket
), busiest AS (
    SELECT tool, count(*) OVER () AS tools FROM per_bucket
    GROUP BY tool ORDER BY sum(running + succeeded + failed) DESC, tool LIMIT %(tools)s
)
SELECT tool, bucket, running, reclaimed, succeeded, failed, tools
FROM per_bucket JOIN busiest USING (tool)
ORDER BY bucket

-- name: queue_arrivals
-- The queue charts' enqueue side: jobs created per tool and minute since `since` (enqueues
-- are not journaled), counted here like queue_flow (at most tools x buckets rows, the
-- `tools` busiest). Jobs not running are read through tenure_jobs_created (its predicate
-- repeated, so the planner can prove it applies), running ones through
-- tenure_jobs_lease_until (lease_until is NULL outside 'running'). Jobs already pruned are
-- not counted.
WITH per_bucket AS (
    SELECT tool, bucket, count(*) AS queued
    FROM (SELECT tool, date_bin(%(bucket_ms)s * interval '1 millisecond', created_at,
                                timestamptz '2000-01-01 00:00+00') AS bucket
          FROM (SELECT tool, created_at FROM tenure_jobs
                WHERE state <> 'running' AND created_at > '-infinity'
                  AND created_at >= %(since)s
                UNION ALL
                SELECT tool, created_at FROM tenure_jobs
                WHERE lease_until > '-infinity' AND state = 'running'
                  AND created_at >= %(since)s) AS jobs
          OFFSET 0) AS recent
    GROUP BY tool, bucket
), busiest AS (
    SELECT tool, count(*) OVER () AS tools FROM per_bucket
    GROUP BY tool ORDER BY sum(queued) DESC, tool LIMIT %(tools)s
)
SELECT tool, bucket, queued, tools
FROM per_bucket JOIN busiest USING (tool)
ORDER BY bucket

-- name: search_jobs
-- The dashboard's job explorer and App.search_jobs: newest first by (created_at, id), every
-- filter optional, the page after a keyset cursor (after_at, after_id), never OFFSET. The
-- store sends it unprepared, so each call is planned with its values: the `IS NULL OR`
-- guards of absent filters fold away and the remaining ones meet the index made for them.
-- Two branches, merged: jobs not running, through migration 0013's partial indexes (one per
-- filter, in page order), and running jobs, through tenure_jobs_lease_until (a set as small
-- as the workers' capacity, sorted here). Running rows are kept out of the explorer's
-- indexes so that a claim and every heartbeat (non-HOT updates of a running row) add no
-- entry to them; `created_at > '-infinity'` is their predicate, which no other statement
-- states (so none but this one is ever planned on them). A key goes to
-- tenure_jobs_tenant_key, an id to the primary key. No payload, result or error message.
(
    SELECT id, tool, state, tenant, idempotency_key, attempt, max_attempts, token, owner,
           created_at, updated_at, finished_at, error ->> 'code' AS code
    FROM tenure_jobs
    WHERE state <> 'running' AND created_at > '-infinity'
      AND %(state)s::text IS DISTINCT FROM 'running'
      AND (%(id)s::bigint IS NULL OR id = %(id)s::bigint)
      AND (%(key)s::text IS NULL OR idempotency_key = %(key)s::text)
      AND (%(state)s::text IS NULL OR state = %(state)s::text)
      AND (%(tool)s::text IS NULL OR tool = %(tool)s::text)
      AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
      AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR created_at < %(until)s::timestamptz)
      AND (%(after_at)s::timestamptz IS NULL
           OR (created_at, id) < (%(after_at)s::timestamptz, %(after_id)s::bigint))
    ORDER BY created_at DESC, id DESC
    LIMIT %(limit)s
)
UNION ALL
(
    SELECT id, tool, state, tenant, idempotency_key, attempt, max_attempts, token, owner,
           created_at, updated_at, finished_at, error ->> 'code' AS code
    FROM tenure_jobs
    WHERE state = 'running' AND lease_until > '-infinity'
      AND (%(state)s::text IS NULL OR %(state)s::text = 'running')
      AND (%(id)s::bigint IS NULL OR id = %(id)s::bigint)
      AND (%(key)s::text IS NULL OR idempotency_key = %(key)s::text)
      AND (%(tool)s::text IS NULL OR tool = %(tool)s::text)
      AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
      AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR created_at < %(until)s::timestamptz)
      AND (%(after_at)s::timestamptz IS NULL
           OR (created_at, id) < (%(after_at)s::timestamptz, %(after_id)s::bigint))
    ORDER BY created_at DESC, id DESC
    LIMIT %(limit)s
)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s
