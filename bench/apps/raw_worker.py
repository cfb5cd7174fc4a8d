"""The raw-SQL ceiling: tenure's lease protocol with nothing around it.

One process, one connection, a loop of two statements: claim up to ``--batch``
rows (expired leases first, then queued, each ``FOR UPDATE SKIP LOCKED``; new
owner, a fencing token from one global sequence, a lease on the database's
clock) and one batched conditional commit (``owner + token + state +
lease_until > clock_timestamp()`` per row). No journal, no heartbeat thread, no
event loop: the ceiling a Python client of this protocol can reach on this
server. Idle, it waits on LISTEN. Runs against ``raw_jobs``, a copy of
``tenure_jobs`` (same columns, constraints and indexes, no triggers).
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

COMMIT = """
UPDATE raw_jobs j
SET state = 'succeeded', result = 'null'::jsonb, lease_until = NULL,
    finished_at = clock_timestamp(), updated_at = clock_timestamp()
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token)
WHERE j.id = c.id AND j.token = c.token AND j.owner = %(owner)s
  AND j.state = 'running' AND j.lease_until > clock_timestamp()
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--batch", type=int, default=100)
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
    while not stopping:
        rows = conn.execute(CLAIM, params, prepare=True).fetchall()
        if not rows:
            for _ in conn.notifies(timeout=1.0, stop_after=1):
                pass
            continue
        for _id, _token, tool, payload in rows:
            if tool == "ping":
                started(payload["k"] if isinstance(payload, dict) else json.loads(payload)["k"])
        conn.execute(
            COMMIT,
            {"ids": [r[0] for r in rows], "tokens": [r[1] for r in rows], "owner": owner},
            prepare=True,
        )
    conn.close()


if __name__ == "__main__":
    main()
