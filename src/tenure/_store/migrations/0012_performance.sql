-- tenure 0012: performance (issue #15). tenure_place's lookups become index walks whatever the
-- planner statistics say. plpgsql keeps each statement's plan for the session; a plan made
-- while tenure_jobs looked empty (a fresh install, a quiet queue, a table not yet analyzed)
-- scanned the whole table for the line's head and the tenant's last place on every enqueue:
-- 150-250 us of PostgreSQL per enqueue with a few thousand rows, and growing with the table,
-- terminal rows included. With enable_seqscan = off the planner is left the partial indexes
-- (tenure_jobs_queued, tenure_jobs_tenant_queued); the sequence's one-row read has no other
-- path and keeps its scan. jit = off because the disabled scan's cost would otherwise make JIT
-- compile that read on every call. The tenant's last place is read as ORDER BY ... LIMIT 1,
-- which walks the index backwards from its end, rather than max(), which relies on the
-- planner to do the same.
CREATE OR REPLACE FUNCTION tenure_place(p_tenant text, p_count integer, p_quota integer) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off AS $$
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
    SELECT j.position INTO v_last
    FROM tenure_jobs j WHERE j.tenant = p_tenant AND j.state = 'queued'
    ORDER BY j.position DESC LIMIT 1;
    RETURN greatest(v_floor, v_last + 1);
END;
$$;
