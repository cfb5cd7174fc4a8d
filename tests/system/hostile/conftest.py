"""The hostile-input fixtures of tests/integration/hostile, for the subprocess runs."""

from tests.integration.hostile.conftest import cli_workdir, seeded_dsn

__all__ = ["cli_workdir", "seeded_dsn"]
