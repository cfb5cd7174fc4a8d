"""The raw-SQL ceiling: tenure's lease protocol with nothing around it.

One process, one connection, a loop of two statements: claim up to ``--batch``
rows (expired leases first, then queued, each ``FOR UPDATE SKIP LOCKED``; new
owner, a fencing token from one global sequence, a lease on the database's
clock) and one batched conditional commit (``owner + token + state +
lease_until > clock_timestamp()`` per row). No journal, no heartbeat thread, no
event loop: the ceiling a Python client of this protocol can reach on this
server. Idle, it waits on LISTEN. Runs against ``raw_jobs``, a copy of
``tenure_jobs`` (same columns, constraints and indexes, no triggers).

``--journal``: the cheapest journal SQL allows for this protocol, one row per job
written by the commit statement itself (owner, token, attempt, claim-to-commit
time) into ``raw_events``, a copy of ``tenure_events`` (same indexes): what a
journal that answers "who held this job, under which token, what happened" costs
at the least.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

import psycopg

sys.path.insert(0, os.path.dirname(__file__))
from _probe import started

CLAIM = """
WITH clock AS (SELECT clock_timestamp() AS now),
expired AS (
    SELECT id FROM raw_jobs
    WHERE lease_until < (SELECT now FROM clock) AND state = 'running' AND attempt < max_attempts
    ORDER BY lease_until LIMIT %(n)s FOR UPDATE SKIP LOCKED
), queued AS (
    SELECT id FROM raw_jobs
    WHERE state = 'queued' AND run_after <= (SELECT now FROM clock)
    ORDER BY priority DESC, run_after, id LIMIT %(n)s FOR UPDATE SKIP LOCKED
), picked AS ((SELECT id FROM expired) UNION ALL (SELECT id FROM queued) LIMIT %(n)s)
UPDATE raw_jobs j
SET state = 'running', owner = %(owner)s, token = nextval('raw_fence_token'),
    attempt = j.attempt + 1, lease_until = clock_timestamp() + interval '30 seconds',
    heartbeat_at = clock_timestamp(), updated_at = clock_timestamp()
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.token, j.tool, j.payload
"""

# The claim also stamps claimed_at (the journal row's duration needs it).
CLAIM_JOURNALED = CLAIM.replace(
    "updated_at = clock_timestamp()",
    "updated_at = clock_timestamp(), claimed_at = clock_timestamp()",
)

COMMIT = """
UPDATE raw_jobs j
SET state = 'succeeded', result = 'null'::jsonb, lease_until = NULL,
    finished_at = clock_timestamp(), updated_at = clock_timestamp()
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token)
WHERE j.id = c.id AND j.token = c.token AND j.owner = %(owner)s
  AND j.state = 'running' AND j.lease_until > clock_timestamp()
"""

COMMIT_JOURNALED = (
    "WITH done AS ("
    + COMMIT
    + """    RETURNING j.id, j.token, j.attempt, j.tool, j.claimed_at
)
INSERT INTO raw_events (kind, job_id, token, attempt, worker, tool, duration_ms)
SELECT 'succeeded', d.id, d.token, d.attempt, %(owner)s, d.tool,
       (extract(epoch FROM clock_timestamp() - d.claimed_at) * 1000)::bigint
FROM done d
"""
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--journal", action="store_true", help="one journal row per job")
    args = parser.parse_args()
    owner = f"raw:{os.getpid()}"
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    conn = psycopg.connect(args.dsn, autocommit=True)
    conn.execute("LISTEN raw_jobs")
    params = {"n": args.batch, "owner": owner}
    claim, commit = (CLAIM_JOURNALED, COMMIT_JOURNALED) if args.journal else (CLAIM, COMMIT)
    while not stopping:
        rows = conn.execute(claim, params, prepare=True).fetchall()
        if not rows:
            for _ in conn.notifies(timeout=1.0, stop_after=1):
                pass
            continue
        for _id, _token, tool, payload in rows:
            if tool == "ping":
                started(payload["k"] if isinstance(payload, dict) else json.loads(payload)["k"])
        conn.execute(
            commit,
            {"ids": [r[0] for r in rows], "tokens": [r[1] for r in rows], "owner": owner},
            prepare=True,
        )
    conn.close()


if __name__ == "__main__":
    main()
