"""The report: the run's header, each phase's section and targets, the errors; Markdown text.

Written from the results alone (and the config), so that a JSON file from an earlier run
could be rendered again.
"""

from __future__ import annotations

from collections.abc import Sequence

from .config import Config
from .phase import Evaluation, Phase, Results


def evaluate(cfg: Config, res: Results, phases: Sequence[Phase]) -> None:
    """Adds ``targets`` (each with a verdict) and ``ratios`` to the results."""
    ev = Evaluation()
    for phase in phases:
        phase.evaluate(cfg, res, ev)
    res["targets"] = ev.targets
    res["ratios"] = ev.ratios


def render(cfg: Config, res: Results, phases: Sequence[Phase]) -> str:
    m = res["machine"]
    lines = [
        "# tenure bench results",
        "",
        f"Run {res['started']} ({'quick' if cfg.quick else 'full'}), {res['duration_s']:.0f} s. "
        f"Machine: {m['cpu_model']}, {m['cores']} cores, {m['memory_gb']} GB; "
        f"PostgreSQL {m['postgres']['server_version']} (synchronous_commit="
        f"{m['postgres']['synchronous_commit']}, shared_buffers={m['postgres']['shared_buffers']}) "
        f"on loopback; Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in m["packages"].items())
        + f". Load average at start {m['load_at_start']}, at end {res.get('load_at_end')}.",
        "",
        "The machine's cores are shared with other work; *other load* is the machine's busy CPU "
        "minus the bench's own processes and its database's backends, in cores, during the window.",
        "",
    ]
    for phase in phases:
        lines += phase.section(cfg, res)
    targets = res.get("targets")
    if targets:
        lines += ["## Targets", "", "| target | measured | verdict |", "|---|---|---|"]
        for t in targets:
            lines.append(f"| {t['target']} | {t['measured']} | {t['verdict']} |")
        lines.append("")
    md = "\n".join(lines)
    if res.get("errors"):
        md += (
            "\n## Errors\n\n" + "\n".join(f"- {k}: `{v}`" for k, v in res["errors"].items()) + "\n"
        )
    return md
