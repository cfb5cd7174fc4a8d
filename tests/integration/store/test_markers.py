"""The ``storage`` marker comes from the fixtures a test uses and the axis marker from the
folder: tests/conftest.py sets both at collection, never a hand-written mark."""

from __future__ import annotations

import pytest


@pytest.fixture
def through_another_fixture(database_dsn: str) -> str:
    """A fixture that reaches the server only through ``database_dsn``."""
    return database_dsn


def test_a_test_reaching_the_database_through_a_fixture_is_marked_storage(
    request: pytest.FixtureRequest, through_another_fixture: str
) -> None:
    assert through_another_fixture
    assert request.node.get_closest_marker("storage") is not None


def test_a_test_without_the_database_fixture_is_not_marked_storage(
    request: pytest.FixtureRequest,
) -> None:
    assert request.node.get_closest_marker("storage") is None


def test_every_test_is_marked_with_its_axis(request: pytest.FixtureRequest) -> None:
    """The folder under tests/ is the axis: this file is under tests/integration/."""
    marked = {
        axis for axis in ("unit", "integration", "system") if request.node.get_closest_marker(axis)
    }
    assert marked == {"integration"}
