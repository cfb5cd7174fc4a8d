"""The maintenance fixtures (tests/integration/maintenance/conftest.py) for the process tests."""

from tests.integration.maintenance.conftest import store, workers  # noqa: F401 - fixtures
