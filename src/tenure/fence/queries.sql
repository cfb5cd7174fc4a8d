-- Every statement of the receiver kit, by name (loaded once by tenure.fence._schema).

-- name: set_lock_timeout
-- Bound how long a request waits behind another one of its scope or key
-- (transaction-local: it ends with the guard's transaction).
SELECT set_config('lock_timeout', %(lock_timeout)s, true) AS lock_timeout;

-- name: raise_mark
-- Take the scope's row lock and raise its high-water mark; returns the mark
-- after the statement. A returned mark above the request's token means stale:
-- the caller rolls back, so nothing is written.
INSERT INTO tenure_fence_scopes AS s (scope, highest_token)
VALUES (%(scope)s, %(token)s)
ON CONFLICT (scope) DO UPDATE
    SET highest_token = greatest(s.highest_token, excluded.highest_token),
        raised_at = CASE
            WHEN excluded.highest_token > s.highest_token THEN clock_timestamp()
            ELSE s.raised_at
        END
RETURNING highest_token;

-- name: claim_key
-- Reserve the key; no row back means it already exists (a committed row, or
-- one whose inserting transaction we waited for).
INSERT INTO tenure_fence_requests (idempotency_key, scope, token, fingerprint, status)
VALUES (%(key)s, %(scope)s, %(token)s, %(fingerprint)s, 'in_progress')
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING idempotency_key;

-- name: get_request
SELECT idempotency_key, scope, token, fingerprint, status,
       response_status, response_headers, response_body, created_at, completed_at
  FROM tenure_fence_requests
 WHERE idempotency_key = %(key)s;

-- name: complete_request
-- Only the reservation this request made may be completed.
UPDATE tenure_fence_requests
   SET status = 'completed',
       response_status = %(response_status)s,
       response_headers = %(response_headers)s::jsonb,
       response_body = %(response_body)s,
       completed_at = clock_timestamp()
 WHERE idempotency_key = %(key)s AND token = %(token)s AND status = 'in_progress'
RETURNING idempotency_key;

-- name: release_request
-- Two-phase mode: the effect certainly did not happen; free the key for a retry.
DELETE FROM tenure_fence_requests
 WHERE idempotency_key = %(key)s AND token = %(token)s AND status = 'in_progress'
RETURNING idempotency_key;

-- name: get_scope
SELECT scope, highest_token, first_seen_at, raised_at
  FROM tenure_fence_scopes
 WHERE scope = %(scope)s;
