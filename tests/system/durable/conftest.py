"""Worker processes of the durable app and a producer on the same schema (the journal
fixture is the fault tests')."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.apps.durable_app import build_app
from tests.support.workers import WorkerGroup, closing_app
from tests.system.faults.conftest import journal as journal  # the fault tests' fixture

from tenure import App


@pytest.fixture
def workers(tenure_dsn: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    with WorkerGroup(tenure_dsn, tmp_path, app="tests.apps.durable_app:app") as group:
        yield group


@pytest.fixture
def ops(tenure_dsn: str) -> Iterator[App]:
    yield from closing_app(build_app(tenure_dsn))
