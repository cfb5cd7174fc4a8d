"""`tenure._text`: values shown to a person keep every character, controls made visible."""

from __future__ import annotations

import json
import logging

from tenure._log import LineFormatter, format_line
from tenure._text import html_text, json_text, printable

HOSTILE = "step 3\x1b]0;owned\x07\x1b[2J\u009b31m\u202egnp.exe\n"
RAW = ("\x1b", "\x07", "\u009b", "\u202e", "\n")


def _clean(text: str) -> None:
    for char in RAW:
        assert char not in text, (char, text)


def test_printable_makes_every_control_visible_and_keeps_the_rest() -> None:
    assert printable("a\tb\nc\x00\x7f") == "a\\x09b\\x0ac\\x00\\x7f"
    assert printable("\u2028\u2066\udcff") == "\\u2028\\u2066\\udcff"
    assert printable("é ✓ [/] :key: 漢字") == "é ✓ [/] :key: 漢字"
    assert printable(HOSTILE) == "step 3\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202egnp.exe\\x0a"


def test_html_text_makes_controls_visible_then_escapes() -> None:
    assert html_text('<a href="x">\x1b') == "&lt;a href=&quot;x&quot;&gt;\\x1b"
    assert html_text(None) == ""


def test_json_text_is_the_same_value_with_nothing_raw() -> None:
    text = json_text({"m": "é" + HOSTILE + "\udcff"})
    _clean(text)
    assert "é" in text  # not ASCII-escaped, only the controls
    assert json.loads(text) == {"m": "é" + HOSTILE + "\udcff"}


def test_log_lines_escape_what_a_caller_or_a_tool_wrote() -> None:
    event = {"event": "x", "worker": "w\x1b[2J", "code": "c\u009b1m", "key": "[/]"}
    for as_json in (False, True):
        _clean(format_line(event, as_json=as_json))
    assert format_line({"worker": "w\x1b[2J"}) == 'worker="w\\u001b[2J"'
    record = logging.LogRecord("tenure", logging.WARNING, "f", 1, "bad %s", (HOSTILE,), None)
    for as_json in (False, True):
        _clean(LineFormatter(as_json=as_json).format(record))
