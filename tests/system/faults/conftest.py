"""Fixtures for fault tests: worker processes, a producer App, and the journal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.apps.fault_app import build_app
from tests.support.workers import Journal, WorkerGroup, closing_app

from tenure import App


@pytest.fixture
def workers(tenure_dsn: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    """Worker processes on this test's schema; all of them are gone after the test."""
    with WorkerGroup(tenure_dsn, tmp_path) as group:
        yield group


@pytest.fixture
def ops(tenure_dsn: str) -> Iterator[App]:
    """The producer side: the fault app's tools on this test's schema."""
    yield from closing_app(build_app(tenure_dsn))


@pytest.fixture
def journal(tenure_dsn: str) -> Journal:
    return Journal(tenure_dsn)
