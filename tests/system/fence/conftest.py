"""The receiver kit's fixtures (tests/integration/fence/conftest.py) for the process tests."""

from tests.integration.fence.conftest import fence_dsn, receivers  # noqa: F401 - fixtures
