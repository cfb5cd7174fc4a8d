-- Statements the storms read their evidence with: tenure's tables and the example
-- receiver's (tenure.examples.case_service), once a run is over.

-- name: storm_jobs
SELECT id, idempotency_key, tool, state, owner, token, attempt, max_attempts, result, error
FROM tenure_jobs ORDER BY id

-- name: storm_journal
SELECT id, kind, job_id, token, attempt, worker, detail, code, duration_ms,
       extract(epoch FROM at)::float8 AS at
FROM tenure_events ORDER BY id

-- name: storm_case_effects
SELECT id, idempotency_key, scope, token FROM example_cases ORDER BY id

-- name: storm_payment_effects
SELECT id, idempotency_key, scope, token FROM example_payments ORDER BY id

-- name: storm_terminal_count
SELECT count(*) AS n,
       count(*) FILTER (WHERE state IN ('succeeded', 'failed', 'cancelled')) AS done
FROM tenure_jobs

-- name: storm_keys_terminal
SELECT count(*) AS n FROM tenure_jobs
WHERE idempotency_key = ANY(%(keys)s) AND state IN ('succeeded', 'failed', 'cancelled')
