"""Fixtures for pipeline tests: effects tables, stage-app worker processes, a producer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from tests.integration.pipeline.pipeline_support import STAGE_APP, Tables
from tests.integration.pipeline.stage_app import EFFECTS_DDL, build_app
from tests.support.workers import WorkerGroup

from tenure import App


@pytest.fixture
def tables(tenure_dsn: str) -> Tables:
    with psycopg.connect(tenure_dsn, autocommit=True) as conn:
        conn.execute(EFFECTS_DDL)
    return Tables(tenure_dsn)


@pytest.fixture
def crash_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "crash"
    folder.mkdir()
    return folder


@pytest.fixture
def stage_workers(tenure_dsn: str, tmp_path: Path, tables: Tables) -> Iterator[WorkerGroup]:
    """Worker processes of the stage app; all of them are gone after the test."""
    with WorkerGroup(tenure_dsn, tmp_path, app=STAGE_APP) as group:
        yield group


@pytest.fixture
def ops(tenure_dsn: str) -> Iterator[App]:
    """The producer side: the stage app's tools and pipelines on this test's schema."""
    with contextlib.closing(build_app(tenure_dsn)) as app:
        yield app
