-- tenure 0014: the waitpoint key is read only by roles that may change jobs.
--
-- Waitpoint tokens and MCP task ids are HMACs of ids anyone who reads the tables can see
-- (the job, the waitpoint's name, the tenant) under the key in tenure_secrets. A role that
-- could read that key could mint the token of any open waitpoint and resume a payment
-- through the dashboard's open webhook: read access would be write access. So the key's
-- row is shown only to a role that holds UPDATE on tenure_jobs (workers, producers, an MCP
-- server, the table's owner), which could change any job by writing to it anyway; a role
-- that can only read (a read-only dashboard, an analyst, pg_read_all_data, even one granted
-- SELECT on every table) sees no row, and a pg_dump run by it refuses the table. The key
-- itself does not change, so every open waitpoint's token (and every task id) stays valid.
--
-- The policy is row-level security: superusers, roles with BYPASSRLS and the table's owner
-- (who runs the migrations) are not subject to it. The privilege is checked on the table by
-- its identity (a regclass, fixed now), not by a name a reader's search_path could resolve
-- to a table of its own. No role may write the key (no policy allows it); migrations, run
-- by the owner, still can.
ALTER TABLE tenure_secrets ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenure_secrets_writers ON tenure_secrets FOR SELECT
    USING (has_table_privilege('tenure_jobs'::regclass, 'UPDATE'));
