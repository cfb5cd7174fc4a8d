-- tenure 0005: tenants, per-tenant queued-job quotas, and a fair claim order.
--
-- Every job belongs to a tenant ('' when the caller named none). The claim used to take
-- queued jobs first come, first served, so one tenant's flood of 100,000 jobs put every other
-- tenant's job behind all of them. Now each job gets a place in line (`position`) when it is
-- queued, by start-time fair queuing: a tenant's next job is placed after that tenant's own
-- queued jobs, but never before the current head of the line. The claim takes jobs by
-- (priority, position), so tenants with work queued are served in turn, one job each per
-- round, whatever their backlogs. A retry or a released lease keeps the job's place: it was
-- already in line. Positions of different tenants may tie; the id breaks the tie.

ALTER TABLE tenure_jobs
    ADD COLUMN tenant   text   NOT NULL DEFAULT '' CHECK (length(tenant) <= 200),
    ADD COLUMN position bigint NOT NULL DEFAULT 0;

-- The line's floor: the highest head position any enqueue has seen. Once the line empties,
-- newcomers are placed here, not back at zero, so a job still waiting (delayed, or retried
-- later) keeps its place ahead of them. A sequence, not a row, so no enqueue ever waits for
-- another's lock on it.
CREATE SEQUENCE tenure_position_floor AS bigint MINVALUE 0 START 0;

-- The claim's index orders by place in line instead of arrival time (`held` still leads, see
-- 0004). A job delayed at enqueue waits in its place, so the claim must step over jobs not
-- yet due: run_after, the last key column, lets it do so inside the index (a scan key the
-- btree checks on each entry) instead of fetching every such row from the heap. Measured
-- with 10,000 jobs due in a day at the head of the line: a claim of 100 took 2.1 ms instead
-- of 1.8 ms with none; without run_after in the index, 6.3 ms.
DROP INDEX tenure_jobs_queued;
CREATE INDEX tenure_jobs_queued ON tenure_jobs (held, priority DESC, position, id, run_after)
    WHERE state = 'queued';

-- A tenant's queued jobs in line order: its last place (where its next job goes) and its
-- queued count (its quota).
CREATE INDEX tenure_jobs_tenant_queued ON tenure_jobs (tenant, position)
    WHERE state = 'queued';

-- The first of p_count places in line for jobs of p_tenant, after checking its quota.
--
-- With p_quota, the tenant's enqueues are serialized by a transaction-level advisory lock,
-- held until the enqueue commits, and its queued jobs are counted by a later statement of
-- this VOLATILE function, on a snapshot taken after the lock was granted: two producers can
-- never both see room for the last slot. Without a quota nothing is locked; two enqueues of
-- one tenant at once may get the same places, which only ties them.
--
-- Over quota: SQLSTATE TQ001, which the store turns into QuotaExceeded; nothing is written.
CREATE FUNCTION tenure_place(p_tenant text, p_count integer, p_quota integer) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_queued bigint;
    v_floor  bigint;
    v_head   bigint;
    v_last   bigint;
BEGIN
    IF p_quota IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(2116944901, hashtext(p_tenant));
        SELECT count(*) INTO v_queued
        FROM tenure_jobs WHERE tenant = p_tenant AND state = 'queued';
        IF v_queued + p_count > p_quota THEN
            RAISE EXCEPTION 'tenant quota exceeded'
                USING ERRCODE = 'TQ001',
                      DETAIL = format('tenant %L has %s queued jobs; %s more would pass its quota of %s',
                                     p_tenant, v_queued, p_count, p_quota);
        END IF;
    END IF;
    SELECT last_value INTO v_floor FROM tenure_position_floor;
    SELECT j.position INTO v_head
    FROM tenure_jobs j
    WHERE j.state = 'queued' AND NOT j.held
    ORDER BY j.priority DESC, j.position, j.id
    LIMIT 1;
    IF v_head > v_floor THEN
        PERFORM setval('tenure_position_floor', v_head);
        v_floor := v_head;
    END IF;
    SELECT max(j.position) INTO v_last
    FROM tenure_jobs j WHERE j.tenant = p_tenant AND j.state = 'queued';
    RETURN greatest(v_floor, v_last + 1);
