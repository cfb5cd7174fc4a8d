-- Concurrency limits, periodic schedules and the job pruner (migration 0004).

-- name: admit_held
-- Inside the claiming transaction, before `claim`: admit held (keyed) jobs up to their keys'
-- limits. The function holds each decided key's lock until the transaction ends; a claimer
-- that stops talking in the middle (paused, partitioned) is cut off after `idle_ms`, which
-- rolls its admissions back and frees the keys for the others.
SELECT a.id
FROM (SELECT set_config('idle_in_transaction_session_timeout', %(idle_ms)s::text, true)) AS t,
     tenure_admit(%(tools)s::text[], %(limit)s) AS a(id)

-- name: hold_again
-- Inside the same transaction, after `claim`: every admitted job is held again, claimed or not,
-- so no committed state shows a keyed job the ordinary claim could take.
UPDATE tenure_jobs SET held = true WHERE id = ANY(%(ids)s::bigint[])

-- name: schedule_marks
-- The scheduler's clock and the latest slot each schedule has decided. The clock is the
-- database's; `tenure.schedule_shift` (an interval, unset in production) lets a test move the
-- slot arithmetic only: no lease statement reads it.
SELECT c.now, s.name, s.last_slot
FROM (SELECT clock_timestamp()
             + coalesce(nullif(current_setting('tenure.schedule_shift', true), ''), '0')::interval
             AS now) AS c
LEFT JOIN tenure_schedules s ON s.name = ANY(%(names)s::text[])

-- name: advance_schedule
-- Decide a slot: advances the schedule's mark only if no one decided this slot (or a later
-- one) yet. Concurrent callers serialise on the row; exactly one sees a row come back.
INSERT INTO tenure_schedules AS s (name, last_slot) VALUES (%(name)s, %(slot)s)
ON CONFLICT (name) DO UPDATE SET last_slot = excluded.last_slot, updated_at = clock_timestamp()
WHERE s.last_slot < excluded.last_slot
RETURNING s.name

-- name: prune_jobs
-- One bounded batch of terminal jobs whose own retention has passed, of these tools (or of
-- every tool when %(tools)s is NULL: a pruner of scope "all"), and the concurrency slots they
-- held. Each tool's expired jobs come from tenure_jobs_prune in prune_after order, tool by
-- tool: the cutoff `(SELECT clock_timestamp())` is opaque to the planner, which then takes a
-- third of the table for expired, and a plain `LIMIT` over that estimate chose a sequential
-- scan of every running and retained job (1.4 s a round at 660,000 running jobs, in every
-- worker). Ordered by the index, the scan reads expired jobs only.
-- Only the ending statement sets prune_after, and only on a terminal job.
WITH RECURSIVE every_tool AS (
    -- Scope "all": the tools that have terminal jobs, one index probe per tool.
    (SELECT j.tool FROM tenure_jobs j
     WHERE %(tools)s::text[] IS NULL AND j.prune_after IS NOT NULL
     ORDER BY j.tool LIMIT 1)
    UNION ALL
    SELECT (SELECT j.tool FROM tenure_jobs j
            WHERE j.prune_after IS NOT NULL AND j.tool > t.tool
            ORDER BY j.tool LIMIT 1)
    FROM every_tool t
    WHERE t.tool IS NOT NULL
), tools AS (
    SELECT t.tool FROM unnest(%(tools)s::text[]) AS t(tool)
    UNION ALL
    SELECT t.tool FROM every_tool t WHERE t.tool IS NOT NULL
), doomed AS (
    SELECT d.id
    FROM tools t
    CROSS JOIN LATERAL (
        SELECT j.id FROM tenure_jobs j
        WHERE j.tool = t.tool
          AND j.prune_after < (SELECT clock_timestamp())
        ORDER BY j.prune_after
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED) d
    LIMIT %(limit)s
), deleted AS (
    -- An array, so the delete goes by primary key whatever the planner thinks of the batch.
    DELETE FROM tenure_jobs j WHERE j.id = ANY(ARRAY(SELECT d.id FROM doomed d))
    RETURNING j.id, j.concurrency_key
), slots AS (
    DELETE FROM tenure_concurrency_slots s USING deleted d
    WHERE s.concurrency_key = d.concurrency_key AND s.job_id = d.id
)
SELECT count(*) AS n FROM deleted

-- name: jobs_statistics
-- What the planner believes about tenure_jobs against what is there now: the rows counted
-- by the last ANALYZE (reltuples is -1 before the first) and the live rows now (pgstat,
-- which lags by up to about a second).
SELECT c.reltuples::float8 AS analyzed_rows,
       coalesce(s.n_live_tup, 0)::float8 AS live_rows
FROM pg_class c
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = 'tenure_jobs'::regclass

-- name: try_statistics_lock
-- One worker analyzes at a time; the others skip (the lock ends with the transaction).
SELECT pg_try_advisory_xact_lock(2116944902) AS locked

-- name: analyze_jobs
ANALYZE tenure_jobs

-- name: set_local_lock_timeout
SELECT set_config('lock_timeout', %(ms)s::text, true)
