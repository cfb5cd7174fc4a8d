"""Fixtures of the hostile-input tests of the `tenure` command (see cli_corpus.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from tests.integration.hostile.cli_corpus import APP_MODULE
from tests.integration.observe.observe_app import build_app
from tests.support.schemas import fresh_schema_dsn

from tenure._store import migrate


@pytest.fixture(scope="module")
def seeded_dsn(database_dsn: str) -> Iterator[str]:
    """A migrated schema holding queued, cancelled and claimed jobs and their journal rows."""
    dsn = fresh_schema_dsn(database_dsn, "hostile_cli")
    migrate(dsn)
    app = build_app(dsn)
    try:
        for n in range(3):
            job = app.sync.enqueue("echo", {"text": f"seed {n}"}, idempotency_key=f"seed-{n}")
        app.sync.cancel(job.id)
    finally:
        app.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO tenure_events (kind, job_id) VALUES ('job_claimed', 1)")
    yield dsn


@pytest.fixture(scope="module")
def cli_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where MODULE:APP resolves (the command imports from its working directory): the
    test apps, the app module the corpus names, a module that raises on import and one
    that does not parse."""
    root = Path(__file__).resolve().parents[3]
    work = tmp_path_factory.mktemp("hostile-cli")
    (work / "tests").symlink_to(root / "tests", target_is_directory=True)
    (work / "hostile_cli_app.py").write_text(APP_MODULE)
    (work / "raises_on_import.py").write_text("raise RuntimeError('imported by mistake')\n")
    (work / "broken_syntax.py").write_text("def app(:\n")
    return work
