#!/usr/bin/env python
"""Storage F (issue #26) end to end: a copy of tenure whose live jobs have HOT claims.

    bench/.venv/bin/python bench/prototypes/f_storage.py DEST [F|G|H]
    bash bench/run.sh --only throughput --systems tenure,pgqueuer --tenure-src DEST

`bench/candidates.py` prices F statement by statement on bare connections; this runs it
under real workers, through `bench/run.sh`, against pgqueuer in the same run. It copies
`src/tenure` to DEST/tenure and changes only what the throughput bench's path needs:

- migration 0024: the live table keeps no index that names a column a claim writes, in its
  key or its predicate (PostgreSQL 15 makes an update HOT only then), with room on each page
  (fillfactor 45); finished jobs go to `tenure_done`, which carries the explorer's and the
  pruner's indexes and the key's uniqueness for them;
- the claim leaves `lease_until` NULL for a session lease (today's claim writes it on every
  job, and F indexes it for frozen leases), so a session lease ends at greatest(beat, claim)
  + lease_ms: every `tenure_lease_end` call reads the claim's time when the row has no
  `lease_until`;
- the fenced commit of a final outcome deletes the live row and inserts it finished, in the
  same statement and under the same fence; a retry stays an update of the live row.

G and H (candidates.py's) go further and give rules up, to show what each is worth: G
journals no outcome row for a job that ends (its row in `tenure_done` is the record; claims
and retries are still journaled), H is G without the explorer's per-filter indexes on
finished jobs.

What it does not do (a prototype, not the build): the explorer, a key's job, results and
the dashboard read only the live table; a key is not checked against finished jobs at
enqueue (the bench's keys are new); steps lose their foreign key; a child's end does not
reach its parent through the moved row. The fencing conditions are the shipped ones.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
SRC = BENCH.parent / "src" / "tenure"

MIGRATION = """\
-- Storage F (bench prototype, issue #26): HOT claims on the live table, finished jobs apart.
ALTER TABLE tenure_jobs SET (fillfactor = 45);
ALTER TABLE tenure_jobs DROP CONSTRAINT running_has_lease,
    ADD CONSTRAINT running_has_lease CHECK (state <> 'running'
        OR (owner IS NOT NULL AND (lease_until IS NOT NULL OR lease_ms IS NOT NULL)));
ALTER TABLE tenure_steps DROP CONSTRAINT tenure_steps_job_id_fkey;
DROP INDEX tenure_jobs_queued, tenure_jobs_tenant_queued, tenure_jobs_lease_until,
    tenure_jobs_session_leases, tenure_jobs_row_leases, tenure_jobs_created,
    tenure_jobs_state_created, tenure_jobs_tool_created, tenure_jobs_tenant_created;
CREATE INDEX tenure_jobs_line ON tenure_jobs (held, priority DESC, position, id, run_after);
CREATE INDEX tenure_jobs_tenant_line ON tenure_jobs (tenant, position);
CREATE INDEX tenure_jobs_frozen ON tenure_jobs (lease_until) WHERE lease_until IS NOT NULL;
-- tenure_done as candidate D has it (bench/candidates.sql), and the key's uniqueness:
{done}CREATE UNIQUE INDEX tenure_done_tenant_key ON tenure_done (tenant, idempotency_key);
"""


def done_table() -> str:
    """Candidate D's finished-jobs table and indexes (bench/candidates.sql, d_schema)."""
    sql = (BENCH / "candidates.sql").read_text(encoding="utf-8")
    d_schema = sql.split("-- name: d_schema\n")[1].split("\n-- name: ")[0].strip()
    return d_schema[d_schema.index("CREATE TABLE tenure_done") :] + "\n"


LEASE_MS = "lease_ms * interval '1 millisecond'"
SESSION = "(SELECT s.beat_at FROM tenure_sessions s WHERE s.owner = %(owner)s)"
FENCE = f"""j.id = o.id
      AND j.token = o.token
      AND j.owner = %(owner)s
      AND j.state = 'running'
      AND tenure_lease_end(coalesce(j.lease_until, j.claimed_at + j.{LEASE_MS}), j.lease_ms,
                           {SESSION}) > clock_timestamp()"""
RETRY = "o.state = 'queued' AND (o.attempt_refund <> 0 OR j.attempt < j.max_attempts)"
BEAT = f"""CASE WHEN j.lease_ms IS NULL THEN j.heartbeat_at
                            ELSE greatest(j.heartbeat_at, {SESSION}) END"""
PROGRESS = "coalesce(o.progress::jsonb || jsonb_build_object('at', clock_timestamp()), j.progress)"
COLUMNS = (
    "id, tool, state, owner, lease_until, heartbeat_at, token, attempt, max_attempts, priority,"
    " run_after, idempotency_key, payload, payload_hash, result, error, created_at, updated_at,"
    " finished_at, payload_hmac, claimed_at, concurrency_key, concurrency_limit, held, tenant,"
    " position, retain_ms, prune_after, progress, waitpoints, trace_context, parent_id, lease_ms"
)
RAN_MS = "(extract(epoch FROM clock_timestamp() - {0}claimed_at) * 1000)::bigint AS ran_ms"

# The commit's `finished` CTE: a final outcome moves the row, a retry updates it.
FINISHED = f"""), moved AS (
    DELETE FROM tenure_jobs j
    USING outcome o
    WHERE {FENCE}
      AND NOT ({RETRY})
    RETURNING j.*, CASE WHEN o.state <> 'queued' THEN o.state ELSE 'failed' END AS o_state,
              o.result AS o_result, o.error AS o_error, o.attempt_refund AS o_refund,
              {PROGRESS} AS o_progress, {BEAT} AS o_beat
), stored AS (
    INSERT INTO tenure_done ({COLUMNS})
    SELECT m.id, m.tool, m.o_state, m.owner, NULL, m.o_beat, m.token, m.attempt - m.o_refund,
           m.max_attempts, m.priority, m.run_after, m.idempotency_key, m.payload,
           m.payload_hash, m.o_result, m.o_error, m.created_at, clock_timestamp(),
           clock_timestamp(), m.payload_hmac, m.claimed_at, m.concurrency_key,
           m.concurrency_limit, m.held, m.tenant, m.position, m.retain_ms,
           clock_timestamp() + m.retain_ms * interval '1 millisecond', m.o_progress,
           m.waitpoints, m.trace_context, m.parent_id, m.lease_ms
    FROM moved m
    RETURNING id, tool, token, attempt, state, error ->> 'code' AS code, 0 AS attempt_refund,
              payload_hmac, {RAN_MS.format("")}
), requeued AS (
    UPDATE tenure_jobs j
    SET state = 'queued',
        result = o.result,
        error = o.error,
        attempt = j.attempt - o.attempt_refund,
        lease_until = NULL,
        run_after = clock_timestamp() + o.delay_ms * interval '1 millisecond',
        finished_at = NULL,
        prune_after = NULL,
        updated_at = clock_timestamp(),
        heartbeat_at = {BEAT},
        progress = {PROGRESS}
    FROM outcome o
    WHERE {FENCE}
      AND {RETRY}
    RETURNING j.id, j.tool, j.token, j.attempt, j.state, o.error ->> 'code' AS code,
              o.attempt_refund, j.payload_hmac, {RAN_MS.format("j.")}
), finished AS (
    SELECT * FROM stored UNION ALL SELECT * FROM requeued
), journal AS ("""


def block(text: str, name: str) -> tuple[int, int]:
    """Where the named query's text starts and ends in a queries file."""
    start = text.index(f"-- name: {name}\n")
    following = text.find("\n-- name: ", start + 1)
    return start, len(text) if following < 0 else following


def patch_claim(text: str) -> str:
    start, end = block(text, "claim")
    claim = text[start:end]
    written = "        lease_until = clock_timestamp() + p.lease_ms * interval '1 millisecond',\n"
    returned = "j.idempotency_key, j.lease_until, picked.previous_owner"
    assert claim.count(written) == 1 and claim.count(returned) == 1, "the claim moved"
    claim = claim.replace(
        written,
        "        lease_until = CASE WHEN EXISTS (SELECT FROM session)\n"
        "                                OR EXISTS (SELECT FROM opened) THEN NULL\n"
        "                           ELSE clock_timestamp() + p.lease_ms * interval '1 millisecond'"
        " END,\n",
    )
    claim = claim.replace(
        returned,
        f"j.idempotency_key, coalesce(j.lease_until, j.claimed_at + j.{LEASE_MS})"
        " AS lease_until, picked.previous_owner",
    )
    return text[:start] + claim + text[end:]


def patch_finish(text: str) -> str:
    start, end = block(text, "finish_many")
    finish = text[start:end]
    cut_from, cut_to = finish.index("), finished AS ("), finish.index("), journal AS (")
    finish = finish[:cut_from] + FINISHED + finish[cut_to + len("), journal AS (") :]
    return text[:start] + finish + text[end:]


def lease_end_from_claim(text: str) -> str:
    """Every lease end: a row without lease_until (a session lease) starts from its claim."""
    return re.sub(
        r"tenure_lease_end\((\w+\.)?lease_until, (\w+\.)?lease_ms,",
        lambda m: (
            f"tenure_lease_end(coalesce({m[1] or ''}lease_until, {m[1] or ''}claimed_at"
            f" + {m[1] or ''}{LEASE_MS}), {m[2] or ''}lease_ms,"
        ),
        text,
    )


def without_outcome_rows(text: str) -> str:
    """G: the commit journals retries only; a finished row is its own outcome's record."""
    start, end = block(text, "finish_many")
    finish = text[start:end]
    journaled = "    FROM finished f\n), notified AS ("
    assert finish.count(journaled) == 1, "the commit's journal moved"
    finish = finish.replace(journaled, "    FROM requeued f\n), notified AS (")
    return text[:start] + finish + text[end:]


EXPLORER_INDEXES = (
    "DROP INDEX tenure_done_state_created, tenure_done_tool_created, tenure_done_tenant_created;\n"
)


def build(dest: Path, variant: str = "F") -> None:
    target = dest / "tenure"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(SRC, target, ignore=shutil.ignore_patterns("__pycache__"))
    store = target / "_store"
    migration = MIGRATION.format(done=done_table()) + (EXPLORER_INDEXES if variant == "H" else "")
    (store / "migrations" / "0024_f_storage.sql").write_text(migration, encoding="utf-8")
    for path in sorted((store / "queries").glob("*.sql")):
        text = lease_end_from_claim(path.read_text(encoding="utf-8"))
        if path.name == "jobs.sql":
            text = patch_finish(patch_claim(text))
            if variant in ("G", "H"):
                text = without_outcome_rows(text)
        path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([], ["F"], ["G"], ["H"]):
        sys.exit(__doc__)
    chosen = sys.argv[2] if len(sys.argv) == 3 else "F"
    build(Path(sys.argv[1]), chosen)
    print(f"storage {chosen}: {Path(sys.argv[1]) / 'tenure'}")
