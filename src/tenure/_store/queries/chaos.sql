-- Statements the fault harness (`tenure chaos`, the storms) reads evidence with.

-- name: chaos_jobs
SELECT id, idempotency_key, tool, state, owner, token, attempt, max_attempts, result, error
FROM tenure_jobs ORDER BY id

-- name: chaos_journal
SELECT id, kind, job_id, token, attempt, worker, detail, code, duration_ms,
       extract(epoch FROM at)::float8 AS at
FROM tenure_events ORDER BY id

-- name: chaos_case_effects
SELECT id, idempotency_key, scope, token FROM example_cases ORDER BY id

-- name: chaos_payment_effects
SELECT id, idempotency_key, scope, token FROM example_payments ORDER BY id

-- name: chaos_terminal_count
SELECT count(*) AS n,
       count(*) FILTER (WHERE state IN ('succeeded', 'failed', 'cancelled')) AS done
FROM tenure_jobs

-- name: chaos_keys_terminal
SELECT count(*) AS n FROM tenure_jobs
WHERE idempotency_key = ANY(%(keys)s) AND state IN ('succeeded', 'failed', 'cancelled')

-- name: chaos_job
SELECT id, state, owner, token FROM tenure_jobs WHERE id = %(id)s

-- name: chaos_outcomes_by
SELECT count(*) AS n FROM tenure_events
WHERE job_id = %(job_id)s AND worker = %(worker)s
  AND kind IN ('succeeded', 'failed', 'retried', 'released')
