"""Worker processes of the stage app, and the pipeline fixtures
(tests/integration/pipeline/conftest.py): effects tables, a producer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.pipeline.conftest import ops, tables  # noqa: F401 - fixtures
from tests.integration.pipeline.pipeline_support import STAGE_APP, Tables
from tests.support.workers import WorkerGroup


@pytest.fixture
def crash_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "crash"
    folder.mkdir()
    return folder


@pytest.fixture
def stage_workers(
    tenure_dsn: str,
    tmp_path: Path,
    tables: Tables,  # noqa: F811 - the fixture, so the effects tables exist first
) -> Iterator[WorkerGroup]:
    """Worker processes of the stage app; all of them are gone after the test."""
    with WorkerGroup(tenure_dsn, tmp_path, app=STAGE_APP) as group:
        yield group
