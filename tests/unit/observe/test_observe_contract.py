"""The telemetry contract without a database: the catalogue, the docs' event table, handlers,
metrics from events, keyed hashes, label caps and the rules that refuse bad settings."""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import re
from pathlib import Path
from types import SimpleNamespace
from typing import TypedDict, cast

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tenure import App, PolicyError
from tenure._dashboard._dashboard import check_bind
from tenure._errors import ConfigError, ConnectionLost
from tenure._log import Event, attach, log_event
from tenure._maintenance._journal_pruner import JournalPrunerConfig
from tenure._observe._events import EVENTS, JOURNAL_KINDS, OWNERSHIP_KINDS, WRITER_KINDS
from tenure._observe._http import bounded_dsn, is_loopback
from tenure._observe._journal import JournalWriter, journal_key, payload_hmac, to_row
from tenure._observe._metrics import (
    NOT_EMITTED,
    OTHER,
    Metrics,
    MetricsInterceptor,
    ToolLabels,
    render,
)
from tenure._store import ClaimedJob, Finish, JournalRow
from tenure.fence import FenceDecision
from tenure.fence._observer import FenceObserver

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "src" / "tenure"


def _literal_kinds(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _literal_kinds(node.body) | _literal_kinds(node.orelse)
    return set()


def emitted_kinds() -> set[str]:
    """Every kind the source passes to log_event, or writes as an ``event=`` log line."""
    kinds: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        text = path.read_text()
        kinds.update(re.findall(r'"event=([a-z_]+)', text))
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", "")) == "log_event"
                and len(node.args) >= 2
            ):
                kinds |= _literal_kinds(node.args[1])
    return kinds


def documented_kinds() -> list[str]:
    """The event column of the catalogue's table in the events reference."""
    table = (ROOT / "docs" / "reference" / "events.md").read_text()
    return re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE)


def test_every_emitted_kind_is_in_the_catalogue() -> None:
    missing = emitted_kinds() - set(EVENTS)
    assert not missing, f"add these to tenure._observe._events: {sorted(missing)}"


def test_the_events_reference_documents_exactly_the_catalogue() -> None:
    documented = documented_kinds()
    assert len(documented) == len(set(documented))
    assert set(documented) == set(EVENTS)


def test_derived_sets_are_consistent() -> None:
    assert NOT_EMITTED <= set(EVENTS)  # the kinds /metrics does not start at zero ...
    assert NOT_EMITTED.isdisjoint(emitted_kinds())  # ... are never emitted as events
    assert WRITER_KINDS <= JOURNAL_KINDS
    assert set(OWNERSHIP_KINDS) <= JOURNAL_KINDS
    assert "job_reclaimed" not in JOURNAL_KINDS  # derived from job_claimed, never a row
    for spec in EVENTS.values():
        assert spec.meaning and spec.emitted_by


def test_handlers_get_every_event_and_a_broken_one_breaks_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("a handler bug")

    detach_seen, detach_broken = attach(seen.append), attach(broken)
    try:
        with caplog.at_level(logging.INFO, logger="t"):
            log_event(logging.getLogger("t"), "job_claimed", job=7, token=9, worker="w", x=None)
    finally:
        detach_seen()
        detach_broken()
    log_event(logging.getLogger("t"), "job_claimed", job=8)
    assert [(e.kind, e.job, e.token, e.worker, dict(e.fields)) for e in seen] == [
        ("job_claimed", 7, 9, "w", {})
    ]
    assert "event=job_claimed job=7 token=9 worker=w" in caplog.text
    assert "telemetry handler" in caplog.text  # the broken handler was reported, not raised


