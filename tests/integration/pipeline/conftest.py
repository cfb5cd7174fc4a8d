"""Fixtures for pipeline tests: effects tables and a producer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import pytest
from tests.integration.pipeline.pipeline_support import Tables
from tests.integration.pipeline.stage_app import EFFECTS_DDL, build_app

from tenure import App


@pytest.fixture
def tables(tenure_dsn: str) -> Tables:
    with psycopg.connect(tenure_dsn, autocommit=True) as conn:
        conn.execute(EFFECTS_DDL)
    return Tables(tenure_dsn)


@pytest.fixture
def ops(tenure_dsn: str) -> Iterator[App]:
    """The producer side: the stage app's tools and pipelines on this test's schema."""
    with contextlib.closing(build_app(tenure_dsn)) as app:
        yield app
