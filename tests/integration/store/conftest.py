from collections.abc import AsyncIterator

import pytest

from tenure._store import Store


@pytest.fixture
async def store(tenure_dsn: str) -> AsyncIterator[Store]:
    store = Store(tenure_dsn, max_size=16)
    await store.open()
    try:
        yield store
    finally:
        await store.close()
