"""The tracing fixtures (tests/integration/otel/conftest.py) for the process tests."""

from tests.integration.otel.conftest import receiver, stage, tracing  # noqa: F401 - fixtures
