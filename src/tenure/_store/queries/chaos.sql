-- Statements `tenure chaos` reads its evidence with (the storms' own: tests/support/storm).

-- name: chaos_job
SELECT id, state, owner, token FROM tenure_jobs WHERE id = %(id)s

-- name: chaos_outcomes_by
SELECT count(*) AS n FROM tenure_events
WHERE job_id = %(job_id)s AND worker = %(worker)s
  AND kind IN ('succeeded', 'failed', 'retried', 'released')
