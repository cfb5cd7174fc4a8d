-- tenure 0006: idempotency keys belong to their tenant; every job keeps its own retention.

-- A key was unique across the whole table, so tenant bob's enqueue with tenant alice's key
-- returned alice's job (and its result). Keys are now unique per tenant: two tenants may use
-- the same key for different calls and never see each other's job. Pipeline stages keep
-- their keys in tenant '' as before.
ALTER TABLE tenure_jobs DROP CONSTRAINT tenure_jobs_idempotency_key_key;
CREATE UNIQUE INDEX tenure_jobs_tenant_key ON tenure_jobs (tenant, idempotency_key);

-- Retention is the idempotency window: a repeated key is answered with the existing job only
-- while that job exists. Each job carries its own retention (from the enqueue, else its tool,
-- else its app), and the statement that ends a job stamps `prune_after` from it, so a pruner
-- never applies one worker's setting to another application's jobs. Jobs that ended before
-- this migration keep the 7 days that was the default until now.
ALTER TABLE tenure_jobs
    ADD COLUMN retain_ms   bigint NOT NULL DEFAULT 604800000
        CHECK (retain_ms BETWEEN 1000 AND 315360000000),
    ADD COLUMN prune_after timestamptz;

UPDATE tenure_jobs SET prune_after = finished_at + interval '7 days'
WHERE finished_at IS NOT NULL AND state IN ('succeeded', 'failed', 'cancelled');

-- The pruner walks each of its tools' expired jobs in prune_after order.
DROP INDEX tenure_jobs_finished;
CREATE INDEX tenure_jobs_prune ON tenure_jobs (tool, prune_after)
    WHERE prune_after IS NOT NULL;

-- A late result that a worker threw away (its lease lost, its job cancelled) is journaled as
-- result_discarded, and belongs in the ownership feed next to result_rejected.
DROP INDEX tenure_events_notable;
CREATE INDEX tenure_events_notable ON tenure_events (id)
    WHERE kind IN ('lease_expired', 'heartbeat_lost', 'result_rejected', 'result_discarded',
                   'ownership_unknown', 'stale_fence_rejected', 'cancelled', 'retry_requested');
