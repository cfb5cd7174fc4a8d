#!/usr/bin/env python
"""Price the storage candidates of issue #26 against each other and pgqueuer, per statement.

    bench/.venv/bin/python bench/candidates.py [--jobs 5000] [--held 10000] [--beats 3]
                                               [--candidates A,B,C,D,E,F,G,H,pgqueuer]
                                               [--batch 100] [--connections 1]

Each candidate gets a fresh database on the same server (tenure's migrations, then the
candidate's schema from bench/candidates.sql) and one connection that plays every role but
the drain's, which runs on --connections (1) connections at once, each its own owner:

  enqueue   --jobs no-op jobs, --batch (100) per statement (the bulk enqueue)
  drain     claim --batch + fenced commit of as many until the queue is empty, measured after
            WARM_ROUNDS unmeasured rounds (the plans a long-running worker keeps)
  key       200 single enqueues of a new key, then 200 of a finished job's key (the
            idempotency window: the repeated key must return the finished job)
  beat      --held leases held by 10 owners (1,000 each), --beats heartbeat periods, each
            period one heartbeat statement per owner (the heartbeat thread's tick)

Per phase it reports, from PostgreSQL itself: WAL records and bytes (pg_walinspect over the
phase's LSN range, only records of this run's transactions or of this database's pages, so
other sessions on the server do not count), full-page images apart, B-tree leaf insertions,
heap updates and how many were HOT, buffer hits and reads (pg_stat_database, flushed), the
backend's CPU (/proc) and each statement's wall time (client side, the statement alone). A
= tenure's shipped statements (the store's queries); B-E = prototypes (candidates.sql);
pgqueuer = pgqueuer 1.6's own statements (its query builder, its schema) for the same work.
Prints figures; asserts only that each candidate kept the protocol (every job succeeded once,
every lease still live after the beats, the repeated keys found their jobs).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import psycopg.sql
from scratch import drop_database, fresh_database, proc_cpu

from tenure._store import QUERIES, migrate
from tenure._store._migrate import discover
from tenure._store._queries import parse_queries

DB = "tenure_candidates"
SQL = parse_queries((Path(__file__).parent / "candidates.sql").read_text(encoding="utf-8"))
OWNERS = [f"w{i}" for i in range(10)]
# Longer than the 15 s so that a loaded machine cannot let a lease run out between
# phases; what a heartbeat costs does not depend on it.
LEASE_MS = 120_000
# How often a session candidate's process beats (H) while it claims and commits.
SESSION_BEAT_S = 5.0
BATCH = 100
# checkpoint_timeout 5 min / H 5 s: heartbeat periods between two checkpoints.
PERIODS_PER_CHECKPOINT = 60
# Claim + commit rounds run before the drain is measured. PostgreSQL plans a prepared
# statement's first five executions for their parameters (custom plans) before it settles on
# its generic plan; a worker runs thousands of claims on one connection, so the generic plan
# is what it pays for. The custom plans can be far worse: right after ANALYZE no row is
# running, the fence (owner, state) looks like one row, and a commit of 500 was planned as a
# scan of the table joined to its 500 outcomes by a nested loop (250,000 comparisons,
# 53-72 ms where the generic plan takes 5-11 ms). Five such commits among the forty of a
# 20,000-job drain at --batch 500 doubled its commit figure (2026-12-06 stop 33).
WARM_ROUNDS = 6
# Connections that drain at once (--connections), each its own owner (and session).
CONNECTIONS = 1
LABELS = {
    "A": "A: tenure as shipped (sessions, migration 0023)",
    "B": "B: lease in a narrow table",
    "C": "C: sessions (liveness per process)",
    "D": "D: hot table + finished table",
    "E": "E: C + D",
    "F": "F: E with claims that write no index (HOT)",
    "G": "G: F, the finished row as the outcome's journal entry",
    "H": "H: G without the explorer's per-filter indexes on finished jobs",
    "pgqueuer": "pgqueuer 1.6 (its statements)",
}


@dataclass
class Phase:
    """What one phase cost, from the database's side."""

    name: str
    units: int = 0
    start_lsn: str = ""
    end_lsn: str = ""
    xids: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    wall: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    cpu_s: float = 0.0
    blks_hit: int = 0
    blks_read: int = 0
    wal: dict[str, dict[str, float]] = field(default_factory=dict)


