"""Find an App by its ``MODULE:APP`` name (the CLI's and the chaos run's way in)."""

from __future__ import annotations

import difflib
import importlib
import os
import sys

from .._errors import ConfigError, one_line
from .._text import printable
from ._face import App


def load_app(target: str) -> App:
    """Import ``module:attribute`` and check that it is an App; otherwise a ConfigError
    naming what is wrong and the module's App objects."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"expected MODULE:APP (e.g. myapp:app), got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the module is the user's: any error importing it is theirs
        raise ConfigError(f"cannot import {module_name!r}: {printable(one_line(exc))}") from None
    app = getattr(module, attribute, None)
    if isinstance(app, App):
        return app
    found = sorted(name for name, value in vars(module).items() if isinstance(value, App))
    there = (
        f"its tenure.App objects: {', '.join(found)}"
        if found
        else f"{module_name} defines no tenure.App at its top level"
    )
    close = difflib.get_close_matches(attribute, found, n=1)
    hint = f"; did you mean {module_name}:{close[0]}?" if close else ""
    if not hasattr(module, attribute):
        raise ConfigError(f"{module_name} has no attribute {attribute!r} ({there}){hint}")
    kind = type(app).__name__
    raise ConfigError(
        f"{module_name}.{attribute} is of type {kind}, not a tenure.App ({there}){hint}"
    )
