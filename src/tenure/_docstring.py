"""A tool's docstring as a model reads it: the text, and one description per parameter.

The three conventions Python code uses, which both agent frameworks tenure adapts to
already read (pydantic-ai through griffe, the OpenAI Agents SDK likewise):

- Google: an ``Args:`` (``Arguments:``, ``Parameters:``, ``Keyword Args:``, ...) section
  of ``name (type): text`` entries, continued on deeper-indented lines;
- NumPy: a ``Parameters`` heading underlined with dashes, ``name : type`` entries and
  their text indented below;
- Sphinx: ``:param name: text`` (or ``:param type name: text``) fields.

`split` returns the docstring without its parameter sections (the rest, ``Returns:``
included, stays as written) and the parameters' texts, each on one line. Anything it
does not recognise is left in the text: a docstring is never lost, only sorted.
"""

from __future__ import annotations

import re

MAX_DESCRIPTION = 1000  # characters of one parameter's description

_GOOGLE = re.compile(
    r"(?:Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters)\s*:",
    re.IGNORECASE,
)
_GOOGLE_ENTRY = re.compile(r"\*{0,2}(?P<name>[A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:(?P<text>.*)")
_NUMPY = re.compile(r"(?:Parameters|Other Parameters|Keyword Arguments)", re.IGNORECASE)
_DASHES = re.compile(r"-{3,}")
_NUMPY_ENTRY = re.compile(
    r"(?P<names>\*{0,2}[A-Za-z_]\w*(?:\s*,\s*\*{0,2}[A-Za-z_]\w*)*)\s*(?::.*)?"
)
_SPHINX = re.compile(
    r":(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?\*{0,2}"
    r"(?P<name>[A-Za-z_]\w*)\s*:(?P<text>.*)"
)
_SPHINX_OTHER = re.compile(r":(?:type|vartype)\s[^:]*:.*")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _clean(parts: list[str]) -> str:
    return " ".join(" ".join(parts).split())[:MAX_DESCRIPTION]


def _entries(
    lines: list[str], start: int, base: int, entry: re.Pattern[str], key: str
) -> tuple[dict[str, str], int]:
    """The entries of a section whose lines start at ``start`` and are indented deeper than
    ``base`` (NumPy: as deep as the heading, ``base`` one less); where it ends."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    level: int | None = None
    i = start
    while i < len(lines):
        line = lines[i]
        if line.strip():
            depth = _indent(line)
            if depth <= base:
                break
            if level is None:
                level = depth
            heading = i + 1 < len(lines) and _DASHES.fullmatch(lines[i + 1].strip())
            if depth == level:
                matched = None if heading else entry.fullmatch(line.strip())
                if matched is None:
                    break
                current = []
                for name in re.split(r"\s*,\s*", matched.group(key)):
                    found[name.lstrip("*")] = current
                text = matched.groupdict().get("text")
                if text:
                    current.append(text)
            elif current is not None:
                current.append(line)
        elif i + 1 < len(lines) and lines[i + 1].strip() and _indent(lines[i + 1]) <= base:
            break
        i += 1
    return {name: _clean(parts) for name, parts in found.items() if _clean(parts)}, i


def split(doc: str) -> tuple[str, dict[str, str]]:
    """``doc`` (as `inspect.getdoc` gives it) without its parameter sections, and the
    description of each parameter they name."""
    lines = doc.splitlines()
    kept: list[str] = []
    described: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        depth = _indent(line)
        if _GOOGLE.fullmatch(stripped):
            found, i = _entries(lines, i + 1, depth, _GOOGLE_ENTRY, "name")
            described.update(found)
            continue
        following = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if _NUMPY.fullmatch(stripped) and _DASHES.fullmatch(following):
            found, i = _entries(lines, i + 2, depth - 1, _NUMPY_ENTRY, "names")
            described.update(found)
            continue
        sphinx = _SPHINX.fullmatch(stripped)
        if sphinx is not None or _SPHINX_OTHER.fullmatch(stripped):
            parts = [sphinx.group("text")] if sphinx is not None else []
            i += 1
            while i < len(lines) and lines[i].strip() and _indent(lines[i]) > depth:
                parts.append(lines[i])
                i += 1
            if sphinx is not None and _clean(parts):
                described[sphinx.group("name")] = _clean(parts)
            continue
        if stripped or (kept and kept[-1].strip()):
            kept.append(line)
        i += 1
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join(kept), described