def test_json_log_lines(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TENURE_LOG_FORMAT", "json")
    with caplog.at_level(logging.INFO, logger="t"):
        log_event(logging.getLogger("t"), "heartbeat_lost", job=1, reason="zero rows")
    assert json.loads(caplog.records[-1].message) == {
        "event": "heartbeat_lost",
        "job": 1,
        "reason": "zero rows",
    }


def test_payload_hmac_is_keyed_and_the_key_must_be_long(monkeypatch: pytest.MonkeyPatch) -> None:
    key = b"k" * 16
    one = payload_hmac(key, "echo", '{"text":"a"}')
    assert one == payload_hmac(key, "echo", '{"text":"a"}')
    assert one != payload_hmac(b"j" * 16, "echo", '{"text":"a"}')
    assert one != payload_hmac(key, "other", '{"text":"a"}')
    assert len(one) == 64 and "text" not in one
    with pytest.raises(ConfigError, match="at least 16 bytes"):
        journal_key("short")
    monkeypatch.setenv("TENURE_JOURNAL_KEY", "from-the-environment")
    assert journal_key(None) == b"from-the-environment"
    monkeypatch.delenv("TENURE_JOURNAL_KEY")
    assert journal_key(None) is None
    assert App("dbname=x", journal_key="y" * 16).registry._journal_key == b"y" * 16  # accepted


def test_journal_rows_from_events_take_code_duration_and_observation_time() -> None:
    event = Event(
        "ownership_unknown",
        job=3,
        token=5,
        attempt=1,
        tool="t",
        worker="w",
        fields={"reason": "db_error", "since_confirmed": 0.42, "error": "OperationalError"},
        monotonic=100.0,
    )
    row = to_row(event)
    assert (row.kind, row.job_id, row.token, row.attempt, row.worker, row.tool) == (
        "ownership_unknown",
        3,
        5,
        1,
        "w",
        "t",
    )
    assert (row.code, row.duration_ms, row.observed_at) == ("db_error", 420, 100.0)
    assert row.detail == dict(event.fields)


def test_journal_writer_filters_by_kind_and_worker_and_drops_past_capacity() -> None:
    writer = JournalWriter(None, worker="w", capacity=2)  # type: ignore[arg-type]
    for kind, worker in [
        ("ownership_unknown", "w"),
        ("job_claimed", "w"),  # journaled by its statement, not by the writer
        ("tool_request_started", "other"),  # another worker's
        ("tool_request_started", "w"),
        ("ownership_unknown", "w"),  # past capacity
    ]:
        writer(Event(kind, job=1, worker=worker))
    assert writer.dropped == 1
    assert [e.kind for e in writer._buffer] == ["ownership_unknown", "tool_request_started"]


class _FlakyJournal:
    """A store whose first batch fails as a dropped connection would."""

    def __init__(self) -> None:
        self.rows: list[JournalRow] = []
        self.failed = False

    async def record_events(self, rows: list[JournalRow]) -> None:
        if not self.failed:
            self.failed = True
            raise ConnectionLost("the server closed the connection", sqlstate="08006")
        self.rows += rows


async def test_a_failed_journal_flush_is_a_failed_round_and_the_signal_fires_once_written() -> None:
    store = _FlakyJournal()
    writer = JournalWriter(store, worker="w")  # type: ignore[arg-type]
    rounds: list[Event] = []
    detach = attach(rounds.append, kinds={"component_round"})
    written = writer.signal.next()
    writer.start()
    try:
        writer(Event("ownership_unknown", job=1, worker="w"))
        async with asyncio.timeout(10):
            await written  # after the failure, the retry wrote it
    finally:
        detach()
        await writer.stop()
    assert [r.kind for r in store.rows] == ["ownership_unknown"]
    (failed,) = rounds  # once per streak of failures
    assert failed.level == logging.WARNING
    assert dict(failed.fields) == {
        "component": "journal_writer", "outcome": "failed",
        "error": "ConnectionLost", "buffered": 1,
    }  # fmt: skip


def test_tool_labels_are_validated_and_capped() -> None:
    app = App("dbname=x")
    with pytest.raises(PolicyError, match="did you mean 'model'"):
        app.tool("t", labels={"modle": "x"})(lambda ctx: None)
    with pytest.raises(PolicyError, match="printable"):
        app.tool("t", labels={"model": "a\nb"})(lambda ctx: None)
    app.tool("t", labels={"model": "m", "provider": "p"})(lambda ctx: None)
    assert dict(app.tools["t"].labels) == {"model": "m", "provider": "p"}

    labels = ToolLabels(tool_cap=2, value_cap=1)
    labels.register("a", {"model": "m1", "provider": "p"})
    labels.register("b", {"model": "m2"})  # a second model: past the value cap
    assert labels("a") == ("a", "m1", "p")
    assert labels("b") == ("b", OTHER, "")
    assert labels("c") == (OTHER, "", "")  # a third tool name: past the tool cap
    assert labels(None) == ("", "", "")


def _samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = render([metrics.registry]).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class _On(TypedDict):
    tool: str
    worker: str


def test_metrics_count_the_contracts_events() -> None:
    labels = ToolLabels()
    labels.register("t", {"model": "m", "provider": "p"})
    metrics = Metrics(labels)
    tool: _On = {"tool": "t", "worker": "w"}
    for event in [
        Event("job_claimed", job=1, **tool),
        Event("job_claimed", job=1, fields={"previous_token": 4}, **tool),
        Event("lease_expired", job=1, **tool),
        # Counted from the beat's heartbeat_batch (3 leases), not one by one.
        Event("heartbeat_ok", job=1, fields={"heartbeat_age": 9.0, "lease_left": 0.1}, **tool),
        Event(
            "heartbeat_batch",
            fields={"leases": 3, "heartbeat_age": 0.3, "lease_left": 1.2},
            **tool,
        ),
        Event("heartbeat_withheld", job=1, **tool),
        Event("heartbeat_lost", job=1, fields={"reason": "zero_rows"}, **tool),
        Event("heartbeat_lost", job=1, fields={"reason": "made_up"}, **tool),
        Event("ownership_unknown", job=1, **tool),
        Event("result_rejected", job=1, **tool),
        Event("tool_request_started", job=1, **tool),
        Event("call_finished", job=1, fields={"outcome": "succeeded", "duration": 2.0}, **tool),
        Event("call_abandoned", job=1, fields={"duration": 0.5}, **tool),
        Event("commit_answered", fields={"jobs": 3, "duration": 0.004}, worker="w"),
        Event("made_up_kind"),
    ]:
        metrics(event)
    s = _samples(metrics)
    t = (("model", "m"), ("provider", "p"), ("tool", "t"))
    assert s[("tenure_jobs_claimed_total", t)] == 2
    assert s[("tenure_jobs_reclaimed_total", t)] == 1
    assert s[("tenure_leases_expired_total", t)] == 1
    assert s[("tenure_results_rejected_total", t)] == 1
    assert s[("tenure_tool_requests_total", t)] == 1
    for reason, n in [
        ("zero_rows", 1),
        ("executor_unobservable", 1),
        ("db_error", 1),
        ("other", 1),
    ]:
        assert s[("tenure_heartbeat_failures_total", tuple(sorted((*t, ("reason", reason)))))] == n
    assert s[("tenure_heartbeat_age_seconds_count", t)] == 1
    assert s[("tenure_heartbeat_age_seconds_sum", t)] == 0.3
    assert s[("tenure_lease_remaining_seconds_sum", t)] == 1.2
    assert s[("tenure_events_total", (("kind", "heartbeat_ok"),))] == 3
    assert s[("tenure_events_total", (("kind", "heartbeat_batch"),))] == 1
    succeeded = tuple(sorted((*t, ("outcome", "succeeded"))))
    assert s[("tenure_tool_duration_seconds_sum", succeeded)] == 2.0
    assert s[("tenure_events_total", (("kind", "other"),))] == 1
    # Commit latency is per statement (a batch may hold several tools): no labels.
    assert s[("tenure_commit_duration_seconds_count", ())] == 1
    assert s[("tenure_commit_duration_seconds_bucket", (("le", "0.005"),))] == 1
    assert s[("tenure_commit_duration_seconds_bucket", (("le", "0.0025"),))] == 0


async def test_the_metrics_interceptor_counts_claims_and_calls_as_their_events_would() -> None:
    labels = ToolLabels()
    labels.register("t", {"model": "m", "provider": "p"})
    metrics = Metrics(labels)
    counting = MetricsInterceptor(metrics)
    first = cast(ClaimedJob, SimpleNamespace(id=1, tool="t", previous_token=None))
    again = cast(ClaimedJob, SimpleNamespace(id=1, tool="t", previous_token=4))
    counting.claimed(first, "w")
    counting.claimed(again, "w")

    async def succeeded() -> Finish:
        return Finish(1, 5, "succeeded")

    async def abandoned() -> object:
        return SimpleNamespace(reason="lease_lost")

    assert (await counting.call(first, "w", succeeded)).state == "succeeded"
    await counting.call(again, "w", abandoned)
    s = _samples(metrics)
    t = (("model", "m"), ("provider", "p"), ("tool", "t"))
    assert s[("tenure_jobs_claimed_total", t)] == 2
    assert s[("tenure_jobs_reclaimed_total", t)] == 1
    for outcome in ("succeeded", "abandoned"):
        assert (
            s[("tenure_tool_duration_seconds_count", tuple(sorted((*t, ("outcome", outcome)))))]
            == 1
        )
    for kind in ("job_claimed", "call_finished", "call_abandoned"):
        assert s[("tenure_events_total", (("kind", kind),))] == (2 if kind == "job_claimed" else 1)


def test_the_dashboard_refuses_a_public_bind_without_a_token() -> None:
    check_bind("127.0.0.1", None)
    check_bind("::1", None)
    check_bind("localhost", None)
    for host in ("0.0.0.0", "192.168.1.5", "example.com", "::"):
        with pytest.raises(ConfigError, match=f"refusing to serve the dashboard on {host}"):
            check_bind(host, None)
    check_bind("0.0.0.0", "t" * 16)
    with pytest.raises(ConfigError, match="at least 16"):
        check_bind("127.0.0.1", "short")
    check_bind("0.0.0.0", "t" * 16, ["dash.example", "dash.example:8443", "[::1]:80"])
    for entry in ["https://dash.example", "dash.example:0", "*", "a/b", "dash.example:"]:
        with pytest.raises(ConfigError, match="not a host name"):
            check_bind("127.0.0.1", None, [entry])
    assert is_loopback("127.0.0.2") and not is_loopback("10.0.0.1")


def test_scrape_connections_carry_a_statement_timeout_and_keep_their_options() -> None:
    dsn = bounded_dsn("dbname=x options='-c search_path=s'", 1500)
    assert "search_path=s" in dsn and "statement_timeout=1500" in dsn


def test_pruner_config_is_checked_eagerly_with_a_hint() -> None:
    assert JournalPrunerConfig().retention == 14 * 86400
    with pytest.raises(PolicyError, match="outside"):
        JournalPrunerConfig(retention=1)
    with pytest.raises(PolicyError, match="did you mean 'retention'"):
        JournalPrunerConfig.from_options(retension=3600)


def _decision(outcome: str, scope: str | None, key: str | None) -> FenceDecision:
    return FenceDecision(outcome, 409, "POST", "/x", scope, 3, key, 1.0, 1.0)  # type: ignore[arg-type]


def test_fence_observer_counts_and_records_only_tenure_shaped_ids() -> None:
    seen: list[Event] = []
    then: list[FenceDecision] = []
    observer = FenceObserver(then=then.append)
    detach = attach(seen.append)
    try:
        observer(_decision("accepted", "tool-job:5", "tool-job:5:send"))
        observer(_decision("stale", "tool-job:5", "tool-job:5:send"))
        observer(_decision("stale", "payment:jane@example.com", "payment:jane@example.com:x"))
    finally:
        detach()
    assert [(e.kind, e.job, e.token) for e in seen] == [
        ("stale_fence_rejected", 5, 3),
        ("stale_fence_rejected", None, 3),
    ]
    assert dict(seen[0].fields) == {"status": 409, "operation": "send", "key": "tool-job:5:send"}
    assert dict(seen[1].fields) == {"status": 409}  # a foreign scope is never recorded
    assert len(then) == 3
    text = render([observer.registry]).decode()
    assert "tenure_stale_fences_rejected_total 2.0" in text
    assert 'tenure_fence_decisions_total{outcome="accepted"} 1.0' in text
