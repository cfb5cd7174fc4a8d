-- tenure 0013: the dashboard's job explorer. It lists jobs newest first, by (created_at, id),
-- filtered by state, tool or tenant and a time range, one page at a time from a keyset cursor
-- (never OFFSET). Without these indexes every filtered page at 1,000,000 rows is a walk over
-- the table; with them each filter is one range scan in the page's order, whatever the depth
-- (bench/plans/explorer.md has the plans). They cost every non-HOT update of tenure_jobs (a
-- heartbeat already is one: lease_until is indexed) one more entry per index, so only one
-- index per filter, and the tenant one only for rows that have a tenant. Plain CREATE INDEX:
-- a migration runs in a transaction, so it holds a write lock on tenure_jobs while it builds.
CREATE INDEX tenure_jobs_created ON tenure_jobs (created_at, id);
CREATE INDEX tenure_jobs_state_created ON tenure_jobs (state, created_at, id);
CREATE INDEX tenure_jobs_tool_created ON tenure_jobs (tool, created_at, id);
CREATE INDEX tenure_jobs_tenant_created ON tenure_jobs (tenant, created_at, id)
    WHERE tenant <> '';
