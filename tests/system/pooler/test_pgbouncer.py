"""Producers and workers through PgBouncer in transaction mode.

A transaction-mode pooler hands every transaction whichever server connection is
free: a statement prepared on one is unknown on the next (hence
``TENURE_PREPARED_STATEMENTS=off``), session settings do not follow the client
(hence a database of its own rather than a schema on the search_path), and LISTEN
hears nothing, so workers must find their jobs by polling. Debian's pgbouncer runs
as a real process in front of the test's PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from tests.support.servers import dsn_password, socket_owner
from tests.support.waiting import wait_until

import tenure
from tenure._store import connect_options, migrate, prepared_statements

PGBOUNCER = "/usr/sbin/pgbouncer"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def pgbouncer_dsn(server_dsn: str) -> Iterator[str]:
    """A database of its own behind a transaction-mode PgBouncer; the DSN goes through it."""
    if not os.path.exists(PGBOUNCER):
        pytest.skip(f"{PGBOUNCER} is missing: apt-get install pgbouncer (.ci/run does)")
    name = f"tenure_pgb_{secrets.token_hex(3)}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    server = conninfo_to_dict(server_dsn)
    migrate(make_conninfo(server_dsn, dbname=name))
    # Not under pytest's tmp_path: as root, pgbouncer runs as another account (`nobody`,
    # or the one that owns the server's socket dir), which cannot enter /tmp/pytest-of-root.
    root = Path(tempfile.mkdtemp(prefix="tenure-pgb-"))
    os.chmod(root, 0o777)
    port = free_port()
    user = str(server.get("user", "postgres"))
    target = f"host={server.get('host', '127.0.0.1')} port={server.get('port', 5432)} dbname={name}"
    runas = socket_owner(server_dsn, "nobody")
    (root / "users.txt").write_text(f'"{user}" "{dsn_password(server_dsn)}"\n')
    os.chmod(root / "users.txt", 0o600)
    if os.geteuid() == 0:
        shutil.chown(root / "users.txt", runas)
    (root / "pgbouncer.ini").write_text(
        f"[databases]\n{name} = {target}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {root / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 4\n"
        f"logfile = {root / 'pgbouncer.log'}\npidfile = {root / 'pgbouncer.pid'}\n"
    )
    command = [PGBOUNCER, *(["-u", runas] if os.geteuid() == 0 else []), "pgbouncer.ini"]
    process = subprocess.Popen(command, cwd=root, stdin=subprocess.DEVNULL)
    dsn = make_conninfo(host="127.0.0.1", port=port, user=user, dbname=name)

    def answers() -> bool:
        try:
            with psycopg.connect(dsn, connect_timeout=2, prepare_threshold=None) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.OperationalError:
            return False

    try:
        wait_until(answers, timeout=15, message="pgbouncer never answered")
        yield dsn
    finally:
        process.terminate()
        process.wait(10)
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        shutil.rmtree(root, ignore_errors=True)


def build_app(dsn: str) -> tenure.App:
    app = tenure.App(dsn, migrate=False)
    app.limit("account:*", 1)
    app.quota("*", 1_000)

    @app.tool(lease=4, heartbeat=0.5, jitter=0.5, missed_beats=2)
    async def quick(ctx: tenure.Context, n: int) -> int:
        return n

    @app.tool(lease=4, heartbeat=0.5, jitter=0.5, missed_beats=2)
    async def slow(ctx: tenure.Context, n: int) -> int:
        await asyncio.sleep(1.5)  # three heartbeats' worth: the lease is extended meanwhile
        ctx.ensure_owned()
        return n

    @app.tool(
        lease=4,
        heartbeat=0.5,
        jitter=0.5,
        missed_beats=2,
        concurrency_key=lambda p: f"account:{p['n'] % 2}",
    )
    async def keyed(ctx: tenure.Context, n: int) -> int:
        return n

    return app


async def test_producers_and_workers_run_through_pgbouncer_in_transaction_mode(
    pgbouncer_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENURE_PREPARED_STATEMENTS", "off")
    app = build_app(pgbouncer_dsn)
    worker = app.worker(concurrency=8, claim_batch=8, poll_interval=0.2)
    running = asyncio.create_task(worker.run(handle_signals=False))
    try:
        # The worker is idle first: these jobs arrive while it waits, and LISTEN through
        # the pooler hears nothing, so only its poll can find them.
        await app.enqueue_many("quick", [{"n": i} for i in range(20)], tenant="acme")
        jobs = [await app.enqueue("slow", {"n": i}, tenant="globex") for i in range(2)]
        jobs += [await app.enqueue("keyed", {"n": i}) for i in range(4)]
        for job in jobs:
            await app.wait(job.id, timeout=60)
        everyone = await app.admin.jobs(limit=100)
        assert len(everyone) == 26 and {j.state for j in everyone} == {"succeeded"}
        for job in jobs[:2]:
            done = await app.get(job.id)
            kinds = [e["kind"] for e in await app.admin.events(job.id)]
            assert kinds == ["job_claimed", "succeeded"], kinds
            assert done.heartbeat_at is not None and done.finished_at is not None
            assert done.heartbeat_at > done.created_at
    finally:
        worker.stop()
        await running
        await app.aclose()
    assert worker.counts["claimed"] == 26


def test_the_prepared_statement_setting_is_read_strictly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TENURE_PREPARED_STATEMENTS", raising=False)
    assert prepared_statements() and connect_options()["prepare_threshold"] == 0
    for value in ("off", "0", "false", "No"):
        monkeypatch.setenv("TENURE_PREPARED_STATEMENTS", value)
        assert not prepared_statements() and connect_options()["prepare_threshold"] is None
    monkeypatch.setenv("TENURE_PREPARED_STATEMENTS", "sometimes")
    with pytest.raises(tenure.ConfigError, match="on or off"):
        prepared_statements()
