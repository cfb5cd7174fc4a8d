-- tenure 0004: per-key concurrency limits enforced across all workers; periodic schedules.

-- A keyed job carries its key and the limit the app declared for that key when the job was
-- queued: the limit comes from code, never from the request. `held` keeps a keyed job out of
-- the ordinary claim: it is true for every keyed job, except for a moment inside the claiming
-- transaction that admitted it under its key's limit (see tenure_admit below), so no committed
-- state ever shows a keyed job the ordinary claim could take.
ALTER TABLE tenure_jobs
    ADD COLUMN concurrency_key   text    CHECK (length(concurrency_key) BETWEEN 1 AND 500),
    ADD COLUMN concurrency_limit integer CHECK (concurrency_limit BETWEEN 1 AND 100000),
    ADD COLUMN held              boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT concurrency_key_has_limit
        CHECK ((concurrency_key IS NULL) = (concurrency_limit IS NULL)),
    ADD CONSTRAINT held_jobs_have_a_key CHECK (NOT held OR concurrency_key IS NOT NULL);

-- The claim's index gains `held` as its leading column: the ordinary claim reads the
-- `held = false` part in pick order, exactly as before, and a backlog of keyed jobs waiting
-- for their limit never lies in its way; admission reads the `held = true` part. One index
-- with the same predicate as before, not a second partial one: every partial index on
-- tenure_jobs is weighed by the planner for each statement, and the claim is planned anew on
-- every call (measured: each extra partial index cost the claim ~20 us of planning).
DROP INDEX tenure_jobs_queued;
CREATE INDEX tenure_jobs_queued ON tenure_jobs (held, priority DESC, run_after, id)
    WHERE state = 'queued';

-- Who holds a key's slots: one row per job admitted under a key. A row counts while its job
-- is running with an unexpired lease; the others are swept when the key is next decided (and
-- with their jobs by the job pruner). A table of its own, so the jobs table needs no extra
-- index to count a key's running jobs.
CREATE TABLE tenure_concurrency_slots (
    concurrency_key text   NOT NULL,
    job_id          bigint NOT NULL,
    PRIMARY KEY (concurrency_key, job_id)
);

-- Admit held jobs up to their keys' limits, for the claim that follows in the same
-- transaction; returns the admitted ids (the caller holds them again before committing).
--
-- Race-free under READ COMMITTED: a key is decided only under its transaction-level advisory
-- lock, which stays held until the claiming transaction has committed. The key's live jobs are
-- counted by separate statements of this VOLATILE function, so on fresh snapshots taken after
-- the lock was granted: they see every admission of that key that committed before. (A count
-- inside one claim statement would use that statement's snapshot, and two claimers could both
-- count N-1.) Without the lock a job can only stop being live (finish, cancel, release, lease
-- expiry; an expired lease is never extended again), which lowers the count. A key whose lock
-- another claimer holds is passed over, like SKIP LOCKED; each row is checked again and locked
-- under a fresh snapshot before it is admitted.
CREATE FUNCTION tenure_admit(p_tools text[], p_wanted integer) RETURNS SETOF bigint
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
             ORDER BY j.priority DESC, j.run_after, j.id
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

-- Periodic schedules: the latest slot each schedule has decided (enqueued or skipped), so a
-- slot is decided once across all workers and restarts, even after its job was pruned.
CREATE TABLE tenure_schedules (
    name        text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    last_slot   timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
