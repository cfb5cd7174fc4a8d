"""Registered tools: the function, its policy, and how it must be run."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._errors import PayloadError, PolicyError
from ._policy import ToolPolicy

TOOL_NAME_MAX = 200


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    fn: Callable[..., Any]
    policy: ToolPolicy
    is_async: bool
    signature: inspect.Signature

    def bind(self, payload: Any) -> None:
        """Refuse, at enqueue time, a payload the tool's signature cannot accept."""
        if not isinstance(payload, dict):
            raise PayloadError(f"payload for {self.name!r} must be a JSON object (a dict)")
        try:
            self.signature.bind(None, **payload)
        except TypeError as exc:
            raise PayloadError(f"payload does not fit tool {self.name!r}: {exc}") from None


def make_spec(name: str, fn: Callable[..., Any], policy: ToolPolicy) -> ToolSpec:
    if not name or len(name) > TOOL_NAME_MAX or not name.isprintable():
        raise PolicyError(f"tool name must be 1-{TOOL_NAME_MAX} printable characters, got {name!r}")
    if not callable(fn):
        raise PolicyError(f"tool {name!r} must be a function")
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise PolicyError(f"tool {name!r} must take the Context as its first positional argument")
    return ToolSpec(name, fn, policy, inspect.iscoroutinefunction(fn), signature)
