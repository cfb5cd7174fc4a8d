-- tenure 0013: the dashboard's job explorer. It lists jobs newest first, by (created_at, id),
-- filtered by state, tool or tenant and a time range, one page at a time from a keyset cursor
-- (never OFFSET). Without these indexes every filtered page at 1,000,000 rows is a walk over
-- the table; with them each filter is one range scan in the page's order, whatever the depth
-- (bench/plans/explorer.md has the plans). The unfiltered list reads tenure_jobs_created,
-- which 0011 made for the queue charts with the same definition.
--
-- Every index of tenure_jobs costs each non-HOT update of a row it holds one more entry (a
-- claim, every heartbeat and a commit are non-HOT: lease_until is indexed), so these hold no
-- running job: a claim and a heartbeat add nothing to them, an enqueue and a commit one entry
-- each (running jobs are searched through tenure_jobs_lease_until). The tenant one holds
-- only jobs that have a tenant. Each is partial on `created_at > '-infinity'` too, true of
-- every row but stated by no statement except the explorer's: without it the planner took
-- tenure_jobs_tool_created for the claim's queued branch (state = 'queued' implies
-- state <> 'running') instead of tenure_jobs_queued. Plain CREATE INDEX: a migration runs in
-- a transaction, so it holds a write lock on tenure_jobs while it builds them.
CREATE INDEX tenure_jobs_state_created ON tenure_jobs (state, created_at, id)
    WHERE state <> 'running' AND created_at > '-infinity';
CREATE INDEX tenure_jobs_tool_created ON tenure_jobs (tool, created_at, id)
    WHERE state <> 'running' AND created_at > '-infinity';
CREATE INDEX tenure_jobs_tenant_created ON tenure_jobs (tenant, created_at, id)
    WHERE tenant <> '' AND state <> 'running' AND created_at > '-infinity';
