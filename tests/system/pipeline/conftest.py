"""The pipeline fixtures (tests/integration/pipeline/conftest.py) for the process tests."""

from tests.integration.pipeline.conftest import (  # noqa: F401 - fixtures
    crash_dir,
    ops,
    stage_workers,
    tables,
)
