"""Skip a test module, saying why, where the MCP SDK (the ``mcp`` extra) is not installed."""

from __future__ import annotations

import pytest


def needs_sdk() -> None:
    pytest.importorskip(
        "mcp", reason="the MCP SDK is not installed: pip install -e '.[mcp]' (CI installs it)"
    )
