"""`tenure worker`'s event loop: uvloop when installed (tenure[uvloop]), asyncio on request."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop

from tenure._cli import _loop_factory
from tenure._errors import ConfigError


def test_auto_and_uvloop_pick_uvloop_when_installed() -> None:
    for choice in ("auto", "uvloop"):
        factory = _loop_factory(choice)
        assert factory is not None
        loop = factory()
        try:
            assert isinstance(loop, uvloop.Loop)
        finally:
            loop.close()


def test_asyncio_is_asyncio() -> None:
    assert _loop_factory("asyncio") is None  # asyncio.Runner's own default loop


def test_without_uvloop_auto_falls_back_and_uvloop_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an install without the extra sees
    assert _loop_factory("auto") is None
    with pytest.raises(ConfigError, match="tenure\\[uvloop\\]"):
        _loop_factory("uvloop")


def test_a_worker_coroutine_runs_on_the_chosen_loop() -> None:
    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    with asyncio.Runner(loop_factory=_loop_factory("auto")) as runner:
        assert runner.run(which()).startswith("uvloop")
    with asyncio.Runner(loop_factory=_loop_factory("asyncio")) as runner:
        assert runner.run(which()).startswith("asyncio")
