-- The example receiver's own SQL (its tables are the "side effects" a worker causes).

-- name: create_tables
-- No unique constraint on idempotency_key on purpose: exactly-once must come
-- from the fence guard, and tests count these rows to prove it does.
SELECT pg_advisory_xact_lock(7233732574736250467);
CREATE TABLE IF NOT EXISTS example_cases (
    id              bigserial   PRIMARY KEY,
    idempotency_key text        NOT NULL,
    scope           text        NOT NULL,
    token           bigint      NOT NULL,
    title           text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS example_payments (
    id              bigserial   PRIMARY KEY,
    idempotency_key text        NOT NULL,
    scope           text        NOT NULL,
    token           bigint      NOT NULL,
    payment_id      text        NOT NULL,
    amount_cents    bigint      NOT NULL CHECK (amount_cents > 0),
    captured_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- name: insert_case
INSERT INTO example_cases (idempotency_key, scope, token, title)
VALUES (%(key)s, %(scope)s, %(token)s, %(title)s)
RETURNING id, created_at;

-- name: insert_payment
INSERT INTO example_payments (idempotency_key, scope, token, payment_id, amount_cents)
VALUES (%(key)s, %(scope)s, %(token)s, %(payment_id)s, %(amount_cents)s)
RETURNING id, captured_at;

-- name: effects_summary
-- For a report (tenure demo): effects applied, and idempotency keys applied more than once.
SELECT count(*) AS applied,
       (SELECT count(*) FROM (
            SELECT idempotency_key FROM (
                SELECT idempotency_key FROM example_cases
                UNION ALL
                SELECT idempotency_key FROM example_payments) AS effects
            GROUP BY idempotency_key HAVING count(*) > 1) AS twice) AS doubled
FROM (SELECT 1 FROM example_cases UNION ALL SELECT 1 FROM example_payments) AS everything;
