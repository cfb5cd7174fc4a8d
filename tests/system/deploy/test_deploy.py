"""deploy/: the Prometheus rules and the Grafana dashboard that ship with tenure.

- promtool accepts the rules and their unit tests pass (skipped, saying why, without
  promtool: Debian's ``prometheus`` package, which .ci/run installs);
- every alert has a unit test where it fires and one where it stays quiet, a severity and
  annotations, and the ``tenure`` commands its annotations give are ones the CLI accepts;
- tenure.json is what deploy/grafana/build.py builds, is importable (its schemaVersion,
  the DS_PROMETHEUS input, the tool variable, a grid without overlaps) and each of its
  queries is PromQL that promtool parses;
- every metric the rules and the dashboard read is exposed by a real worker (and a real
  fenced receiver) after real jobs on PostgreSQL, one failing and one reclaimed: renaming
  a metric fails here.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from tests.apps.deploy_app import build_app
from tests.integration.observe.helpers import Receiver, scrape, spawn_with_metrics, value
from tests.integration.store.helpers import new_job
from tests.support.waiting import wait_until
from tests.support.workers import REPO_ROOT, WorkerGroup, closing_app

from tenure._cli import _parser
from tenure._store import Store

DEPLOY = REPO_ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "tenure.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "tenure.rules.test.yml"
DASHBOARD = DEPLOY / "grafana" / "tenure.json"
BUILD = DEPLOY / "grafana" / "build.py"
APP = "tests.apps.deploy_app:app"
SEVERITIES = {"critical", "warning", "info"}
# Series Prometheus makes itself, not read from a target.
PROMETHEUS_OWN = {"up"}
# Grafana's variables, as a query would be sent for a 5-minute rate over every tool.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$tool": ".*"}
KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not found: install Debian's prometheus package (.ci/run does)")
    return found


def run_promtool(*args: str) -> None:
    result = subprocess.run(
        [promtool(), *args], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}{result.stderr}"


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions,
    aggregations, keywords, label names or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        word, call = match.groups()
        if call is None and word.lower() not in KEYWORDS:
            names.add(word)
    return names


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def dashboard_panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target, with Grafana's variables filled in."""
    found = []
    for panel in dashboard_panels():
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, filled in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, filled)
            found.append((f"panel {panel['title']!r} {target['refId']}", expr))
    return found


def variable_metrics() -> list[tuple[str, str]]:
    """(where, metric) for every ``label_values(metric, label)`` template variable."""
    found = []
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            match = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", query)
            assert match, f"variable {variable['name']}: {query}"
            found.append((f"variable {variable['name']}", match.group(1)))
    return found


def load_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tenure_grafana_build", BUILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the rules ------------------------------------------------------------------------------


def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    run_promtool("check", "rules", str(RULES))
    run_promtool("test", "rules", str(RULE_TESTS))


def test_every_alert_fires_in_a_unit_test_and_stays_quiet_in_another() -> None:
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))["tests"]:
        for case in test.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    names = {rule["alert"] for rule in alerts()}
    assert names, "no alerts"
    assert {name: cases.get(name, set()) for name in names} == {
        name: {True, False} for name in names
    }


def test_every_alert_has_a_severity_and_says_what_to_do() -> None:
    for rule in alerts():
        name = rule["alert"]
        assert rule.get("labels", {}).get("severity") in SEVERITIES, name
        annotations = rule.get("annotations", {})
        assert annotations.get("summary") and annotations.get("description"), name
        text = annotations["description"]
        assert "`tenure " in text or "see Tenure" in text, f"{name}: no command to run"


def commands(text: str) -> list[str]:
    """The `tenure ...` commands quoted in an annotation, as an operator would type them
    for tool ocr and job 42."""
    found = []
    for command in re.findall(r"`(tenure [^`]*)`", text):
        command = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", r"\1-label", command)
        found.append(command.replace("JOB", "42"))
    return found


def test_the_commands_alerts_give_are_commands_the_cli_accepts() -> None:
    parser = _parser()
    given = [
        command
        for rule in alerts()
        for text in rule["annotations"].values()
        for command in commands(text)
    ]
    assert len(given) >= len(alerts())
    for command in given:
        assert "{{" not in command, command
        try:
            parser.parse_args(shlex.split(command)[1:])
        except SystemExit as exc:
            raise AssertionError(f"the CLI refuses {command!r}") from exc


def test_the_metric_name_reader_sees_metrics_only() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="y,}"}[5m]))) > 1 '
        "and on (tool) b unless ignoring(x) c offset 5m or -min by (t) (d:e:f) > 60 * 1e3 "
        'or label_replace(g, "h", "$1", "i", "(.*)")'
    )
    assert metric_names(expr) == {"a_bucket", "b", "c", "d:e:f", "g"}


# -- the dashboard ------------------------------------------------------------------------


def test_the_dashboard_is_what_build_py_builds() -> None:
    assert DASHBOARD.read_text(encoding="utf-8") == load_build().render(), (
        "deploy/grafana/tenure.json is out of date: run python3 deploy/grafana/build.py"
    )


