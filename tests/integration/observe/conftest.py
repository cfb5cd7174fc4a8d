"""Fixtures for the observability tests: a producer, the journal, a store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from tests.integration.observe.observe_app import build_app
from tests.support.workers import Journal, closing_app

from tenure import App
from tenure._store import Store

JOURNAL_KEY = "observe-tests-journal-key"


@pytest.fixture
def ops(tenure_dsn: str) -> Iterator[App]:
    """The producer: enqueues with a journal key, so journal rows carry a payload HMAC."""
    yield from closing_app(build_app(tenure_dsn, journal_key=JOURNAL_KEY))


@pytest.fixture
def journal(tenure_dsn: str) -> Journal:
    return Journal(tenure_dsn)


@pytest.fixture
async def store(tenure_dsn: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Store]:
    """A store on this test's schema, which ``TENURE_DSN`` names too (for the CLI)."""
    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    store = Store(tenure_dsn, max_size=4)
    await store.open()
    try:
        yield store
    finally:
        await store.close()
