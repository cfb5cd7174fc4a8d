-- The receiver kit's state, kept in the receiver's own database.
--
-- tenure_fence_scopes: one row per fence scope (a job), holding the highest
-- fencing token ever accepted. Its row lock is what serialises the requests of
-- one scope, so a lower token can never commit after a higher one.
CREATE TABLE tenure_fence_scopes (
    scope         text        PRIMARY KEY CHECK (length(scope) BETWEEN 1 AND 200),
    highest_token bigint      NOT NULL CHECK (highest_token > 0),
    first_seen_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    raised_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- tenure_fence_requests: one row per idempotency key. 'in_progress' rows are
-- visible to others only in two-phase mode; a completed row is replayed to any
-- later request with the same key and fingerprint.
CREATE TABLE tenure_fence_requests (
    idempotency_key  text        PRIMARY KEY CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    scope            text        NOT NULL,
    token            bigint      NOT NULL CHECK (token > 0),
    fingerprint      text        NOT NULL,
    status           text        NOT NULL CHECK (status IN ('in_progress', 'completed')),
    response_status  integer     CHECK (response_status BETWEEN 100 AND 599),
    response_headers jsonb,
    response_body    bytea,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at     timestamptz,
    CONSTRAINT tenure_fence_requests_completed_has_response CHECK (
        (status = 'completed') = (
            response_status IS NOT NULL AND response_headers IS NOT NULL
            AND response_body IS NOT NULL AND completed_at IS NOT NULL
        )
    )
);

-- "What did job 42 send us?" — the operator's question at 02:00.
CREATE INDEX tenure_fence_requests_scope ON tenure_fence_requests (scope, token);

-- Reservations stuck in two-phase mode, oldest first.
CREATE INDEX tenure_fence_requests_in_progress ON tenure_fence_requests (created_at)
    WHERE status = 'in_progress';
