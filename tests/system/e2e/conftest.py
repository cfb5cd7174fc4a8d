"""Fixtures of the end-to-end tests: tenure's schema, a receiver's own schema, real processes.

Each test gets a fresh tenure schema (``tenure_dsn``) *and* a fresh schema for
the receiver: fence scopes are ``tool-job:{job id}`` and job ids restart in
every tenure schema, so receivers must not share state across tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.apps.fence_app import build_app
from tests.integration.fence.helpers import Receivers
from tests.support.schemas import fresh_schema_dsn
from tests.support.workers import Journal, WorkerGroup, closing_app

from tenure import App

FENCE_APP = "tests.apps.fence_app:app"


@pytest.fixture
def receiver_dsn(database_dsn: str) -> str:
    """A DSN whose search_path is an empty schema; the receiver migrates it when it starts."""
    return fresh_schema_dsn(database_dsn, "r")


@pytest.fixture
def receivers(receiver_dsn: str, tmp_path: Path) -> Iterator[Receivers]:
    """Example case services on demand (real subprocesses); all stopped at the end."""
    pool = Receivers(receiver_dsn, tmp_path)
    yield pool
    pool.stop_all()


@pytest.fixture
def workers(tenure_dsn: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    """``tenure worker tests.apps.fence_app:app`` processes; all gone after the test."""
    with WorkerGroup(tenure_dsn, tmp_path, app=FENCE_APP) as group:
        yield group


@pytest.fixture
def ops(tenure_dsn: str) -> Iterator[App]:
    """The producer: the fence app's tools on this test's schema."""
    yield from closing_app(build_app(tenure_dsn))


@pytest.fixture
def journal(tenure_dsn: str) -> Journal:
    return Journal(tenure_dsn)
