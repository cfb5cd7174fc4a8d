-- The workers registry (migration 0011): registration, keep-alive, a clean stop, the pruner
-- and the operators' read. The keep-alive of a worker holding leases is folded into
-- extend_leases (jobs.sql); `touch_worker` is for the beats when it holds none.

-- name: register_worker
-- A worker's row at start. A worker that restarts under the same name takes its row over:
-- it is a new process, so everything but the name is replaced and it is alive again.
INSERT INTO tenure_workers (name, host, pid, version, tools, concurrency, keepalive_ms)
VALUES (%(name)s, %(host)s, %(pid)s, %(version)s, %(tools)s::text[], %(concurrency)s,
        %(keepalive_ms)s)
ON CONFLICT (name) DO UPDATE
SET host = excluded.host, pid = excluded.pid, version = excluded.version,
    tools = excluded.tools, concurrency = excluded.concurrency,
    keepalive_ms = excluded.keepalive_ms, started_at = clock_timestamp(),
    last_seen_at = clock_timestamp(), stopped_at = NULL

-- name: touch_worker
-- The heartbeat thread's keep-alive while it holds no lease. An upsert, so a worker whose
-- row was pruned while it was paused (SIGSTOP past the horizon) is registered again by its
-- next beat; an existing row only gets its last_seen_at (a paused worker that comes back is
-- the same process, started when it started).
INSERT INTO tenure_workers (name, host, pid, version, tools, concurrency, keepalive_ms)
VALUES (%(name)s, %(host)s, %(pid)s, %(version)s, %(tools)s::text[], %(concurrency)s,
        %(keepalive_ms)s)
ON CONFLICT (name) DO UPDATE SET last_seen_at = clock_timestamp()

-- name: stop_worker
-- A clean shutdown: the row stays (an operator sees that it stopped, and when) until pruned.
UPDATE tenure_workers SET stopped_at = clock_timestamp(), last_seen_at = clock_timestamp()
WHERE name = %(name)s AND pid = %(pid)s

-- name: prune_workers
-- One bounded batch of rows not seen for `horizon_ms` (silent or stopped), oldest first
-- through tenure_workers_last_seen; SKIP LOCKED lets every worker's pruner share the work.
WITH old AS (
    SELECT name FROM tenure_workers
    WHERE last_seen_at < (SELECT clock_timestamp()) - %(horizon_ms)s * interval '1 millisecond'
    ORDER BY last_seen_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM tenure_workers w USING old WHERE w.name = old.name RETURNING w.name
)
SELECT count(*) AS n FROM deleted

-- name: list_workers
-- Every registered worker with its status (tenure_worker_status, migration 0011) and the
-- leases it holds. Leases are counted from tenure_jobs through
-- tenure_jobs_lease_until (lease_until is NULL outside 'running'), at most `cap` of them:
-- `held` is every running job the worker owns, `expired` those whose lease has run out and
-- that nobody has reclaimed yet (what a dead worker left behind).
WITH leases AS (
    SELECT owner, count(*) AS held,
           count(*) FILTER (WHERE lease_until <= clock_timestamp()) AS expired
    FROM (SELECT j.owner,
                 tenure_lease_end(j.lease_until, j.lease_ms,
                                  (SELECT s.beat_at FROM tenure_sessions s
                                   WHERE s.owner = j.owner)) AS lease_until
          FROM tenure_jobs j
          WHERE j.lease_until > '-infinity' AND j.state = 'running'
          LIMIT %(cap)s) AS running
    GROUP BY owner
)
SELECT w.name, w.host, w.pid, w.version, w.tools, w.concurrency, w.keepalive_ms,
       w.started_at, w.last_seen_at, w.stopped_at,
       coalesce(l.held, 0)::integer AS leases_held,
       coalesce(l.expired, 0)::integer AS leases_expired,
       tenure_worker_status(w.stopped_at, w.last_seen_at, w.keepalive_ms) AS status,
       extract(epoch FROM clock_timestamp() - w.last_seen_at)::float8 AS seen_ago
FROM tenure_workers w
LEFT JOIN leases l ON l.owner = w.name
ORDER BY w.stopped_at IS NOT NULL, w.last_seen_at DESC, w.name
LIMIT %(limit)s

-- name: count_workers
-- Registered workers by status, for tenure_workers{status} at every scrape: the registry
-- alone (it is small), without counting leases.
SELECT tenure_worker_status(stopped_at, last_seen_at, keepalive_ms) AS status, count(*) AS n
FROM tenure_workers
GROUP BY 1
