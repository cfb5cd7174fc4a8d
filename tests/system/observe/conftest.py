"""The observability fixtures (tests/integration/observe/conftest.py) for the process tests."""

from tests.integration.observe.conftest import journal, ops, store, workers  # noqa: F401 - fixtures