class Runner:
    """One measuring connection on a fresh database."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        self.pid = self.one("SELECT pg_backend_pid()")
        self.dboid = self.one("SELECT oid FROM pg_database WHERE datname = current_database()")
        self.phase: Phase | None = None
        self._cpu0 = 0.0
        self._stats0 = (0, 0)
        # The backends whose CPU a phase counts: this one, or the drainers' (drain()).
        self.cpu_pids = [self.pid]

    def one(self, statement: Any, params: Any = None) -> Any:
        row = self.conn.execute(statement, params).fetchone()
        assert row is not None
        return row[0]

    def _db_stats(self) -> tuple[int, int]:
        self.conn.execute("SELECT pg_stat_force_next_flush()")
        self.conn.execute("SELECT pg_stat_clear_snapshot()")
        row = self.conn.execute(
            "SELECT blks_hit, blks_read FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def begin(self, name: str, units: int) -> Phase:
        self.phase = Phase(name, units)
        self._stats0 = self._db_stats()
        self.phase.start_lsn = str(self.one("SELECT pg_current_wal_insert_lsn()"))
        self._cpu0 = sum(proc_cpu(pid) for pid in self.cpu_pids)
        return self.phase

    def end(self) -> Phase:
        phase = self.phase
        assert phase is not None
        phase.cpu_s = sum(proc_cpu(pid) for pid in self.cpu_pids) - self._cpu0
        phase.end_lsn = str(self.one("SELECT pg_current_wal_flush_lsn()"))
        hit, read = self._db_stats()
        phase.blks_hit, phase.blks_read = hit - self._stats0[0], read - self._stats0[1]
        self.phase = None
        self.count_wal([phase])  # now, before a CHECKPOINT recycles the segments
        return phase

    def run(self, kind: str, statement: Any, params: Any, client: bool = False) -> list[Any]:
        """One statement in a transaction of its own, its xid noted for the WAL count.
        ``client``: bind on the client (an EXECUTE of a statement PREPAREd in SQL)."""
        phase = self.phase
        with self.conn.transaction():
            xid = self.one("SELECT txid_current()")
            t = time.perf_counter()
            if client:
                cur = psycopg.ClientCursor(self.conn).execute(statement, params)
            else:
                cur = self.conn.execute(statement, params, prepare=True)
            rows = cur.fetchall() if cur.description else []
            wall = time.perf_counter() - t
        if phase is not None:
            phase.xids[kind].append(int(xid) % 2**32)
            phase.wall[kind].append(wall)
        return rows

    def count_wal(self, phases: list[Phase]) -> None:
        """Attribute WAL records to each phase's statements (by xid) and to this database's
        pages written outside a transaction (pruning, hint bits, autovacuum)."""
        pattern = f"% rel %/{self.dboid}/%"
        for phase in phases:
            by_xid = {x: kind for kind, xs in phase.xids.items() for x in xs}
            rows = self.conn.execute(
                """SELECT xid::text::bigint, resource_manager, record_type, record_length,
                          fpi_length
                   FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)
                   WHERE xid::text::bigint = ANY(%s)
                      OR (xid::text = '0' AND block_ref LIKE %s)""",
                (phase.start_lsn, phase.end_lsn, list(by_xid), pattern),
            ).fetchall()
            tally: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
            for xid, rmgr, rtype, length, fpi in rows:
                for kind in (by_xid.get(xid, "other"), "total"):
                    t = tally[kind]
                    t["records"] += 1
                    t["bytes"] += length
                    t["fpi_bytes"] += fpi
                    if rmgr == "Btree" and rtype in ("INSERT_LEAF", "INSERT_POST"):
                        t["index_inserts"] += 1
                    if rmgr == "Heap" and rtype.startswith("HOT_UPDATE"):
                        t["hot_updates"] += 1
                    if rmgr == "Heap" and rtype.startswith("UPDATE"):
                        t["updates"] += 1
                    if (rmgr == "Heap" and rtype.startswith("INSERT")) or rtype == "MULTI_INSERT":
                        t["heap_inserts"] += 1
                    if rmgr == "Heap" and rtype == "DELETE":
                        t["heap_deletes"] += 1
            phase.wal = {k: dict(v) for k, v in tally.items()}

    def close(self) -> None:
        self.conn.close()


def beat_periods(runner: Runner, held: int, beats: int, beat: Any) -> list[Phase]:
    """The first heartbeat period right after a CHECKPOINT (it pays a full-page image for every
    page it touches: what each checkpoint costs), then the others (the steady state)."""
    runner.conn.execute("CHECKPOINT")
    runner.begin("beat_first", held)
    beat()
    first = runner.end()
    runner.begin("beat", held * (beats - 1))
    for _ in range(beats - 1):
        beat()
    return [first, runner.end()]


def drain_owners() -> list[str]:
    """The drain's owners, one per connection (the first keeps the single drain's name)."""
    return ["drain", *(f"drain{k}" for k in range(1, CONNECTIONS))]


def drain(
    runner: Runner,
    dsn: str,
    jobs: int,
    one_round: Callable[[Runner, str], int],
    prepare: Callable[[Runner], None] | None = None,
) -> Phase:
    """Drain the queue over CONNECTIONS connections at once, each in a thread of its own under
    its own owner: WARM_ROUNDS unmeasured rounds on each, then the rest measured together (the
    drainers' backends' CPU; WAL by their transactions' xids). ``one_round`` claims and
    commits once and says how many jobs it finished (0: the queue is empty)."""
    drainers = [Runner(dsn) for _ in range(CONNECTIONS)]
    owners = drain_owners()
    warm = [0] * CONNECTIONS
    warmed = threading.Barrier(CONNECTIONS + 1)
    go = threading.Barrier(CONNECTIONS + 1)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            if prepare is not None:
                prepare(drainers[k])
            for _ in range(WARM_ROUNDS):
                warm[k] += one_round(drainers[k], owners[k])
        except BaseException as exc:
            errors.append(exc)
        try:
            warmed.wait()
            go.wait()
        except threading.BrokenBarrierError:
            return  # the measuring thread gave up (it raised)
        try:
            while not errors and one_round(drainers[k], owners[k]):
                pass
        except BaseException as exc:
            errors.append(exc)

    def flush() -> None:
        """Each backend reports its buffer counts to pg_stat_database when it next goes idle,
        at most once a second unless forced: force it, so each phase counts its own."""
        for d in drainers:
            d.conn.execute("SELECT pg_stat_force_next_flush()")
            d.conn.execute("SELECT 1")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(CONNECTIONS)]
    try:
        for t in threads:
            t.start()
        warmed.wait()
        assert sum(warm) < jobs, f"--jobs must exceed {WARM_ROUNDS} claims per connection"
        flush()
        runner.cpu_pids = [d.pid for d in drainers]
        phase = runner.begin("drain", jobs - sum(warm))
        for d in drainers:
            d.phase = phase
        go.wait()
        for t in threads:
            t.join()
        flush()
        runner.end()
    except BaseException:
        warmed.abort()
        go.abort()
        raise
    finally:
        for t in threads:
            if t.is_alive():
                t.join()
        runner.cpu_pids = [runner.pid]
        for d in drainers:
            d.close()
    if errors:
        raise errors[0]
    return phase


# -- tenure candidates --------------------------------------------------------------------------

SESSIONS = {"C", "E", "F", "G", "H"}
HOT_TABLE = {"D", "E", "F", "G", "H"}


def statements(cand: str) -> dict[str, Any]:
    """The candidate's claim / heartbeat / commit / enqueue statements by role."""
    if cand == "A":
        return {
            "claim": QUERIES["claim" if BATCH <= 100 else "claim_large"],
            "extend": QUERIES["extend_leases"],
            "finish": QUERIES["finish_many"],
            "enqueue_many": QUERIES["enqueue_many"],
            "enqueue": QUERIES["enqueue"],
            "by_key": QUERIES["job_by_key"],
        }
    # F, G, H: E's statements on their own indexes (f_claim); G, H journal no outcome row.
    low = "e" if cand in ("F", "G", "H") else cand.lower()
    base = "d" if cand in HOT_TABLE else "a"
    found = {
        "claim": f_claim() if cand in ("F", "G", "H") else SQL[f"{low}_claim"],
        "finish": g_finish() if cand in ("G", "H") else SQL[f"{low}_finish"],
        "extend": SQL["c_beat"] if cand in SESSIONS else SQL.get(f"{low}_extend"),
        "enqueue_many": SQL["d_enqueue_many"] if base == "d" else QUERIES["enqueue_many"],
        "enqueue": SQL["d_enqueue"] if base == "d" else QUERIES["enqueue"],
        "by_key": SQL["d_job_by_key"] if base == "d" else QUERIES["job_by_key"],
    }
    return found


def f_claim() -> str:
    """E's claim with its queued branch bounded by a constant, as tenure's own claim is, so
    that PostgreSQL keeps one generic plan (the drain's claims are of 100), and F's own
    expired branch (no owner index: a scan, gated on a stale session)."""
    bound = "ORDER BY j.priority DESC, j.position, j.id\n    LIMIT %(limit)s\n"
    claim: str = SQL["e_claim"]
    start, end = claim.index("), expired AS ("), claim.index("), frozen AS (")
    assert claim.count(bound) == 1, "e_claim's queued branch moved; update f_claim"
    claim = claim[:start] + SQL["f_expired"] + claim[end + len("), frozen AS (") :]
    return claim.replace(bound, bound.replace("%(limit)s", str(BATCH)))


def g_finish() -> str:
    """E's commit without its journal row: the finished row (owner, token, attempt, claim and
    finish times) is the outcome's record; the claim's journal row stays (the token audit)."""
    finish: str = SQL["e_finish"]
    start, end = finish.index("), journal AS ("), finish.index("), notified AS (")
    return finish[:start] + finish[end:]


def setup(runner: Runner, cand: str) -> None:
    conn = runner.conn
    if cand in ("F", "G", "H"):  # E's schema, its claim indexes replaced (f_schema)
        conn.execute(SQL["e_schema"])
        conn.execute(SQL["f_schema"])
    elif cand != "A":
        conn.execute(SQL[f"{cand.lower()}_schema"])
    if cand == "H":  # the explorer's filters would scan the finished jobs by time instead
        conn.execute(
            "DROP INDEX tenure_done_state_created, tenure_done_tool_created,"
            " tenure_done_tenant_created"
        )
    if cand in HOT_TABLE:
        # tenure_place over the hot table: the same function with the table renamed.
        body = runner.one("SELECT pg_get_functiondef('tenure_place'::regproc)")
        conn.execute(
            body.replace("tenure_place", "cand_place").replace("tenure_jobs", "tenure_queue")
        )
    if cand in SESSIONS:
        for owner in [*OWNERS, *drain_owners()]:
            conn.execute(SQL["c_open"], {"owner": owner, "lease_ms": LEASE_MS})


def enqueue_params(keys: list[str]) -> dict[str, Any]:
    n = len(keys)
    return {
        "tenant": "",
        "quota": None,
        "tools": ["noop"] * n,
        "keys": keys,
        "payloads": ["{}"] * n,
        "payload_hashes": ["h"] * n,
        "max_attempts": [3] * n,
        "priorities": [0] * n,
        "payload_hmacs": [None] * n,
        "concurrency_keys": [None] * n,
        "concurrency_limits": [None] * n,
        "retains_ms": [604_800_000] * n,
        "trace_context": None,
    }


def claim_params(owner: str, limit: int) -> dict[str, Any]:
    return {"owner": owner, "tools": ["noop"], "lease_ms": [LEASE_MS], "limit": limit}


def finish_params(owner: str, rows: list[Any]) -> dict[str, Any]:
    n = len(rows)
    return {
        "owner": owner,
        "ids": [r[0] for r in rows],
        "tokens": [r[2] for r in rows],
        "states": ["succeeded"] * n,
        "results": ["null"] * n,
        "errors": [None] * n,
        "delays_ms": [0] * n,
        "attempt_refunds": [0] * n,
        "progress": [None] * n,
    }


def bulk_enqueue(runner: Runner, stmt: Any, prefix: str, count: int) -> None:
    for start in range(0, count, BATCH):
        keys = [f"{prefix}{i}" for i in range(start, min(count, start + BATCH))]
        runner.run("enqueue", stmt, enqueue_params(keys))


def migrate_before_sessions(dsn: str) -> None:
    """The prototypes (candidates.sql) were written against the schema before sessions
    landed (migration 0023): B-E start from there, A from tenure as shipped."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE tenure_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in discover("tenure._store.migrations"):
            if migration.version >= 23:
                break
            with conn.transaction():
                conn.execute(psycopg.sql.SQL(migration.statements))  # type: ignore[arg-type]


def measure_tenure(cand: str, jobs: int, held: int, beats: int) -> list[Phase]:
    dsn = fresh_database(DB)
    if cand == "A":
        migrate(dsn)
    else:
        migrate_before_sessions(dsn)
    runner = Runner(dsn)
    try:
        setup(runner, cand)
        st = statements(cand)
        table = "tenure_done" if cand in HOT_TABLE else "tenure_jobs"
        phases = []

        phases.append(runner.begin("enqueue", jobs))
        bulk_enqueue(runner, st["enqueue_many"], "k", jobs)
        phases.append(runner.end())
        runner.conn.execute("ANALYZE")

        last_beat: dict[str, float] = {}

        def keep_alive(owner: str, on: Runner = runner) -> None:
            """A session process beats every H whatever else it does (counted in the phase)."""
            if cand in SESSIONS and time.monotonic() - last_beat.get(owner, 0.0) > SESSION_BEAT_S:
                got = on.run("session_beat", SQL["c_beat"], {"owner": owner})
                assert len(got) == 1, f"{cand}: the session {owner} was lost"
                last_beat[owner] = time.monotonic()

        def one_round(on: Runner, owner: str) -> int:
            keep_alive(owner, on)
            rows = on.run("claim", st["claim"], claim_params(owner, BATCH))
            if rows:
                out = on.run("commit", st["finish"], finish_params(owner, rows))
                assert all(r[1] for r in out), f"{cand}: a fenced commit was refused"
            return len(rows)

        phases.append(drain(runner, dsn, jobs, one_round))
        ok = runner.one(f"SELECT count(*) FROM {table} WHERE state = 'succeeded'")
        assert ok == jobs, (cand, ok)

        runner.begin("key", 400)
        for i in range(200):
            params = {
                "tool": "noop",
                "key": f"n{i}",
                "payload": "{}",
                "payload_hash": "h",
                "max_attempts": 3,
                "priority": 0,
                "delay_ms": 0,
                "payload_hmac": None,
                "concurrency_key": None,
                "concurrency_limit": None,
                "tenant": "",
                "quota": None,
                "retain_ms": 604_800_000,
                "trace_context": None,
                "parent_id": None,
            }
            assert runner.run("new_key", st["enqueue"], params), "a new key made no job"
        for i in range(200):
            params = {**params, "key": f"k{i}"}
            t = time.perf_counter()
            assert not runner.run("repeat_key", st["enqueue"], params)
            found = runner.run("repeat_key_read", st["by_key"], {"tenant": "", "key": f"k{i}"})
            runner.phase.wall["repeat_key_total"].append(time.perf_counter() - t)  # type: ignore[union-attr]
            assert found and found[0][0] is False, f"{cand}: a repeated key lost its job"
        phases.append(runner.end())

        # Held leases: claimed by 10 owners, then `beats` heartbeat periods.
        per_owner = held // len(OWNERS)
        bulk_enqueue(runner, st["enqueue_many"], "h", held)
        runner.conn.execute("ANALYZE")
        if cand in SESSIONS:  # sessions of processes that start now
            runner.conn.execute("UPDATE tenure_sessions SET beat_at = clock_timestamp()")
        holdings: dict[str, list[Any]] = {}
        for owner in OWNERS:
            holdings[owner] = []
            while len(holdings[owner]) < per_owner:
                for other in OWNERS:
                    keep_alive(other)
                limit = min(1000, per_owner - len(holdings[owner]))
                got = runner.run("hold_claim", st["claim"], claim_params(owner, limit))
                assert got, f"{cand}: nothing left to hold"
                holdings[owner] += got

        runner.conn.execute("ANALYZE")  # as autovacuum would, once this many leases are held

        def beat() -> None:
            for owner in OWNERS:
                if cand in SESSIONS:
                    got = runner.run("beat", st["extend"], {"owner": owner})
                    assert len(got) == 1, f"{cand}: a session beat was refused"
                else:
                    rows = holdings[owner]
                    got = runner.run(
                        "beat",
                        st["extend"],
                        {
                            "owner": owner,
                            "ids": [r[0] for r in rows],
                            "tokens": [r[2] for r in rows],
                            "lease_ms": [LEASE_MS] * len(rows),
                            "kept": [],
                            "freeze_unnamed": True,
                        },
                    )
                    assert all(r[1] is not None for r in got), f"{cand}: a lease was lost"

        phases += beat_periods(runner, held, beats, beat)
        return phases
    finally:
        runner.close()
        drop_database(DB)


# -- pgqueuer -----------------------------------------------------------------------------------


def pgq_dollar(query: str) -> tuple[str, int]:
    """pgqueuer writes $1..$n; psycopg's PREPARE/EXECUTE takes them as they are."""
    import re

    return query, max((int(n) for n in re.findall(r"\$(\d+)", query)), default=0)


def measure_pgqueuer(jobs: int, held: int, beats: int) -> list[Phase]:
    from pgqueuer.adapters.persistence import qb

    env = qb.QueryBuilderEnvironment()
    queue = qb.QueryQueueBuilder()
    dsn = fresh_database(DB)
    runner = Runner(dsn)
    try:
        runner.conn.execute(env.build_install_query())
        qm = uuid.uuid4()
        dequeue = queue.build_dequeue_query(
            batch_size=BATCH,
            entrypoints=["noop"],
            concurrency_limits=[0],
            queue_manager_id=qm,
            global_concurrency_limit=None,
            heartbeat_timeout=datetime.timedelta(seconds=LEASE_MS // 1000),
        )
        prepared = {
            "enqueue": queue.build_enqueue_query("raise"),
            "dequeue": dequeue.sql.rstrip().rstrip(";"),
            "log": queue.build_log_job_query(),
            "heartbeat": queue.build_update_heartbeat_query(),
        }

        def prepare(on: Runner) -> None:
            for name, text in prepared.items():
                on.conn.execute(f"PREPARE pgq_{name} AS {text}")  # type: ignore[arg-type]

        prepare(runner)

        def enqueue(prefix: str, count: int) -> None:
            for start in range(0, count, BATCH):
                n = min(count, start + BATCH) - start
                keys = [f"{prefix}{i}" for i in range(start, start + n)]
                runner.run(
                    "enqueue",
                    "EXECUTE pgq_enqueue(%s::int[], %s::text[], %s::bytea[], %s::interval[],"
                    " %s::text[], %s::jsonb[])",
                    (
                        [0] * n,
                        ["noop"] * n,
                        [b""] * n,
                        [datetime.timedelta(0)] * n,
                        keys,
                        [None] * n,
                    ),
                    client=True,
                )

        def dequeue_rows(limit: int, on: Runner = runner, manager: uuid.UUID = qm) -> list[Any]:
            return on.run(
                "claim",
                "EXECUTE pgq_dequeue(%s, %s::text[], %s::uuid, %s::interval)",
                (limit, ["noop"], manager, datetime.timedelta(seconds=LEASE_MS // 1000)),
                client=True,
            )

        managers = {owner: uuid.uuid4() for owner in drain_owners()}

        def one_round(on: Runner, owner: str) -> int:
            rows = dequeue_rows(BATCH, on, managers[owner])
            if rows:
                ids = [r[0] for r in rows]
                on.run(
                    "commit",
                    "EXECUTE pgq_log(%s::bigint[], %s::pgqueuer_status[], %s::jsonb[])",
                    (ids, ["successful"] * len(ids), [None] * len(ids)),
                    client=True,
                )
            return len(rows)

        phases = []
        phases.append(runner.begin("enqueue", jobs))
        enqueue("k", jobs)
        phases.append(runner.end())
        runner.conn.execute("ANALYZE")
        phases.append(drain(runner, dsn, jobs, one_round, prepare))
        left = runner.one("SELECT count(*) FROM pgqueuer")
        assert left == 0, ("pgqueuer", left)

        enqueue("h", held)
        runner.conn.execute("ANALYZE")
        per_owner = held // len(OWNERS)
        holdings = []
        for _ in OWNERS:
            got: list[Any] = []
            while len(got) < per_owner:
                got += runner.run(
                    "hold_claim",
                    "EXECUTE pgq_dequeue(%s, %s::text[], %s::uuid, %s::interval)",
                    (
                        min(BATCH, per_owner - len(got)),
                        ["noop"],
                        qm,
                        datetime.timedelta(seconds=LEASE_MS // 1000),
                    ),
                    client=True,
                )
            holdings.append([r[0] for r in got])
        runner.conn.execute("ANALYZE")

        def beat() -> None:
            for ids in holdings:
                runner.run("beat", "EXECUTE pgq_heartbeat(%s::bigint[])", (ids,), client=True)

        phases += beat_periods(runner, held, beats, beat)
        return phases
    finally:
        runner.close()
        drop_database(DB)


# -- report -------------------------------------------------------------------------------------


def per_unit(phase: Phase, kind: str, key: str) -> float:
    return phase.wal.get(kind, {}).get(key, 0.0) / max(1, phase.units)


def median_us(phase: Phase, kind: str) -> float:
    walls = phase.wall.get(kind, [])
    return 1e6 * statistics.median(walls) if walls else float("nan")


def report(results: dict[str, list[Phase]], args: argparse.Namespace) -> str:
    out = []
    out.append(
        f"{args.jobs:,} jobs (claim {BATCH} + commit {BATCH} per round trip, enqueue "
        f"{BATCH} per statement); {args.held:,} leases held by 10 owners, "
        f"{args.beats} heartbeat periods; the drain on {CONNECTIONS} connection(s) at once, "
        "every other phase on one; same server, same run.\n"
    )
    out.append("Per job (enqueue + claim + commit):\n")
    out.append(
        "| candidate | WAL records | WAL bytes | of which FPI | B-tree inserts | "
        "heap updates (HOT) | buffer hits | PG CPU µs | of which the drain's |"
        " claim µs (p50 stmt / batch) | commit µs (p50 stmt / batch) |"
    )
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cand, phases in results.items():
        p = {ph.name: ph for ph in phases}
        enq, drained = p["enqueue"], p["drain"]
        rec = per_unit(enq, "total", "records") + per_unit(drained, "total", "records")
        byt = per_unit(enq, "total", "bytes") + per_unit(drained, "total", "bytes")
        fpi = per_unit(enq, "total", "fpi_bytes") + per_unit(drained, "total", "fpi_bytes")
        idx = per_unit(enq, "total", "index_inserts") + per_unit(drained, "total", "index_inserts")
        upd = per_unit(drained, "total", "updates") + per_unit(drained, "total", "hot_updates")
        hot = per_unit(drained, "total", "hot_updates")
        hits = enq.blks_hit / enq.units + drained.blks_hit / drained.units
        drain_cpu = 1e6 * drained.cpu_s / drained.units
        cpu = 1e6 * enq.cpu_s / enq.units + drain_cpu
        out.append(
            f"| {LABELS[cand]} | {rec:.1f} | {byt:,.0f} | {fpi:,.0f} | {idx:.1f} | "
            f"{upd:.2f} ({hot:.2f}) | {hits:.1f} | {cpu:.1f} | {drain_cpu:.1f} | "
            f"{median_us(drained, 'claim') / BATCH:.1f} | "
            f"{median_us(drained, 'commit') / BATCH:.1f} |"
        )
    out.append("\nPer statement kind, per job (drain):\n")
    out.append(
        "| candidate | claim WAL B | claim idx | commit WAL B | commit idx | "
        "enqueue WAL B | enqueue idx |"
    )
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for cand, phases in results.items():
        p = {ph.name: ph for ph in phases}
        d, e = p["drain"], p["enqueue"]
        out.append(
            f"| {LABELS[cand]} | {per_unit(d, 'claim', 'bytes'):,.0f} | "
            f"{per_unit(d, 'claim', 'index_inserts'):.1f} | {per_unit(d, 'commit', 'bytes'):,.0f}"
            f" | {per_unit(d, 'commit', 'index_inserts'):.1f} | "
            f"{per_unit(e, 'enqueue', 'bytes'):,.0f} | "
            f"{per_unit(e, 'enqueue', 'index_inserts'):.1f} |"
        )
    out.append("\nPer held lease per heartbeat period (H = 5 s, so 720 periods an hour):\n")
    out.append(
        "| candidate | WAL records | WAL bytes | of which FPI (1 per page per checkpoint) |"
        " heap updates (HOT) | buffer hits | PG CPU µs | beat stmt µs (p50) |"
        " WAL MB/s at 100k leases, H 5 s | PG % of a core at 100k |"
        " WAL kB per lease-hour | PG CPU ms per lease-hour |"
    )
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cand, phases in results.items():
        b = {ph.name: ph for ph in phases}["beat"]
        first = {ph.name: ph for ph in phases}["beat_first"]
        # Steady state: the periods after the first, plus the first period's full-page images
        # spread over the periods of one checkpoint_timeout (every page a heartbeat touches is
        # imaged once per checkpoint).
        fpi = per_unit(first, "total", "fpi_bytes") / PERIODS_PER_CHECKPOINT
        byt = per_unit(b, "total", "bytes") - per_unit(b, "total", "fpi_bytes") + fpi
        cpu = 1e6 * b.cpu_s / b.units
        out.append(
            f"| {LABELS[cand]} | {per_unit(b, 'total', 'records'):.3f} | {byt:,.1f} | "
            f"{fpi:,.1f} | "
            f"{per_unit(b, 'total', 'updates') + per_unit(b, 'total', 'hot_updates'):.3f} "
            f"({per_unit(b, 'total', 'hot_updates'):.3f}) | {b.blks_hit / b.units:.2f} | "
            f"{cpu:.2f} | {median_us(b, 'beat'):,.0f} | "
            f"{byt * 100_000 / 5 / 1e6:.3f} | {cpu * 100_000 / 5 / 1e4:.2f} | "
            f"{byt * 720 / 1e3:,.1f} | {cpu * 720 / 1e3:.2f} |"
        )
    out.append("\nThe idempotency window (tenure candidates): a single enqueue, µs p50\n")
    out.append(
        "| candidate | new key | repeated key of a finished job (enqueue + read) | "
        "WAL B per new key |"
    )
    out.append("|---|---:|---:|---:|")
    for cand, phases in results.items():
        p = {ph.name: ph for ph in phases}
        if "key" not in p:
            continue
        k = p["key"]
        out.append(
            f"| {LABELS[cand]} | {median_us(k, 'new_key'):,.0f} | "
            f"{median_us(k, 'repeat_key_total'):,.0f} | "
            f"{k.wal.get('new_key', {}).get('bytes', 0) / 200:,.0f} |"
        )
    return "\n".join(out)


def main() -> None:
    global BATCH, CONNECTIONS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--held", type=int, default=10_000)
    parser.add_argument("--beats", type=int, default=4, help="heartbeat periods (>= 2)")
    parser.add_argument("--candidates", default="A,B,C,D,E,F,G,H,pgqueuer")
    parser.add_argument(
        "--connections",
        type=int,
        default=CONNECTIONS,
        help="connections that drain at once, each its own owner (1)",
    )
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument(
        "--batch", type=int, default=BATCH, help="jobs per claim, commit and bulk enqueue"
    )
    args = parser.parse_args()
    if not 1 <= args.batch <= 1000:
        parser.error("--batch must be 1 to 1000 (tenure's largest claim)")
    BATCH = args.batch
    if not 1 <= args.connections <= 16:
        parser.error("--connections must be 1 to 16")
    CONNECTIONS = args.connections
    results: dict[str, list[Phase]] = {}
    for cand in [c for c in args.candidates.split(",") if c]:
        if cand == "pgqueuer":
            results[cand] = measure_pgqueuer(args.jobs, args.held, args.beats)
        else:
            results[cand] = measure_tenure(cand, args.jobs, args.held, args.beats)
        print(f"measured {cand}", flush=True)
    text = report(results, args)
    print(text)
    if args.json:
        raw = {
            c: [{k: v for k, v in vars(ph).items() if k not in ("xids",)} for ph in phases]
            for c, phases in results.items()
        }
        args.json.write_text(json.dumps(raw, indent=1, default=str))


if __name__ == "__main__":
    main()
