"""MkDocs hook: the CLI reference's option listing is `tenure … --help`, generated at build.

The page's summary of the commands is written by hand; what each command accepts is
taken from the parser itself where the page says ``<!-- tenure --help -->``, so the
reference cannot drift from the code (tests/system/docs/test_docs_reference.py checks the rest).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

MARK = "<!-- tenure --help -->"


def _commands(parser: argparse.ArgumentParser, prefix: str) -> list[tuple[str, str]]:
    """(``tenure jobs show``, its help text) for every command and subcommand, in order."""
    found = [(prefix, parser.format_help())]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, f"{prefix} {name}")
    return found


def cli_help() -> str:
    """Markdown: one section per command with its ``--help``, at a fixed width."""
    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width
    from tenure._cli import _parser

    sections = []
    for command, text in _commands(_parser(), "tenure"):
        sections.append(f"### `{command}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(sections)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Put the generated listing where a page asks for it."""
    if MARK in markdown:
        markdown = markdown.replace(MARK, cli_help())
    return markdown
