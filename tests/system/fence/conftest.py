"""Real receivers (example case services, as processes) on the receiver kit's tables
(``fence_dsn``, from tests/integration/fence/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.fence.conftest import fence_dsn  # noqa: F401 - a fixture
from tests.integration.fence.helpers import Receivers


@pytest.fixture
def receivers(fence_dsn: str, tmp_path: Path) -> Iterator[Receivers]:  # noqa: F811 - the fixture
    """Starts example receivers on demand; stops every one still running at the end."""
    pool = Receivers(fence_dsn, tmp_path)
    yield pool
    pool.stop_all()
