"""Text from callers and tools, shown to a person: every control visible, none interpreted.

Idempotency keys, tenants, worker and waitpoint names, progress messages and error codes
come from callers, models and tools. A terminal acts on what a control starts (``ESC ]0;``
sets its title, ``ESC [2J`` clears the screen, U+009B alone is a CSI), a bidi override
reorders the text after it, a newline forges the next log line, and a lone surrogate (an
undecodable byte in argv) cannot even be written out. Wherever such a value is shown —
the CLI's tables and error lines, log lines, the dashboard — it goes through `printable`
(or `json_text` when the output is JSON) first.

Markup is the renderer's business: the CLI renders cells as plain `rich.text.Text` on a
console that reads neither markup nor emoji codes, and the dashboard shows every value
through `html_text` (controls made visible, then HTML-escaped).
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

__all__ = ["has_controls", "html_text", "json_text", "printable"]

# C0 (tab and newline too: a cell and a log line stay one line), DEL and C1; the Unicode
# line and paragraph separators; the bidi marks, embeddings, overrides and isolates; lone
# surrogates.
_BEYOND_C0 = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_CONTROLS = re.compile(f"[\x00-\x1f{_BEYOND_C0}]")
# What json.dumps(ensure_ascii=False) leaves raw of them (it escapes C0 itself).
_JSON_RAW = re.compile(f"[{_BEYOND_C0}]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: str) -> str:
    """``text`` with each control written as a visible escape (``\\x1b``, ``\\u202e``)."""
    return _CONTROLS.sub(_visible, text)


def has_controls(text: str) -> bool:
    """Whether `printable` would change ``text``."""
    return _CONTROLS.search(text) is not None


def json_text(value: Any, **options: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, **options)`` with every control escaped as
    ``\\uXXXX``: the same JSON value when parsed, nothing a terminal acts on when shown."""
    return _JSON_RAW.sub(_json_escape, json.dumps(value, ensure_ascii=False, **options))


def html_text(value: object) -> str:
    """``value`` for HTML text or an attribute: controls made visible, then escaped
    (quotes included); None is empty."""
    return html.escape(printable("" if value is None else str(value)), quote=True)
