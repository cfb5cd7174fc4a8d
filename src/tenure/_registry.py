"""Registered tools: the function, its policy, and how it must be run."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import PayloadError, PolicyError
from ._policy import ToolPolicy

TOOL_NAME_MAX = 200
# Metric labels a tool may declare. A fixed set, so a dashboard can rely on them and a
# typo fails at registration instead of quietly creating a new series.
LABEL_KEYS = ("model", "provider")
LABEL_VALUE_MAX = 100


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    fn: Callable[..., Any]
    policy: ToolPolicy
    is_async: bool
    signature: inspect.Signature
    labels: tuple[tuple[str, str], ...] = ()  # (key, value) pairs, see check_labels

    def bind(self, payload: Any) -> None:
        """Refuse, at enqueue time, a payload the tool's signature cannot accept."""
        if not isinstance(payload, dict):
            raise PayloadError(f"payload for {self.name!r} must be a JSON object (a dict)")
        try:
            self.signature.bind(None, **payload)
        except TypeError as exc:
            raise PayloadError(f"payload does not fit tool {self.name!r}: {exc}") from None


def check_labels(name: str, labels: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    """Validate a tool's metric labels: keys from LABEL_KEYS, short printable values.

    The values come from code (which model, which provider a tool calls), never from
    a request, so the number of series they create stays what the code declares.
    """
    if not labels:
        return ()
    checked: list[tuple[str, str]] = []
    for key, value in sorted(labels.items()):
        if key not in LABEL_KEYS:
            close = difflib.get_close_matches(key, LABEL_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise PolicyError(
                f"tool {name!r}: unknown label {key!r} (labels: {', '.join(LABEL_KEYS)}){hint}"
            )
        if (
            not isinstance(value, str)
            or not 1 <= len(value) <= LABEL_VALUE_MAX
            or not value.isprintable()
        ):
            raise PolicyError(
                f"tool {name!r}: label {key!r} must be 1-{LABEL_VALUE_MAX} printable characters"
            )
        checked.append((key, value))
    return tuple(checked)


def make_spec(
    name: str,
    fn: Callable[..., Any],
    policy: ToolPolicy,
    labels: Mapping[str, str] | None = None,
) -> ToolSpec:
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
    return ToolSpec(
        name, fn, policy, inspect.iscoroutinefunction(fn), signature, check_labels(name, labels)
    )
