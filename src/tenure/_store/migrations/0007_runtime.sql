-- tenure 0007: what a waiter needs pushed to it (a job ended, a job made progress, a job was
-- cancelled), and the progress a running tool reports.

-- The last progress the current owner reported: {"done", "total", "message", "at"}. Written
-- only under the same owner + token + live lease predicate as a heartbeat; the message is the
-- tool's own text, so it stays on this row and never enters the journal. Cleared by a claim.
ALTER TABLE tenure_jobs ADD COLUMN progress jsonb;

-- One notification per chunk of items on `p_channel`, in the calling statement's transaction
-- (delivered at its commit, never for a rollback). A NOTIFY payload is at most 8,000 bytes; 300
-- ids of up to 19 digits and a separator fit. Channels:
--   tenure_done      ids of jobs that ended (succeeded, failed, cancelled): waiters look again;
--   tenure_progress  ids of jobs whose progress changed: watchers look again;
--   tenure_cancel    id:token of jobs cancelled while running: their owner stops the call now.
CREATE FUNCTION tenure_notify(p_channel text, p_items text[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_sent integer := 0;
    v_from integer := 1;
BEGIN
    WHILE v_from <= coalesce(cardinality(p_items), 0) LOOP
        PERFORM pg_notify(p_channel, array_to_string(p_items[v_from:v_from + 299], ','));
        v_from := v_from + 300;
        v_sent := v_sent + 1;
    END LOOP;
    RETURN v_sent;
END;
$$;
