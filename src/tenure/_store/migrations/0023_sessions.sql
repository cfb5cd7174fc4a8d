-- tenure 0023: liveness per worker process (issue #26, docs/concepts/storage.md). A worker's
-- heartbeat was one row update per lease per period, never HOT (lease_until is indexed):
-- 100,000 leases cost 14 MB/s of WAL. Now a process beats one narrow row of its own, its
-- session, and each job it holds derives its lease from it:
--
--   lease end = lease_until                                         when lease_ms IS NULL
--             = greatest(lease_until, session beat_at + lease_ms)   otherwise
--
-- lease_ms is the job's tool's (capped) lease, stored by the claim; lease_until is the end the
-- claim gave it. A job whose lease_ms is NULL has a lease of its own row, extended row by row
-- as before: every job running when this migration ran (so running jobs keep their leases
-- across the upgrade, and workers of the previous version keep extending theirs), and every
-- job whose lease was frozen: its executor became unobservable, or its session went stale
-- (tenure_reap_sessions below). Nothing here rewrites a job row.

-- One row per worker process that claimed under a session: beat_at is its last confirmed
-- beat on the database's clock, min_lease_ms the shortest lease of its tools (a session
-- unheard of for that long is stale: the claim and the rescuer look at its jobs). A beat never
-- revives a lease: the statement that moves beat_at freezes, first, every lease of the
-- process whose end has passed. Fillfactor 50: the beat is a HOT update.
CREATE TABLE tenure_sessions (
    owner        text        PRIMARY KEY CHECK (length(owner) BETWEEN 1 AND 200),
    beat_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    min_lease_ms integer     NOT NULL CHECK (min_lease_ms > 0)
) WITH (fillfactor = 50);

ALTER TABLE tenure_jobs ADD COLUMN lease_ms integer CHECK (lease_ms > 0);

-- A stale session's running jobs (the reaper's walk). Partial on `lease_ms IS NOT NULL`, a
-- predicate no by-id statement states, so the planner can never take it for one.
CREATE INDEX tenure_jobs_session_leases ON tenure_jobs (owner)
    WHERE state = 'running' AND lease_ms IS NOT NULL;

-- Leases of their own row that ran out (the claim's reclaim branch, the rescuer): never the
-- session leases, whose lease_until is only where the claim put it.
CREATE INDEX tenure_jobs_row_leases ON tenure_jobs (lease_until)
    WHERE state = 'running' AND lease_ms IS NULL;

-- A job's lease end from its row and its owner's beat (NULL when it has no session). Plain
-- SQL, so the planner inlines it; callers pass the beat, read in the same statement.
CREATE FUNCTION tenure_lease_end(p_lease_until timestamptz, p_lease_ms integer,
                                 p_beat_at timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_lease_ms IS NULL THEN p_lease_until
                ELSE greatest(p_lease_until, p_beat_at + p_lease_ms * interval '1 millisecond')
           END
$$;

-- The rescuer's sweep of stale sessions (unheard of for their shortest lease): the leases of
-- theirs whose end has passed are frozen there (leases of their own row from then on, which
-- the claim's reclaim branch, admission and the rescuer find by tenure_jobs_row_leases), and a
-- stale session left with no live lease is deleted (its process, if it comes back, opens it
-- again with its next claim). Sessions a claim or a beat holds are skipped. Returns how many
-- leases it froze.
CREATE FUNCTION tenure_reap_sessions() RETURNS integer
LANGUAGE sql VOLATILE AS $$
    WITH stale AS (
        SELECT s.owner, s.beat_at FROM tenure_sessions s
        WHERE s.beat_at + s.min_lease_ms * interval '1 millisecond' < clock_timestamp()
        FOR UPDATE SKIP LOCKED
    ), frozen AS (
        UPDATE tenure_jobs j
        SET lease_ms = NULL,
            lease_until = tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at)
        FROM stale s
        WHERE j.owner = s.owner AND j.state = 'running' AND j.lease_ms IS NOT NULL
          AND tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at) < clock_timestamp()
        RETURNING j.id
    ), gone AS (
        DELETE FROM tenure_sessions t
        USING stale s
        WHERE t.owner = s.owner
          AND NOT EXISTS (SELECT FROM tenure_jobs j
                          WHERE j.owner = s.owner AND j.state = 'running'
                            AND j.lease_ms IS NOT NULL
                            AND tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at)
                                >= clock_timestamp())
    )
    SELECT count(*)::integer FROM frozen
$$;

-- Admission counts a key's live jobs and looks for expired keyed leases: both by the lease
-- end above (0004's function compared lease_until alone, which a session lease has passed).
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
               AND j.lease_ms IS NULL
               AND j.held
               AND j.attempt < j.max_attempts
               AND j.tool = ANY(p_tools)
               AND j.concurrency_key <> ALL(skipped)
             ORDER BY j.lease_until
             LIMIT p_wanted)
            UNION ALL
            -- Session leases of a session unheard of for its shortest lease, whose own end
            -- has passed (what the claim's orphaned branch takes once admitted).
            (SELECT j.id, j.concurrency_key, j.concurrency_limit
             FROM tenure_sessions s
             JOIN tenure_jobs j ON j.owner = s.owner
             WHERE s.beat_at + s.min_lease_ms * interval '1 millisecond' < v_now
               AND j.state = 'running'
               AND j.lease_ms IS NOT NULL
               AND tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at) < v_now
               AND j.held
               AND j.attempt < j.max_attempts
               AND j.tool = ANY(p_tools)
               AND j.concurrency_key <> ALL(skipped)
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
                      AND NOT EXISTS (
                          SELECT FROM tenure_jobs r
                          WHERE r.id = s.job_id
                            AND r.state = 'running'
                            AND tenure_lease_end(r.lease_until, r.lease_ms,
                                                 (SELECT o.beat_at FROM tenure_sessions o
                                                  WHERE o.owner = r.owner))
                                > clock_timestamp());
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
                       THEN tenure_lease_end(r.lease_until, r.lease_ms,
                                             (SELECT o.beat_at FROM tenure_sessions o
                                              WHERE o.owner = r.owner)) < clock_timestamp()
                            AND r.attempt < r.max_attempts
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

-- A worker may hold up to 100,000 calls (it was 10,000, 0011): with session beats a held call
-- costs the database nothing per heartbeat, and its process a few operations.
ALTER TABLE tenure_workers
    DROP CONSTRAINT tenure_workers_concurrency_check,
    ADD CONSTRAINT tenure_workers_concurrency_check CHECK (concurrency BETWEEN 1 AND 100000);
