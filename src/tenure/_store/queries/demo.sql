-- Statements `tenure demo` sends to the example case service's database.

-- name: demo_effects
SELECT count(*) AS applied,
       (SELECT count(*) FROM (
            SELECT idempotency_key FROM (
                SELECT idempotency_key FROM example_cases
                UNION ALL
                SELECT idempotency_key FROM example_payments) AS effects
            GROUP BY idempotency_key HAVING count(*) > 1) AS twice) AS doubled
FROM (SELECT 1 FROM example_cases UNION ALL SELECT 1 FROM example_payments) AS everything
