"""docs/operations/roles.md, run as written: the roles and grants it gives, a worker process,
a producer and the dashboard each under its own role, and the waitpoint key out of reach
of every role that can only read.

- the worker derives waitpoint tokens and the producer answers them, each under its role;
- the dashboard under the reader shows every page, and its cancel and webhook change
  nothing (403, a typed PermissionDenied below it);
- neither the reader (SELECT on every table) nor a pg_read_all_data analyst sees the key,
  not even through a table of its own named like the one the policy checks;
- an upgrade to migration 0014 keeps every open waitpoint answerable with the token it
  handed out before.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from tests.apps.wait_app import build_app
from tests.support.docs import example
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup, wait_job

import tenure
from tenure._dashboard._dashboard import create_dashboard
from tenure._errors import PermissionDenied
from tenure._observe._http import ServerThread
from tenure._payload import fingerprint
from tenure._store import MIGRATIONS_PACKAGE, Store, migrate
from tenure._store._migrate import discover
from tenure._waitpoint import derive_token, token_hash

APP = "tests.apps.wait_app:app"
ROLES = ("owner", "worker", "producer", "reader")
PAGES = (
    "/",
    "/api/overview",
    "/jobs",
    "/api/jobs",
    "/workers",
    "/api/workers",
    "/queues",
    "/api/queues",
    "/metrics",
)


@dataclass(frozen=True)
class Deployment:
    """The page's roles on a schema of their own: a DSN per role (and the analyst's)."""

    schema: str
    dsn: dict[str, str]

    def journal(self) -> Journal:
        return Journal(self.dsn["owner"])


def role_dsn(database_dsn: str, user: str, password: str, schema: str) -> str:
    params = conninfo_to_dict(database_dsn)
    params.update(user=user, password=password, options=f"-c search_path={schema}")
    return make_conninfo(**params)  # type: ignore[arg-type]


@pytest.fixture
def deployment(database_dsn: str) -> Iterator[Deployment]:
    tag = secrets.token_hex(4)
    names = {role: f"tr_{tag}_{role}" for role in ROLES}
    schema = f"ts_{tag}"
    analyst = f"tr_{tag}_analyst"

    def here(sql: str) -> str:
        """The page's SQL for this test's roles and schema (role names are cluster-wide)."""
        sql = re.sub(r"\btenure_(owner|worker|producer|reader)\b", lambda m: names[m[1]], sql)
        return re.sub(r"\btenure\b", schema, sql)

    with psycopg.connect(database_dsn, autocommit=True) as admin:
        admin.execute(here(example("database-roles-create").code))
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'analyst-secret'").format(
                sql.Identifier(analyst)
            )
        )
        admin.execute(sql.SQL("GRANT pg_read_all_data TO {}").format(sql.Identifier(analyst)))
    dsn = {role: role_dsn(database_dsn, names[role], f"{role}-secret", schema) for role in ROLES}
    dsn["analyst"] = role_dsn(database_dsn, analyst, "analyst-secret", schema)
    try:
        migrate(dsn["owner"])
        with psycopg.connect(dsn["owner"], autocommit=True) as owner:
            owner.execute(here(example("database-roles").code))
        yield Deployment(schema, dsn)
    finally:
        with psycopg.connect(database_dsn, autocommit=True) as admin:
            everyone = [*names.values(), analyst]
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE usename = ANY(%s) AND pid <> pg_backend_pid()",
                (everyone,),
            )
            admin.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )
            for role in everyone:
                admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def keys_seen(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM tenure_secrets").fetchone()
    assert row is not None
    return int(row[0])


def asked(notes: Path) -> dict[int, str]:
    """Job → the waitpoint token its tool handed out (the wait app's notes)."""
    lines = notes.read_text().splitlines() if notes.exists() else []
    return {int(w[1]): w[3] for w in (line.split() for line in lines) if w[0] == "asked"}


def test_each_part_runs_under_its_role_and_the_dashboard_only_reads(
    deployment: Deployment, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    journal = deployment.journal()
    with (
        WorkerGroup(deployment.dsn["worker"], tmp_path, app=APP) as workers,
        contextlib.closing(build_app(deployment.dsn["producer"])) as producer,
        contextlib.closing(build_app(deployment.dsn["reader"])) as reader,
    ):
        worker = workers.spawn("a")
        worker.wait_started()
        job = producer.sync.enqueue("wait_briefly", {"notes": str(notes), "timeout": 600})
        wait_until(lambda: job.id in asked(notes), timeout=30, message=workers.logs())
        token = asked(notes)[job.id]  # derived by the worker, under its role
        wait_job(journal, job.id, lambda j: j["state"] == "waiting", "never waited", workers)
        before = journal.job(job.id)

        server = ServerThread(create_dashboard(deployment.dsn["reader"]), "127.0.0.1", 0)
        url = server.start()
        try:
            with httpx.Client(base_url=url, timeout=30) as client:
                for page in (*PAGES, f"/jobs/{job.id}", f"/api/jobs/{job.id}"):
                    shown = client.get(page)
                    assert shown.status_code == 200, (page, shown.text[:500])
                assert "waiting" in client.get(f"/jobs/{job.id}").text
                webhook = client.post(f"/waitpoints/{token}", json={"approved": True})
                assert webhook.status_code == 403, webhook.text
                assert "only read" in webhook.json()["error"]
        finally:
            server.stop()
        with pytest.raises(PermissionDenied) as refused:  # typed, at the store
            reader.sync.cancel(job.id)
        assert isinstance(refused.value, tenure.StoreError) and refused.value.verdict == "fail"
        assert journal.job(job.id) == before  # nothing the reader did changed the job

        assert producer.sync.answer_waitpoint(token, "yes").state == "queued"
        assert producer.sync.wait(job.id, timeout=30) == "answered yes"
        assert "level=error" not in worker.log() and "Traceback" not in worker.log()


async def test_a_role_that_can_only_read_sees_no_key(deployment: Deployment) -> None:
    dsn = deployment.dsn
    assert keys_seen(dsn["worker"]) == keys_seen(dsn["producer"]) == 1
    assert keys_seen(dsn["reader"]) == keys_seen(dsn["analyst"]) == 0
    for role in ("reader", "analyst"):
        store = Store(dsn[role], max_size=1)
        await store.open()
        try:
            with pytest.raises(tenure.ConfigError, match="cannot read tenure's waitpoint key"):
                await store.waitpoint_secret()
        finally:
            await store.close()
    # The policy checks the real tenure_jobs, by identity: a reader's own table of that
    # name, first on its search path, which it may update, opens nothing.
    with psycopg.connect(dsn["reader"], autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE tenure_jobs (id bigint)")
        row = conn.execute(
            "SELECT has_table_privilege('tenure_jobs', 'UPDATE'), count(*) FROM tenure_secrets"
        ).fetchone()
        assert row == (True, 0)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE tenure_waitpoints SET state = 'answered'")
    # A dump by the analyst would have to skip the table, or fails: row security stays on.
    with (
        psycopg.connect(dsn["analyst"], autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("SET row_security = off")
        conn.execute("SELECT * FROM tenure_secrets")


def migrate_until(dsn: str, last: int) -> None:
    """The schema as it was at migration ``last`` (what an upgrade starts from)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE tenure_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for step in discover(MIGRATIONS_PACKAGE):
            if step.version <= last:
                with conn.transaction():
                    conn.execute(step.statements)
                    conn.execute(
                        "INSERT INTO tenure_migrations (version, name) VALUES (%s, %s)",
                        (step.version, step.name),
                    )


def enqueue_as_0013(dsn: str, tool: str, payload: dict[str, object]) -> int:
    """What the 0013 release's ``enqueue`` writes for a plain call: the job's row (written
    out here because today's statement names the column 0022 added, parent_id); its id."""
    text = json.dumps(payload)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO tenure_jobs (tool, idempotency_key, payload, payload_hash,"
            " max_attempts) VALUES (%s, %s, %s::jsonb, %s, 3) RETURNING id",
            (tool, f"old:{tool}", text, fingerprint(f"{tool}\n{text}")),
        ).fetchone()
    assert row is not None
    return int(row[0])


def claim_as_0013(dsn: str, job_id: int, owner: str, lease_ms: int) -> int:
    """What the 0013 release's claim writes for one queued job: the owner, a token from the
    fence sequence and a lease on the row. Written out here because today's statement names
    0023's sessions. Returns the token."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "UPDATE tenure_jobs SET state = 'running', owner = %s,"
            " token = nextval('tenure_fence_token'), attempt = attempt + 1,"
            " lease_until = clock_timestamp() + %s * interval '1 millisecond',"
            " heartbeat_at = clock_timestamp(), claimed_at = clock_timestamp(),"
            " updated_at = clock_timestamp()"
            " WHERE id = %s AND state = 'queued' RETURNING token",
            (owner, lease_ms, job_id),
        ).fetchone()
    assert row is not None
    return int(row[0])


def suspend_as_0013(dsn: str, job_id: int, token: int, hashed: str) -> None:
    """What the 0013 release's fenced suspension (statement ``suspend_job``) writes: the
    job leaves its lease for ``waiting`` and its waitpoint opens. Written out here because
    today's statement names the columns later migrations added (0020's answered_by)."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        moved = conn.execute(
            "UPDATE tenure_jobs SET state = 'waiting', lease_until = NULL,"
            " updated_at = clock_timestamp()"
            " WHERE id = %s AND token = %s AND state = 'running'"
            " AND lease_until > clock_timestamp()",
            (job_id, token),
        ).rowcount
        assert moved == 1
        conn.execute(
            "INSERT INTO tenure_waitpoints (job_id, name, token_hash, token, on_timeout,"
            " deadline, request) VALUES (%s, 'nobody', %s, %s, 'resume',"
            " clock_timestamp() + interval '10 minutes', NULL)",
            (job_id, hashed, token),
        )


async def test_an_open_waitpoint_stays_answerable_across_the_upgrade(
    database_dsn: str, tmp_path: Path
) -> None:
    """A waitpoint opened on a 0013 schema (the suspension the previous version commits),
    then 0014 applied while it waits: the token handed out before the upgrade answers it,
    a new worker resumes the call, and the key (and so every token and task id) is the
    same."""
    from tests.support.schemas import fresh_schema_dsn

    dsn = fresh_schema_dsn(database_dsn, "up")
    migrate_until(dsn, 13)
    notes = tmp_path / "notes.txt"
    producer = build_app(dsn)
    producer.auto_migrate = False  # still the old schema
    try:
        job_id = enqueue_as_0013(dsn, "wait_briefly", {"notes": str(notes), "timeout": 600})
        store = Store(dsn, max_size=2)
        await store.open()
        try:
            key = await store.waitpoint_secret()
            fence = claim_as_0013(dsn, job_id, "old-worker", 30_000)
            token = derive_token(key, job_id, "nobody")
            suspend_as_0013(dsn, job_id, fence, token_hash(token))
            upgrade = migrate(dsn)  # the upgrade, while the call waits
            assert upgrade[0] == 14, upgrade
            assert await store.waitpoint_secret() == key
            assert derive_token(await store.waitpoint_secret(), job_id, "nobody") == token
        finally:
            await store.close()
        with WorkerGroup(dsn, tmp_path, app=APP) as workers:
            workers.spawn("new").wait_started()
            assert (await producer.answer_waitpoint(token, "yes")).state == "queued"
            assert await producer.wait(job_id, timeout=30) == "answered yes"
    finally:
        await producer.aclose()
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        rls = conn.execute(
            "SELECT relrowsecurity FROM pg_class WHERE oid = 'tenure_secrets'::regclass"
        ).fetchone()
    assert rls == {"relrowsecurity": True}
