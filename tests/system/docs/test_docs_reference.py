"""The reference pages are checked against the code, so they cannot drift: every command,
every metric and every environment variable tenure reads is documented, and nothing
documented is gone. (The event table: tests/unit/observe/test_observe_contract.py; the schema's
tables: tests/integration/store/test_schema_snapshot.py.)"""

from __future__ import annotations

import argparse
import re

from starlette.routing import Route
from tests.support.docs import ROOT, section

from tenure import LeasePolicy
from tenure._cli import _parser
from tenure._dashboard._dashboard import create_dashboard
from tenure._policy import MAX_ATTEMPTS, MAX_LEASE, MAX_TIME_LIMIT, MIN_LEASE

SOURCE = ROOT / "src" / "tenure"


def commands(parser: argparse.ArgumentParser, prefix: str = "tenure") -> set[str]:
    """Every command the parser accepts, ``tenure jobs show`` included."""
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.add(f"{prefix} {name}")
                found |= commands(sub, f"{prefix} {name}")
    return found


def summary_commands() -> set[str]:
    """The commands the CLI page's summary block lists (its first code block)."""
    block = section("reference/cli.md").split("```\n", 2)[1]
    found = set()
    for line in block.splitlines():
        if match := re.match(r"tenure ([a-z]+)(?: ([a-z]+)(?: ID)?(?: \| ([a-z]+))?)?", line):
            top, sub, other = match.groups()
            found.add(f"tenure {top}")
            found |= {f"tenure {top} {name}" for name in (sub, other) if name and name != "ID"}
    return found


def test_the_cli_page_lists_every_command_and_no_other() -> None:
    real = commands(_parser())
    documented = summary_commands()
    assert "tenure jobs show" in real and "tenure worker" in real
    # Subcommands of `tenure jobs` count; a top-level command's argument (MODULE) does not.
    documented = {c for c in documented if c.count(" ") == 1 or c.startswith("tenure jobs ")}
    assert documented == real, (
        f"undocumented: {sorted(real - documented)}; gone: {sorted(documented - real)}"
    )


def test_the_cli_page_generates_its_option_listing() -> None:
    assert "<!-- tenure --help -->" in section("reference/cli.md")


def code_metrics() -> set[str]:
    """Every metric family the source defines, as Prometheus exposes its name."""
    found = set()
    for path in sorted(SOURCE.rglob("*.py")):  # _observe/, and the fence kit's observer
        text = path.read_text(encoding="utf-8")
        for kind, name in re.findall(
            r"\b(Counter|Histogram|Gauge|GaugeMetricFamily|CounterMetricFamily)\(\s*"
            r"\"(tenure_\w+)\"",
            text,
        ):
            counter = kind in ("Counter", "CounterMetricFamily")
            found.add(f"{name}_total" if counter and not name.endswith("_total") else name)
    return found


def documented_metrics() -> tuple[set[str], set[str]]:
    """Every metric the page names anywhere, and those its table lists."""
    page = section("reference/metrics.md")
    named = set(re.findall(r"`(tenure_[a-z_]+)(?:\{[^}]*\})?`", page))
    table = set()
    for row in re.findall(r"^\| (`tenure_.*?) \|", page, re.MULTILINE):
        table |= set(re.findall(r"`(tenure_[a-z_]+)(?:\{[^}]*\})?`", row))
    return named, table


def test_every_metric_is_documented_and_every_documented_metric_exists() -> None:
    real = code_metrics()
    named, table = documented_metrics()
    assert {
        "tenure_jobs_claimed_total",
        "tenure_queue_depth",
        "tenure_fence_decisions_total",
    } <= real
    assert real <= named, f"undocumented metrics: {sorted(real - named)}"
    assert table <= real, f"the table lists metrics that do not exist: {sorted(table - real)}"


def code_variables() -> set[str]:
    """Every TENURE_* environment variable the library reads (tests and demos aside)."""
    found = set()
    for path in SOURCE.rglob("*.py"):
        if path.name.startswith("_demo") or "_chaos" in path.parts or "examples" in path.parts:
            continue
        found |= set(re.findall(r"\"(TENURE_[A-Z_]+)\"", path.read_text(encoding="utf-8")))
    return found


def test_every_environment_variable_is_documented() -> None:
    real = code_variables()
    assert {"TENURE_DSN", "TENURE_SIGNING_KEY"} <= real
    documented = set(re.findall(r"`(TENURE_[A-Z_]+)", section("reference/configuration.md")))
    assert real <= documented, f"undocumented: {sorted(real - documented)}"


def test_the_interval_rule_states_the_defaults_and_caps_the_code_has() -> None:
    page = section("concepts/interval-rule.md")
    defaults = LeasePolicy()
    stated = (
        f"Defaults: L = {defaults.lease:g} s, H = {defaults.heartbeat:g} s, "
        f"J = {defaults.jitter:g} s, R = {defaults.missed_beats}."
    )
    assert stated in " ".join(page.split()), stated
    caps = (
        f"lease {MIN_LEASE:g} s \u2013 {MAX_LEASE / 3600:g} h, "
        f"time limit ≤ {MAX_TIME_LIMIT / 86400:g} days, attempts ≤ {MAX_ATTEMPTS}"
    )
    assert caps in " ".join(page.split()), caps


def test_every_mention_of_the_waitpoint_webhook_names_the_open_route() -> None:
    """The docs, docstrings and the MCP status message once named ``/api/waitpoints/...``,
    which needs the dashboard's token; the webhook is the open ``POST /waitpoints/{token}``."""
    routes = {
        (route.path, method)
        for route in create_dashboard("", access_token="x" * 16).routes
        if isinstance(route, Route)
        for method in route.methods or ()
    }
    assert ("/waitpoints/{token}", "POST") in routes
    texts = [*SOURCE.rglob("*.py"), *(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]
    mentions = []
    for path in texts:
        text = " ".join(path.read_text(encoding="utf-8").replace("``", "`").split())
        mentions += [(path.name, m) for m in re.findall(r"POST `?(\S*waitpoints\S*)", text)]
    named = {name for name, _ in mentions}
    assert {"_waitpoint.py", "_ask.py", "mcp.md", "waitpoints.md"} <= named, mentions
    wrong = [(name, m) for name, m in mentions if not m.startswith("/waitpoints/{token}")]
    assert wrong == []
