"""Reading the queue charts' SVG step lines back into per-minute heights, for the tests."""

from __future__ import annotations

import re

STEP = re.compile(r"([MhV])([-0-9.e,]+)")


def step_heights(d: str) -> list[float]:
    """The y of each minute of a step line (``M0,y`` then ``h<minutes>`` and ``V<y>``)."""
    heights: list[float] = []
    y = 0.0
    for command, argument in STEP.findall(d):
        if command == "M":
            x, _, start = argument.partition(",")
            assert float(x) == 0, d
            y = float(start)
        elif command == "V":
            y = float(argument)
        else:
            heights.extend([y] * int(argument))
    assert "".join(c + a for c, a in STEP.findall(d)) == d, d  # nothing else in the path
    return heights
