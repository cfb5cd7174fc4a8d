-- tenure 0022: durable waits that hold no lease. `ctx.sleep` and `ctx.wait_for` end the
-- attempt at a waitpoint (0008) like a call waiting for a person: the job is `waiting`, with
-- no lease, no heartbeat and no worker slot, and is called again from the top (replaying its
-- steps, 0021) when the wait is over. A sleep is a waitpoint whose deadline resumes it (the
-- rescuer's expire_waitpoints); a wait for child jobs is resumed by the last child's end, in
-- the same transaction as that child's commit (the trigger below), whichever statement ends
-- it (a commit, a cancel, the rescuer failing its lease, a stage transition).

-- The job that started this one with `ctx.enqueue` (NULL for everything else); no foreign
-- key: either may be pruned first. Indexed for the run page's children, and only children.
ALTER TABLE tenure_jobs ADD COLUMN parent_id bigint;
CREATE INDEX tenure_jobs_parent ON tenure_jobs (parent_id) WHERE parent_id IS NOT NULL;

-- What a waitpoint waits for: an answer (0008: a person, a webhook), a deadline (a durable
-- sleep), or child jobs; `waiting_on` lists the children that have not ended yet.
ALTER TABLE tenure_waitpoints
    ADD COLUMN kind text NOT NULL DEFAULT 'answer' CHECK (kind IN ('answer', 'sleep', 'children'));
ALTER TABLE tenure_waitpoints ADD COLUMN waiting_on bigint[];

-- Nobody answers a sleep or a wait for children from outside (0020 knew 'holder' and
-- 'caller'): only its deadline or its children end it. 'nobody' says so to whoever reads it
-- (tenure jobs show, an MCP server choosing what to ask), and complete_waitpoint answers
-- only a waitpoint of kind 'answer', so the token such a wait has (derived like any other)
-- answers nothing.
ALTER TABLE tenure_waitpoints
    DROP CONSTRAINT tenure_waitpoints_answered_by_check,
    ADD CONSTRAINT tenure_waitpoints_answered_by_check
        CHECK (answered_by IN ('holder', 'caller', 'nobody')),
    ADD CONSTRAINT tenure_waitpoints_answerable
        CHECK ((kind = 'answer') = (answered_by <> 'nobody'));

-- The backstop sweep's look at children waits (queries/waitpoints.sql, resume_children_waits).
CREATE INDEX tenure_waitpoints_children ON tenure_waitpoints (id)
    WHERE state = 'open' AND kind = 'children';

-- A child that ended leaves its parent's open children waits; the wait that has no child
-- left is answered and the parent queued again (the attempt that suspended is refunded, as
-- an answer refunds it), all in the ending statement's transaction. The waitpoint's row lock
-- orders two children ending at once: the second sees the first one's removal. The parent's
-- suspension (suspend_for_children) locks its children FOR SHARE before it decides, so a child
-- that ends while its parent suspends is either seen ended there or finds the wait here.
CREATE FUNCTION tenure_child_ended() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w record;
BEGIN
    PERFORM pg_notify('tenure_progress', NEW.parent_id::text);  -- the parent's watchers look
    FOR w IN
        UPDATE tenure_waitpoints p
        SET waiting_on = array_remove(p.waiting_on, NEW.id)
        WHERE p.job_id = NEW.parent_id
          AND p.kind = 'children'
          AND p.state = 'open'
          AND NEW.id = ANY(p.waiting_on)
        RETURNING p.id, p.name, p.token, p.waiting_on, p.created_at
    LOOP
        CONTINUE WHEN cardinality(w.waiting_on) > 0;
        PERFORM tenure_resume_children_wait(w.id, w.name, w.token, w.created_at);
    END LOOP;
    RETURN NULL;
END;
$$;

-- Answer one children wait whose children all ended and queue its job again, if the job still
-- waits there under the token it suspended with (the trigger above and the backstop sweep),
-- and only before its deadline on the database's clock, like any answer (complete_waitpoint):
-- past it, the rescuer's expire_waitpoints ends the wait with its on_timeout.
CREATE FUNCTION tenure_resume_children_wait(p_wait bigint, p_name text, p_token bigint,
                                            p_created timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_job record;
BEGIN
    UPDATE tenure_waitpoints SET state = 'answered', closed_at = clock_timestamp()
    WHERE id = p_wait AND state = 'open' AND deadline > clock_timestamp();
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE tenure_jobs j
    SET state = 'queued',
        attempt = j.attempt - 1,
        run_after = clock_timestamp(),
        updated_at = clock_timestamp(),
        waitpoints = coalesce(j.waitpoints, '{}'::jsonb)
            || jsonb_build_object(p_name, jsonb_build_object(
                   'answer', NULL, 'timed_out', false, 'at', clock_timestamp()))
    FROM tenure_waitpoints w
    WHERE w.id = p_wait AND j.id = w.job_id AND j.state = 'waiting' AND j.token = p_token
    RETURNING j.id, j.tool, j.token, j.attempt, j.payload_hmac INTO v_job;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool, detail, code,
                               duration_ms, payload_hmac)
    VALUES ('waitpoint_answered', v_job.id, v_job.token, v_job.attempt, NULL, v_job.tool,
            jsonb_build_object('waitpoint', p_name, 'kind', 'children'), NULL,
            (extract(epoch FROM clock_timestamp() - p_created) * 1000)::bigint,
            v_job.payload_hmac);
    RETURN true;
END;
$$;

CREATE TRIGGER tenure_jobs_child_ended AFTER UPDATE OF state ON tenure_jobs
    FOR EACH ROW
    WHEN (NEW.parent_id IS NOT NULL
          AND NEW.state IN ('succeeded', 'failed', 'cancelled')
          AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION tenure_child_ended();
