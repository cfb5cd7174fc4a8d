-- tenure 0002: the journal carries what an operator needs at 02:00, and nothing private.

-- payload_hmac: the producer's keyed hash (HMAC-SHA256 under the journal key) of the tool name
-- and canonical payload. It tells "the same request twice" from "two requests" without the
-- payload, and without the dictionary attack an unkeyed hash of a short payload invites.
-- NULL when the producer has no journal key. claimed_at: when the current attempt was claimed,
-- so a commit can journal how long the attempt ran on the database's clock.
ALTER TABLE tenure_jobs
    ADD COLUMN payload_hmac text CHECK (length(payload_hmac) <= 128),
    ADD COLUMN claimed_at   timestamptz;

-- Columns every journal row may carry besides job, token, attempt, worker and tool:
--   code          the error code, the reason a lease was lost, or a fence decision;
--   duration_ms   the event's duration; what it measures depends on the kind (README);
--   payload_hmac  copied from the job, so a journal that outlives its jobs still has it.
ALTER TABLE tenure_events
    ADD COLUMN code         text,
    ADD COLUMN duration_ms  bigint,
    ADD COLUMN payload_hmac text;

-- Ownership events are rare next to claims and commits. This partial index lets the dashboard
-- and `tenure events` find the latest of them without walking the whole journal, and costs
-- the claim and commit paths nothing: their rows never enter it.
CREATE INDEX tenure_events_notable ON tenure_events (id)
    WHERE kind IN ('lease_expired', 'heartbeat_lost', 'result_rejected', 'ownership_unknown',
                   'stale_fence_rejected', 'cancelled', 'retry_requested');
