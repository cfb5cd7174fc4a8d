"""Worker processes of maintenance_app, and the maintenance tests' store
(tests/integration/maintenance/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.maintenance.conftest import store  # noqa: F401 - a fixture
from tests.support.workers import WorkerGroup

APP = "tests.integration.maintenance.maintenance_app:app"


@pytest.fixture
def workers(tenure_dsn: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    """Worker processes running maintenance_app on this test's schema, all gone afterwards."""
    with WorkerGroup(tenure_dsn, tmp_path, app=APP) as group:
        yield group
