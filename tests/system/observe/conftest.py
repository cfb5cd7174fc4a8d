"""Worker processes of the observe app, and the observability fixtures
(tests/integration/observe/conftest.py): a producer, the journal, a store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.observe.conftest import journal, ops, store  # noqa: F401 - fixtures
from tests.support.workers import WorkerGroup

APP = "tests.integration.observe.observe_app:app"


@pytest.fixture
def workers(tenure_dsn: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    """``tenure worker`` processes of the observe app; all gone after the test."""
    with WorkerGroup(tenure_dsn, tmp_path, app=APP) as group:
        yield group