def test_the_dashboard_imports_with_a_data_source_input_and_a_tool_variable() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 39  # Grafana 11 and later
    assert board["__inputs"] == [
        {
            "name": "DS_PROMETHEUS",
            "label": "Prometheus",
            "description": board["__inputs"][0]["description"],
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }
    ]
    source = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    tool = variables["tool"]
    assert (tool["type"], tool["multi"], tool["includeAll"]) == ("query", True, True)
    assert tool["datasource"] == source
    panels = dashboard_panels()
    assert len(panels) >= 20
    for panel in panels:
        assert panel["datasource"] == source, panel["title"]
        assert panel["targets"], panel["title"]
        assert all(t["datasource"] == source for t in panel["targets"]), panel["title"]
    uses_tool = [p for p in panels if any("$tool" in t["expr"] for t in p["targets"])]
    assert len(uses_tool) >= len(panels) - 5  # all but the receivers' and the database's


def test_the_dashboard_grid_has_unique_ids_and_no_overlaps() -> None:
    laid = dashboard()["panels"]
    assert len({p["id"] for p in laid}) == len(laid)
    cells: dict[tuple[int, int], str] = {}
    for panel in laid:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_every_dashboard_query_is_promql_promtool_parses(tmp_path: Path) -> None:
    queries = dashboard_queries()
    as_rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": expr}
                    for i, (_, expr) in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(json.dumps(as_rules), encoding="utf-8")
    run_promtool("check", "rules", str(path))


# -- against a real worker ----------------------------------------------------------------


async def _orphan_and_strand(dsn: str) -> None:
    """The previous owner that vanished: "ghost" claims the only queued job (a ``slow``
    call) under a 0.2 s lease and never extends it. And a due job of a tool no worker
    runs, so the queue's age gauge has something to show."""
    async with Store(dsn, max_size=1) as store:
        [claimed] = await store.claim("ghost", {"slow": 200}, 1)
        assert claimed.tool == "slow"
        await store.enqueue(new_job("stranded", tool="nobody-runs-this"))


def exposition(url: str) -> str:
    response = httpx.get(url, timeout=10)
    response.raise_for_status()
    return response.text


def sample_names(text: str) -> set[str]:
    """Every sample name of a /metrics page (with its _total, _bucket, ... suffix)."""
    return {
        sample.name for family in text_string_to_metric_families(text) for sample in family.samples
    }


@pytest.fixture
def receiver(tenure_dsn: str) -> Iterator[Receiver]:
    with contextlib.closing(Receiver(tenure_dsn)) as receiver:
        yield receiver


def test_every_metric_the_rules_and_the_dashboard_read_is_exposed(
    tenure_dsn: str, tmp_path: Path, receiver: Receiver
) -> None:
    with (
        contextlib.contextmanager(closing_app)(build_app(tenure_dsn)) as ops,
        WorkerGroup(tenure_dsn, tmp_path, app=APP) as workers,
    ):
        orphaned = ops.sync.enqueue("slow", {"seconds": 0.1})
        asyncio.run(_orphan_and_strand(tenure_dsn))
        _, url = spawn_with_metrics(workers, "deploy", concurrency=4)
        finished = [
            orphaned,
            *(
                ops.sync.enqueue(tool, payload)
                for tool, payload in [
                    ("echo", {"text": "hello"}),
                    ("refuse", {"text": "no"}),  # fails for good
                    ("flaky", {"text": "again"}),  # a retry, then success
                    ("slow", {"seconds": 1.0}),  # heartbeats
                    ("send", {"url": receiver.url + "/notify", "text": "hi"}),  # fenced
                ]
            ),
        ]
        waiting = ops.sync.enqueue("approve", {"timeout": 3600.0})
        held = ops.sync.enqueue("slow", {"seconds": 300.0})  # running at the scrape

        def settled() -> bool:
            states = [ops.sync.get(job.id).state for job in finished]
            return (
                all(state in ("succeeded", "failed") for state in states)
                and ops.sync.get(waiting.id).state == "waiting"
                and ops.sync.get(held.id).state == "running"
            )

        wait_until(settled, timeout=60, interval=0.1, message=f"never settled\n{workers.logs()}")
        taken_over = ops.sync.get(orphaned.id)
        assert (taken_over.state, taken_over.attempt) == ("succeeded", 2)
        assert ops.sync.get(finished[2].id).state == "failed"
        worker_text = exposition(url)
        exposed = sample_names(worker_text) | sample_names(exposition(receiver.url + "/metrics"))
        counted = scrape(url)
    # The scenario really happened in the worker: a takeover and fenced commits.
    assert value(counted, "tenure_jobs_reclaimed_total", tool="slow") == 1
    assert value(counted, "tenure_commit_duration_seconds_count") >= 1

    recorded = {rule["record"] for rule in rules() if "record" in rule}
    read = [(f"rule {rule.get('alert') or rule['record']}", rule["expr"]) for rule in rules()]
    read += dashboard_queries()
    missing = [
        f"{where}: {name}"
        for where, expr in read
        for name in sorted(metric_names(expr))
        if name not in exposed | recorded | PROMETHEUS_OWN
    ]
    missing += [f"{where}: {name}" for where, name in variable_metrics() if name not in exposed]
    assert not missing, "not exposed by a worker or a receiver:\n" + "\n".join(missing)
    read_names = {name for _, expr in read for name in metric_names(expr)}
    assert len(read_names) >= 20  # the reader found the metrics, not nothing
    if shutil.which("promtool"):  # and Prometheus's own linter likes what it reads
        lint = subprocess.run(
            ["promtool", "check", "metrics"], input=worker_text, capture_output=True, text=True
        )
        assert lint.returncode == 0, lint.stdout + lint.stderr