END;
$$;

-- Statements that insert jobs without placing them (pipeline stages) get a place of their own.
ALTER TABLE tenure_jobs ALTER COLUMN position SET DEFAULT tenure_place('', 1, NULL);

-- Admission of keyed jobs takes them in the same order as the claim.
CREATE OR REPLACE FUNCTION tenure_admit(p_tools text[], p_wanted integer) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    c record;
    v_now timestamptz := clock_timestamp();
    locked text[] := '{}';  -- keys this transaction decides
    live integer[] := '{}'; -- live jobs per locked key, counting the ones admitted here
    skipped text[] := '{}'; -- keys at their limit, or being decided by another claimer
    k integer;
    admitted integer := 0;
    rescan boolean := true;
BEGIN
    -- Candidates: expired leases first, then queued jobs in claim order (Append keeps the
    -- branches' order). A key found full or busy is skipped by scanning again without it,
    -- so its backlog is passed over by the executor, not row by row here; without a skip,
    -- p_wanted rows of each branch are enough (the LIMIT also makes the plan an ordered
    -- index scan instead of sorting every held job).
    WHILE rescan AND admitted < p_wanted LOOP
        rescan := false;
        FOR c IN
            (SELECT j.id, j.concurrency_key AS key, j.concurrency_limit AS lim
             FROM tenure_jobs j
             WHERE j.lease_until < v_now
               AND j.state = 'running'
               AND j.held
               AND j.attempt < j.max_attempts
               AND j.tool = ANY(p_tools)
               AND j.concurrency_key <> ALL(skipped)
             ORDER BY j.lease_until
             LIMIT p_wanted)
            UNION ALL
            (SELECT j.id, j.concurrency_key, j.concurrency_limit
             FROM tenure_jobs j
             WHERE j.state = 'queued'
               AND j.held
               AND j.run_after <= v_now
               AND j.tool = ANY(p_tools)
               AND j.concurrency_key <> ALL(skipped)
             ORDER BY j.priority DESC, j.position, j.id
             LIMIT p_wanted)
        LOOP
            k := array_position(locked, c.key);
            IF k IS NULL THEN  -- the key's first candidate: decide it, unless someone else does
                IF pg_try_advisory_xact_lock(2116944900, hashtext(c.key)) THEN
                    DELETE FROM tenure_concurrency_slots s
                    WHERE s.concurrency_key = c.key
                      AND NOT EXISTS (SELECT FROM tenure_jobs r
                                      WHERE r.id = s.job_id
                                        AND r.state = 'running'
                                        AND r.lease_until > clock_timestamp());
                    locked := locked || c.key;
                    live := live || (SELECT count(*)::integer FROM tenure_concurrency_slots s
                                     WHERE s.concurrency_key = c.key);
                    k := cardinality(locked);
                END IF;
            END IF;
            IF k IS NULL OR live[k] >= c.lim THEN  -- another claimer decides it, or it is full
                skipped := skipped || c.key;
                rescan := true;
                EXIT;
            END IF;
            PERFORM FROM tenure_jobs r
            WHERE r.id = c.id
              AND r.held
              AND r.concurrency_key = c.key
              AND CASE WHEN r.state = 'running'
                       THEN r.lease_until < clock_timestamp() AND r.attempt < r.max_attempts
                       ELSE r.state = 'queued' AND r.run_after <= clock_timestamp() END
            FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            UPDATE tenure_jobs r SET held = false WHERE r.id = c.id;
            INSERT INTO tenure_concurrency_slots (concurrency_key, job_id) VALUES (c.key, c.id)
            ON CONFLICT DO NOTHING;
            live[k] := live[k] + 1;
            admitted := admitted + 1;
            RETURN NEXT c.id;
            EXIT WHEN admitted >= p_wanted;
        END LOOP;
    END LOOP;
END;
$$;
