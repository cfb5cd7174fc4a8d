"""Fixtures of the embedded server's tests."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator

import pytest

from tenure._embedded import _account


@pytest.fixture
def fresh_account_name(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A server account name of this test's own (as root the server runs as it), so a
    test can create and delete it without touching `_tenure`, which other servers on
    this machine may run as."""
    name = f"_tenure_t{secrets.token_hex(3)}"
    monkeypatch.setattr(_account, "SERVER_USER", name)
    _account.server_account.cache_clear()
    yield name
    _account.server_account.cache_clear()
    if _account.find_account(name) is not None:
        subprocess.run(["userdel", name], check=False, capture_output=True)
