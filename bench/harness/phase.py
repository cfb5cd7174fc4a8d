"""What a phase is: how it measures, how the report shows it, and what it is judged against.

Each module in harness/phases/ builds one `Phase`; run.py runs them in order, and
harness/report.py asks each for its section and its targets. Everything about one
phase therefore lives in one file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .config import Config
from .core import Harness

# The run's results as written to the JSON file: one key per phase, plus the run's own.
Results = dict[str, Any]


@dataclass
class Evaluation:
    """The report's *Targets* table and the throughput ratios, filled phase by phase."""

    targets: list[dict[str, str]] = field(default_factory=list)
    ratios: dict[str, str] = field(default_factory=dict)

    def target(self, target: str, measured: str, ok: bool | None) -> None:
        verdict = "n/a" if ok is None else ("met" if ok else "**missed**")
        self.targets.append({"target": target, "measured": measured, "verdict": verdict})


def no_targets(cfg: Config, res: Results, ev: Evaluation) -> None:
    """For a phase that only informs (the profile)."""


@dataclass(frozen=True)
class Phase:
    name: str
    # Measures and stores its figures in harness.results (under its own key).
    run: Callable[[Harness], None]
    # Its report section (Markdown lines; none when the results hold nothing of it).
    section: Callable[[Config, Results], list[str]]
    evaluate: Callable[[Config, Results, Evaluation], None] = no_targets
