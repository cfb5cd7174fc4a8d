-- tenure's schema as it stands after every migration, in one file, for reading.
--
-- As of migration: 0023_sessions
--
-- Nothing applies this file: `tenure migrate` runs migrations/*.sql in order, and that is
-- the only way tenure's tables are made. This file is what those migrations add up to,
-- written out once in dependency order with a short note on why each thing is there (the
-- migration that made it, 0001-0023, says more). Statements that migrations later replaced
-- are shown only in their current form: tenure_admit (0004, replaced in 0005 and 0023), the claim
-- index tenure_jobs_queued (0001, rebuilt in 0004 and 0005), the journal's notable index
-- (0002, rebuilt in 0006), the jobs' state CHECK (0001, widened in 0008) and the workers'
-- concurrency CHECK (0011, widened in 0023).
--
-- tests/integration/store/test_schema_snapshot.py applies this file to one fresh schema and the
-- migrations to another, and compares their catalogs (columns, constraints, indexes,
-- functions, triggers, sequences, views) and the "As of migration" line above against the
-- newest migration. So a new migration fails that test until this file says the same:
-- add your change here, where it belongs (a new column at the end of its table, as ALTER
-- TABLE ... ADD COLUMN puts it), and move the "As of migration" line.
--
-- Every lease decision in tenure compares against clock_timestamp(), the database's
-- clock, never a worker's; that is why the defaults below use it rather than now().


-- == Migrations ==============================================================================

-- Which migrations have been applied (made by the migration runner, _store/_migrate.py, before
-- the first migration; the receiver kit keeps its own, tenure_fence_migrations, in the
-- receiver's database).
CREATE TABLE tenure_migrations (
    version     integer PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);


-- == Sequences ===============================================================================

-- Every claim draws its fencing token here: one sequence for the whole system, so tokens are
-- monotonic across jobs, workers and restarts (like an etcd revision). A receiver keeps the
-- highest token it accepted per scope and refuses a lower one.
CREATE SEQUENCE tenure_fence_token AS bigint;

-- The fair line's floor: the highest head position any enqueue has seen. Once the line
-- empties, newcomers are placed here, not back at zero, so a job still waiting (delayed, or
-- retried later) keeps its place ahead of them. A sequence, not a row, so no enqueue ever
-- waits for another's lock on it.
CREATE SEQUENCE tenure_position_floor AS bigint MINVALUE 0 START 0;


-- == Jobs ====================================================================================

-- The first of p_count places in line for jobs of p_tenant, after checking its quota
-- (start-time fair queuing: a tenant's next job goes after that tenant's own queued jobs,
-- but never before the current head of the line, so tenants with work queued are served in
-- turn whatever their backlogs). With p_quota the tenant's enqueues are serialized by an
-- advisory lock held until the enqueue commits, and the count is taken by a later statement
-- of this VOLATILE function, on a fresh snapshot: two producers never both see room for the
-- last slot. Over quota: SQLSTATE TQ001 (the store raises QuotaExceeded), nothing written.
-- Defined before tenure_jobs because the table's `position` default calls it (a plpgsql body
-- is not resolved until it runs). (0012) Its lookups are index walks whatever the statistics
-- say: plpgsql keeps a plan for the session, and one made while the table looked empty (a
-- fresh install, a quiet queue) scanned every row on each enqueue, 150-250 us of PostgreSQL per
-- enqueue with a few thousand rows. enable_seqscan = off leaves the planner only the partial
-- indexes (jit = off: the disabled seqscan's cost would otherwise make JIT compile the
-- sequence's read on every call), and the tenant's last place is read as ORDER BY ... LIMIT 1.
CREATE FUNCTION tenure_place(p_tenant text, p_count integer, p_quota integer) RETURNS bigint
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

-- One row per tool call. Columns are in the order the migrations added them.
CREATE TABLE tenure_jobs (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tool              text        NOT NULL CHECK (length(tool) BETWEEN 1 AND 200),
    -- 'waiting': suspended at a waitpoint (no lease, no heartbeat, no worker slot).
    state             text        NOT NULL DEFAULT 'queued'
                      CHECK (state IN ('queued', 'running', 'waiting', 'succeeded', 'failed',
                                       'cancelled')),
    -- The lease: who holds the job, until when (database clock), last confirmed when.
    owner             text,
    lease_until       timestamptz,
    heartbeat_at      timestamptz,
    -- The current lease's fencing token (from tenure_fence_token; 0 before the first claim).
    -- Every extension and commit matches owner + token + state 'running' + a live lease.
    token             bigint      NOT NULL DEFAULT 0,
    attempt           integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts      integer     NOT NULL CHECK (max_attempts BETWEEN 1 AND 1000),
    priority          smallint    NOT NULL DEFAULT 0,
    -- Not claimable before this (a delayed enqueue, a retry's backoff).
    run_after         timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Unique per tenant (tenure_jobs_tenant_key below): a repeated key returns this job.
    idempotency_key   text        NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 500),
    payload           jsonb       NOT NULL,
    -- Fingerprint of tool + payload: the same key with a different call is a conflict.
    payload_hash      text        NOT NULL,
    result            jsonb,
    error             jsonb,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at       timestamptz,
    -- (0002) The producer's keyed hash (HMAC-SHA256 under the journal key) of tool and
    -- payload: tells "the same request twice" from "two requests" without the payload, and
    -- without the dictionary attack an unkeyed hash of a short payload invites. NULL when
    -- the producer has no journal key. Copied into every journal row of the job.
    payload_hmac      text        CHECK (length(payload_hmac) <= 128),
    -- When the current attempt was claimed: a commit journals how long the attempt ran.
    claimed_at        timestamptz,
    -- (0004) Per-key concurrency limits: the key, and the limit the app declared for it when
    -- the job was queued (from code, never from the request). `held` keeps a keyed job out
    -- of the ordinary claim; it is false only for a moment inside the claiming transaction
    -- that admitted it (tenure_admit), so no committed state shows a keyed job the ordinary
    -- claim could take.
    concurrency_key   text        CHECK (length(concurrency_key) BETWEEN 1 AND 500),
    concurrency_limit integer     CHECK (concurrency_limit BETWEEN 1 AND 100000),
    held              boolean     NOT NULL DEFAULT false,
    -- (0005) The job's tenant ('' for none) and its place in the fair line. A retry or a
    -- released lease keeps the place: it was already in line. Statements that insert jobs
    -- without placing them (pipeline stages) get a place from the default.
    tenant            text        NOT NULL DEFAULT '' CHECK (length(tenant) <= 200),
    position          bigint      NOT NULL DEFAULT tenure_place('', 1, NULL),
    -- (0006) Retention is the idempotency window: the job's own (from the enqueue, else its
    -- tool, else its app), stamped as prune_after by the statement that ends the job, so a
    -- pruner never applies one worker's setting to another application's jobs.
    retain_ms         bigint      NOT NULL DEFAULT 604800000
                      CHECK (retain_ms BETWEEN 1000 AND 315360000000),
    prune_after       timestamptz,
    -- (0007) The last progress the current owner reported ({"done", "total", "message",
    -- "at"}), written under the same predicate as a heartbeat. The message is the tool's
    -- own text: it stays on this row and never enters the journal. Cleared by a claim.
    progress          jsonb,
    -- (0008) The job's answered or timed-out waitpoints by name ({"approval": {"answer": ...,
    -- "timed_out": false, "at": ...}}): the claim hands them to the resumed tool.
    waitpoints        jsonb,
    -- (0010) The trace the job belongs to: the producer's span as a W3C carrier
    -- ({"traceparent": "00-...", "tracestate": "..."}), stored by enqueue with tenure.otel
    -- instrumented, NULL otherwise. The claim hands it to the worker, which continues the
    -- trace after checking it (a malformed one is ignored, never an error).
    trace_context     jsonb,
    -- (0022) The job that started this one with `ctx.enqueue` (NULL for everything else): its
    -- end takes it out of the parent's children wait (tenure_child_ended below). No foreign
    -- key: either may be pruned first.
    parent_id         bigint,
    -- (0023) The tool's (capped) lease for the current attempt when the lease follows its
    -- owner's session (tenure_sessions below): the lease then ends at
    -- greatest(lease_until, the session's beat_at + lease_ms) (tenure_lease_end). NULL: the
    -- lease is lease_until alone, extended row by row (claimed before 0023, or frozen).
    lease_ms          integer     CHECK (lease_ms > 0),
    CONSTRAINT running_has_lease
        CHECK (state <> 'running' OR (owner IS NOT NULL AND lease_until IS NOT NULL)),
    CONSTRAINT concurrency_key_has_limit
        CHECK ((concurrency_key IS NULL) = (concurrency_limit IS NULL)),
    CONSTRAINT held_jobs_have_a_key CHECK (NOT held OR concurrency_key IS NOT NULL)
);

-- (0010) A trace context is a small object, whoever writes it. Added NOT VALID by its
-- migration, so that upgrading a big table scans nothing under the lock (the column was new
-- and empty); every row written since is checked all the same.
ALTER TABLE tenure_jobs ADD CONSTRAINT tenure_jobs_trace_context_check
    CHECK (trace_context IS NULL
           OR (jsonb_typeof(trace_context) = 'object' AND octet_length(trace_context::text) <= 1024))
    NOT VALID;

-- The claim: queued rows in pick order. Partial, so finished rows never slow it down (a
-- claim over `state = 'queued' OR expired` walked every finished row). `held` leads, so the
-- ordinary claim reads the `held = false` part and a backlog of keyed jobs waiting for their
-- limit never lies in its way; admission reads the `held = true` part. Ordered by place in
-- line; run_after last, so the claim steps over jobs not yet due inside the index instead of
-- fetching each from the heap. One index, not several partial ones: the planner weighs every
-- partial index on tenure_jobs for each statement, and the claim is planned on every call.
CREATE INDEX tenure_jobs_queued ON tenure_jobs (held, priority DESC, position, id, run_after)
    WHERE state = 'queued';

-- Expired leases (the claim's reclaim branch, the rescuer, an idle worker's next expiry).
-- Plain, not partial: a partial one, with statistics gathered while nothing ran, was measured
-- to poison the by-id heartbeat and commit plans. lease_until is NULL outside 'running', so
-- it stays small.
CREATE INDEX tenure_jobs_lease_until ON tenure_jobs (lease_until);

-- A tenant's queued jobs in line order: its last place (where its next job goes) and its
-- queued count (its quota).
CREATE INDEX tenure_jobs_tenant_queued ON tenure_jobs (tenant, position)
    WHERE state = 'queued';

-- (0011) Jobs enqueued per minute for the queue charts: a range scan over the window. It
-- holds no running job, so a claim and a heartbeat (non-HOT updates) add nothing to it;
-- running jobs are counted through tenure_jobs_lease_until. `created_at > '-infinity'` keeps
-- the planner from taking it for statements that only say `state <> 'running'`.
CREATE INDEX tenure_jobs_created ON tenure_jobs (created_at, id)
    WHERE state <> 'running' AND created_at > '-infinity';

-- Idempotency keys belong to their tenant: two tenants may use the same key for different
-- calls and never see each other's job. Pipeline stages keep their keys in tenant ''.
CREATE UNIQUE INDEX tenure_jobs_tenant_key ON tenure_jobs (tenant, idempotency_key);

-- (0023) A stale session's running jobs (the reaper's walk). Partial on `lease_ms IS NOT NULL`,
-- a predicate no by-id statement states, so the planner can never take it for one.
CREATE INDEX tenure_jobs_session_leases ON tenure_jobs (owner)
    WHERE state = 'running' AND lease_ms IS NOT NULL;

-- (0023) Leases of their own row that ran out (the claim's reclaim branch, the rescuer):
-- never the session leases, whose lease_until is only where the claim put it.
CREATE INDEX tenure_jobs_row_leases ON tenure_jobs (lease_until)
    WHERE state = 'running' AND lease_ms IS NULL;

-- (0022) A run's children, for the run page; only children are in it.
CREATE INDEX tenure_jobs_parent ON tenure_jobs (parent_id) WHERE parent_id IS NOT NULL;

-- The job pruner walks each of its tools' expired jobs in prune_after order.
CREATE INDEX tenure_jobs_prune ON tenure_jobs (tool, prune_after)
    WHERE prune_after IS NOT NULL;

-- (0013) The job explorer: newest first by (created_at, id), one index per filter (none:
-- tenure_jobs_created above, from 0011; state, tool, tenant) so that every page, first or a
-- thousand deep, is one range scan from its keyset cursor. Like tenure_jobs_created, none
-- holds a running job (a claim and every heartbeat add no entry to them; running jobs are
-- searched through tenure_jobs_lease_until), and `created_at > '-infinity'`, true of every
-- row, is stated only by the statements meant for them (the claim's queued branch was once
-- planned on _tool_created). The tenant one holds only jobs that have a tenant.
CREATE INDEX tenure_jobs_state_created ON tenure_jobs (state, created_at, id)
    WHERE state <> 'running' AND created_at > '-infinity';
CREATE INDEX tenure_jobs_tool_created ON tenure_jobs (tool, created_at, id)
    WHERE state <> 'running' AND created_at > '-infinity';
CREATE INDEX tenure_jobs_tenant_created ON tenure_jobs (tenant, created_at, id)
    WHERE tenant <> '' AND state <> 'running' AND created_at > '-infinity';

-- One notification on channel tenure_jobs per enqueueing statement wakes idle workers; the
-- payload is empty (workers claim whatever is due), so a bulk insert costs one NOTIFY, not
-- one per row. NOTIFY takes a global lock at commit, so an enqueue that inserted nothing (a
-- repeated idempotency key) sends none: the trigger looks at the transition table first.
CREATE FUNCTION tenure_notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted) THEN
        PERFORM pg_notify('tenure_jobs', '');
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER tenure_jobs_notify AFTER INSERT ON tenure_jobs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION tenure_notify_inserted();

-- A job that goes back to the queue (a retry, a released lease, an operator's retry, an
-- answered waitpoint) wakes workers too; PostgreSQL folds identical notifications within a
-- transaction.
CREATE FUNCTION tenure_notify_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tenure_jobs', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER tenure_jobs_requeued AFTER UPDATE OF state ON tenure_jobs
    FOR EACH ROW WHEN (NEW.state = 'queued' AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION tenure_notify_queued();

-- One notification per chunk of items on p_channel, in the calling statement's transaction
-- (delivered at its commit, never for a rollback). A NOTIFY payload is at most 8,000 bytes;
-- 300 ids of up to 19 digits and a separator fit. Channels:
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


-- == Concurrency limits ======================================================================

-- Who holds a key's slots: one row per job admitted under a key. A row counts while its job is
-- running with an unexpired lease; the others are swept when the key is next decided (and with
-- their jobs by the job pruner). A table of its own, so the jobs table needs no extra index to
-- count a key's running jobs. No foreign key: the pruner deletes both in one statement.
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
-- under a fresh snapshot before it is admitted. Candidates come in the claim's own order.
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


-- == The journal =============================================================================

-- The technical journal: what an operator needs at 02:00 (who held which token, when its
-- lease was last confirmed, what it sent), and nothing private: ids, tokens, codes and
-- durations, never payloads, results or a tool's text. No foreign key to the job: the
-- journal keeps its own retention and outlives pruned jobs.
CREATE TABLE tenure_events (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind          text        NOT NULL,
    job_id        bigint,
    token         bigint,
    attempt       integer,
    worker        text,
    tool          text,
    detail        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- (0002) The error code, the reason a lease was lost, or a fence decision.
    code          text,
    -- What it measures depends on the kind (README, "Events"; _observe/_events.py).
    duration_ms   bigint,
    -- Copied from the job, so a journal that outlives its jobs still has it.
    payload_hmac  text
);

-- A job's timeline.
CREATE INDEX tenure_events_job ON tenure_events (job_id, id);

-- The journal pruner (by age) and reads of a time range.
CREATE INDEX tenure_events_at ON tenure_events (at);

-- Ownership events are rare next to claims and commits: this partial index lets the dashboard
-- and `tenure events` find the latest of them (by time, then id: 0015) without walking the
-- whole journal, and costs the claim and commit paths nothing (their rows never enter it).
CREATE INDEX tenure_events_notable ON tenure_events (at, id)
    WHERE kind IN ('lease_expired', 'heartbeat_lost', 'result_rejected', 'result_discarded',
                   'ownership_unknown', 'stale_fence_rejected', 'cancelled', 'retry_requested');


-- == Periodic schedules ======================================================================

-- The latest slot each schedule has decided (enqueued or skipped), so a slot is decided once
-- across all workers and restarts, even after its job was pruned.
CREATE TABLE tenure_schedules (
    name        text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    last_slot   timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);


-- == Pipelines ===============================================================================

-- One run of a pipeline. The graph is copied into the run when it starts, so a run never
-- depends on code deployed after it began (and a worker that does not know the pipeline by
-- name can still move it on). `context` is the input merged with every stage's result: what
-- the next stages are called with.
CREATE TABLE tenure_runs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pipeline         text        NOT NULL CHECK (length(pipeline) BETWEEN 1 AND 200),
    state            text        NOT NULL DEFAULT 'running'
                     CHECK (state IN ('running', 'succeeded', 'failed', 'cancelled')),
    idempotency_key  text        NOT NULL UNIQUE CHECK (length(idempotency_key) BETWEEN 1 AND 500),
    input            jsonb       NOT NULL,
    input_hash       text        NOT NULL,
    graph            jsonb       NOT NULL,
    context          jsonb       NOT NULL,
    result           jsonb,
    error            jsonb,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at      timestamptz
);

-- The rescuer's look for running runs without a current stage.
CREATE INDEX tenure_runs_running ON tenure_runs (id) WHERE state = 'running';

-- Made for a dashboard read of runs by last change (0003); the dashboard's pipeline_runs
-- statement now reads the newest runs by id.
CREATE INDEX tenure_runs_updated ON tenure_runs (updated_at);

-- One execution of a stage (kind 'stage'; each is a tenure job), or one outbox intent (kind
-- 'outbox': a delivery to an external system of record, written in the transition that
-- decided it). A stage is 'waiting' while a join still misses predecessors (`arrived` lists
-- those that came), 'open' while its job may still decide it, then succeeded, failed or
-- cancelled. An outbox row stays 'open' until its delivery succeeded. Tool, key and payload
-- are kept here (not only in the job) so a job that vanished can be dispatched again exactly
-- as it was. No foreign key to the job: finished jobs may be pruned while the run's history
-- stays.
CREATE TABLE tenure_run_stages (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id        bigint      NOT NULL REFERENCES tenure_runs (id) ON DELETE CASCADE,
    name          text        NOT NULL CHECK (length(name) BETWEEN 1 AND 300),
    round         integer     NOT NULL CHECK (round >= 1),
    kind          text        NOT NULL CHECK (kind IN ('stage', 'outbox')),
    state         text        NOT NULL
                  CHECK (state IN ('waiting', 'open', 'succeeded', 'failed', 'cancelled')),
    arrived       text[]      NOT NULL DEFAULT '{}',
    tool          text,
    job_key       text,
    payload       jsonb,
    payload_hash  text,
    max_attempts  integer,
    job_id        bigint,
    decision      text,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    decided_at    timestamptz,
    UNIQUE (run_id, name, round),
    CONSTRAINT open_has_job CHECK (state <> 'open' OR (tool IS NOT NULL AND job_key IS NOT NULL
                                                       AND payload IS NOT NULL))
);

-- The rescuer's look for open stages whose job ended outside a transition or vanished.
CREATE INDEX tenure_run_stages_open ON tenure_run_stages (run_id) WHERE state = 'open';

-- A stage job's idempotency key: stable per run, stage and round, so dispatching the same
-- stage again can never create a second job for it.
CREATE FUNCTION tenure_stage_key(p_run bigint, p_name text, p_round integer) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'run:' || p_run || ':' || p_name || ':' || p_round
$$;

-- Each run with its current stage(s) and every stage execution. Nothing in tenure reads this
-- view today; it is there for an operator's own queries.
CREATE VIEW tenure_pipeline_overview AS
SELECT r.id AS run_id,
       r.pipeline,
       r.state,
       (SELECT string_agg(s.name, ',' ORDER BY s.id) FROM tenure_run_stages s
        WHERE s.run_id = r.id AND s.kind = 'stage' AND s.state = 'open') AS current_stage,
       r.updated_at,
       coalesce((SELECT jsonb_agg(jsonb_build_object('stage', s.name, 'round', s.round,
                                                     'kind', s.kind, 'state', s.state,
                                                     'job_id', s.job_id) ORDER BY s.id)
                 FROM tenure_run_stages s WHERE s.run_id = r.id), '[]'::jsonb) AS stages
FROM tenure_runs r;


-- == Waitpoints ==============================================================================

-- One row per waitpoint a job opened: the job waits (state 'waiting', no lease) until an
-- answer or the deadline puts it back in the queue. The token that answers it is never
-- stored, only its SHA-256: it is a capability (a URL a person clicks, a callback a carrier
-- calls), derived by the worker from the job, the waitpoint's name and this database's secret
-- (tenure_secrets), so a call retried before it suspended hands out the same token again.
CREATE TABLE tenure_waitpoints (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      bigint      NOT NULL,
    name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    token_hash  text        NOT NULL UNIQUE CHECK (length(token_hash) = 64),
    token       bigint      NOT NULL,  -- the job's fencing token when it suspended
    state       text        NOT NULL DEFAULT 'open'
                CHECK (state IN ('open', 'answered', 'timed_out', 'cancelled')),
    on_timeout  text        NOT NULL CHECK (on_timeout IN ('resume', 'fail')),
    deadline    timestamptz NOT NULL,
    request     jsonb,                 -- what the tool asks (its own words; never journaled)
    answer      jsonb,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    closed_at   timestamptz,
    -- (0020) who may answer: 'holder' of the token (a person, a service), or the job's
    -- 'caller' (an MCP client, asked by elicitation); and its answer's JSON Schema, if declared.
    -- (0022) widened by 'nobody': a sleep or a wait for children, which no one answers.
    answered_by text        NOT NULL DEFAULT 'holder'
                CHECK (answered_by IN ('holder', 'caller', 'nobody')),
    answer_schema jsonb,
    -- (0022) What it waits for: an answer (a person, a webhook), only its deadline (a durable
    -- sleep, `ctx.sleep`) or child jobs (`ctx.wait_for`); `waiting_on`: the children that
    -- have not ended yet.
    kind        text        NOT NULL DEFAULT 'answer'
                CHECK (kind IN ('answer', 'sleep', 'children')),
    waiting_on  bigint[],
    -- (0022) Only an answer waitpoint is answered by someone; sleeps and children waits by
    -- nobody (complete_waitpoint answers kind 'answer' only).
    CONSTRAINT tenure_waitpoints_answerable CHECK ((kind = 'answer') = (answered_by <> 'nobody')),
    UNIQUE (job_id, name)
);

-- The rescuer finds expired waitpoints from here; answering goes by token_hash.
CREATE INDEX tenure_waitpoints_deadline ON tenure_waitpoints (deadline) WHERE state = 'open';

-- (0022) The backstop sweep's look at children waits (resume_children_waits).
CREATE INDEX tenure_waitpoints_children ON tenure_waitpoints (id)
    WHERE state = 'open' AND kind = 'children';

-- (0022) A child that ended leaves its parent's open children waits; the wait with no child
-- left is answered and the parent queued again (its attempt refunded, as an answer does), in
-- the ending statement's transaction, whichever statement ends the child (a commit, a
-- cancel, the rescuer, a stage transition). The waitpoint's row lock orders two children
-- ending at once; the parent's suspension (suspend_for_children) locks its children FOR SHARE
-- before deciding, so a child ending meanwhile is either seen ended there or finds the wait.
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

-- (0022) Answer one children wait whose children all ended and queue its job again, if the
-- job still waits there under the token it suspended with (the trigger above, the sweep),
-- and only before its deadline on the database's clock, like any answer; past it the
-- rescuer's expire_waitpoints ends the wait.
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

-- Secrets this database keeps for tenure: the key waitpoint tokens (and MCP task ids) are
-- derived with, drawn once by migration 0008 from PostgreSQL's strong random source.
CREATE TABLE tenure_secrets (
    name  text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO tenure_secrets (name, value)
VALUES ('waitpoint', replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));

-- (0014) Only a role that may change jobs (UPDATE on tenure_jobs) sees the key: one that
-- can only read, even every table, sees no row, so reading cannot mint a token. Row-level
-- security; the owner, superusers and BYPASSRLS roles are not subject to it.
ALTER TABLE tenure_secrets ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenure_secrets_writers ON tenure_secrets FOR SELECT
    USING (has_table_privilege('tenure_jobs'::regclass, 'UPDATE'));


-- == Steps ==================================================================================

-- (0021) Fenced steps inside a job (`ctx.step`): one row per completed step, by name, written
-- under the job's fencing token with the same predicate as a commit (record_step), so a stale
-- owner records nothing. A tool called again from the top (after a crash, a takeover or a
-- suspension) replays what it already did from here instead of doing it again. `result` is the
-- step's JSON value (the tool's own data, never journaled); `detail` is what the run page
-- shows (the kind of work, a model's usage, a tool's name, a child job), small and
-- content-free. Rows go with their job (the job pruner's delete cascades).
CREATE TABLE tenure_steps (
    job_id       bigint      NOT NULL REFERENCES tenure_jobs (id) ON DELETE CASCADE,
    name         text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    kind         text        NOT NULL DEFAULT 'step'
                 CHECK (kind IN ('step', 'model', 'tool', 'start', 'wait')),
    result       jsonb       NOT NULL,
    token        bigint      NOT NULL,
    attempt      integer     NOT NULL CHECK (attempt >= 1),
    duration_ms  bigint      NOT NULL CHECK (duration_ms >= 0),
    detail       jsonb       NOT NULL DEFAULT '{}'::jsonb
                 CHECK (jsonb_typeof(detail) = 'object' AND octet_length(detail::text) <= 2048),
    recorded_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (job_id, name)
);


-- == Workers =================================================================================

-- (0011) One row per worker process: registered at start, kept alive by its heartbeat thread
-- (folded into the lease extension, or one statement per keep-alive period when it holds
-- none), stamped `stopped_at` by a clean shutdown, deleted by the worker pruner once not seen
-- for its horizon. Readers call a worker silent after three of its own keep-alive periods
-- unseen. Leases held are counted from tenure_jobs (owner, state 'running'), not stored.
CREATE TABLE tenure_workers (
    name          text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    host          text        NOT NULL CHECK (length(host) <= 255),
    pid           integer     NOT NULL CHECK (pid >= 0),
    version       text        NOT NULL CHECK (length(version) <= 64),
    tools         text[]      NOT NULL CHECK (cardinality(tools) <= 10000),
    concurrency   integer     NOT NULL CHECK (concurrency BETWEEN 1 AND 100000),
    keepalive_ms  integer     NOT NULL CHECK (keepalive_ms BETWEEN 100 AND 3600000),
    started_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    stopped_at    timestamptz
);

-- A worker's status on the database's clock, the one definition every reader uses: stopped
-- after a clean shutdown, silent once unseen for three of its own keep-alive periods, else
-- alive. VOLATILE: it reads clock_timestamp().
CREATE FUNCTION tenure_worker_status(p_stopped_at timestamptz, p_last_seen_at timestamptz,
                                     p_keepalive_ms integer) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN p_stopped_at IS NOT NULL THEN 'stopped'
                WHEN clock_timestamp() - p_last_seen_at
                     > 3 * p_keepalive_ms * interval '1 millisecond' THEN 'silent'
                ELSE 'alive' END
$$;

-- The worker pruner's walk of rows not seen since its horizon.
CREATE INDEX tenure_workers_last_seen ON tenure_workers (last_seen_at);


-- == Sessions ================================================================================

-- (0023) One row per worker process that claimed under a session: beat_at is its last confirmed
-- beat on the database's clock, min_lease_ms the shortest lease it has given (set by its first
-- claim that takes a job, lowered by a claim of a shorter one, never raised; a session unheard
-- of for that long is stale: the claim and the rescuer look at its jobs). A beat never
-- revives a lease: the statement that moves beat_at freezes, first, every lease of the
-- process whose end has passed. Fillfactor 50: the beat is a HOT update.
CREATE TABLE tenure_sessions (
    owner        text        PRIMARY KEY CHECK (length(owner) BETWEEN 1 AND 200),
    beat_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    min_lease_ms integer     NOT NULL CHECK (min_lease_ms > 0)
) WITH (fillfactor = 50);

-- (0023) A job's lease end from its row and its owner's beat (NULL when it has no session). Plain
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
