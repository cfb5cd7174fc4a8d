"""The queue charts count per minute, bucket by bucket, over the last hour and the last day.

Jobs and journal rows are written back-dated (test-only SQL on the test's database) at
known minutes before the server's clock, from the current minute back past a day, so both
windows are checked minute by minute against what was written, edges included: the
window's first minute is in, the minute before it is out. Then more tools than the page
shows: the busiest are kept and the page says how many there were.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import psycopg
import pytest

from tenure import App
from tenure._dashboard._queues_page import SERIES, TOOLS_SHOWN, WINDOWS, queue_data
from tenure._store import Store

pytestmark = pytest.mark.storage

MINUTE = timedelta(minutes=1)

# tool, series, minutes before the current one, seconds into that minute, how many
TABLE = """
ocr   queued       0   1  2
ocr   running      0   2  1
ocr   succeeded    1  59  3
ocr   failed       1   0  1
ocr   reclaimed    5  30  1
ocr   queued      59   0  4   the hour's first minute
ocr   succeeded   60  59  5   the minute before it: the day's only
mail  queued      61  10  1
mail  running    180  10  2
mail  failed     600  45  1
mail  succeeded 1000   5  6
ocr   queued    1438  30  2
mail  running   1439  50  1   the day's first minute
mail  queued    1440  50  9   the minute before it: in neither window
ocr   failed    2000   0  3
"""
WRITTEN = [
    (tool, series, int(ago), int(second), int(count))
    for tool, series, ago, second, count, *_ in (
        line.split() for line in TABLE.strip().splitlines()
    )
]


def write(dsn: str, rows: list[tuple[str, str, int, int, int]]) -> list[tuple[str, str, datetime]]:
    """Write each row's jobs or journal rows at its back-dated moment; returns (tool,
    series, moment) once per counted row."""
    written: list[tuple[str, str, datetime]] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT date_bin('1 minute', clock_timestamp(), timestamptz '2000-01-01 00:00+00')"
        ).fetchone()
        assert found is not None
        anchor: datetime = found[0]
        for n, (tool, series, ago, second, count) in enumerate(rows):
            at = anchor - ago * MINUTE + timedelta(seconds=second)
            for i in range(count):
                key = f"{n}-{i}"
                if series == "queued":
                    # Every other one still running: counted through the other index.
                    running = i % 2 == 1
                    conn.execute(
                        "INSERT INTO tenure_jobs (tool, state, max_attempts, idempotency_key, "
                        "payload, payload_hash, created_at, position, owner, lease_until, token, "
                        "attempt) VALUES (%s, %s, 1, %s, '{}', 'h', %s, 0, %s, %s, 1, 1)",
                        (
                            tool,
                            "running" if running else "succeeded",
                            key,
                            at,
                            "w" if running else None,
                            anchor + timedelta(hours=1) if running else None,
                        ),
                    )
                else:
                    kind = "job_claimed" if series in ("running", "reclaimed") else series
                    detail = '{"previous_token": 7}' if series == "reclaimed" else "{}"
                    conn.execute(
                        "INSERT INTO tenure_events (at, kind, job_id, token, attempt, worker, "
                        "tool, detail) VALUES (%s, %s, %s, 1, 1, 'w', %s, %s::jsonb)",
                        (at, kind, n, tool, detail),
                    )
                written.append((tool, series, at))
                if series == "reclaimed":
                    written.append((tool, "running", at))  # a reclaim is a claim too
    return written


def expected(
    written: list[tuple[str, str, datetime]], buckets: list[str]
) -> dict[str, dict[str, list[int]]]:
    index = {datetime.fromisoformat(b): i for i, b in enumerate(buckets)}
    counts: dict[str, dict[str, list[int]]] = {}
    for tool, series, at in written:
        slot = index.get(at.replace(second=0, microsecond=0))
        if slot is not None:
            per_tool = counts.setdefault(tool, {s: [0] * len(buckets) for s in SERIES})
            per_tool[series][slot] += 1
    return counts


def series_of(data: dict[str, Any]) -> dict[str, dict[str, list[int]]]:
    return {entry["tool"]: entry["series"] for entry in data["tools"]}


def check_buckets(data: dict[str, Any], count: int, now: datetime) -> None:
    """One bucket per minute, the last one holding ``now`` (read just before the data)."""
    buckets = [datetime.fromisoformat(b) for b in data["buckets"]]
    assert data["bucket_seconds"] == 60 and len(buckets) == count
    assert all(b.second == 0 and b.microsecond == 0 for b in buckets)
    assert all(later - earlier == MINUTE for earlier, later in pairwise(buckets))
    assert buckets[-1] <= datetime.fromisoformat(data["db_now"]) < buckets[-1] + MINUTE
    assert buckets[-1] >= now.astimezone(UTC).replace(second=0, microsecond=0)


async def test_each_minute_of_the_hour_and_of_the_day(
    store: Store, ops: App, tenure_dsn: str
) -> None:
    written = write(tenure_dsn, WRITTEN)
    for name, count in (("1h", 60), ("1d", 1440)):
        now = await store.db_now()
        data = await queue_data(ops.admin, WINDOWS[name])
        check_buckets(data, count, now)
        want = expected(written, data["buckets"])
        got = series_of(data)
        # A tool with running jobs but nothing in the window is shown, flat.
        for tool in got.keys() - want.keys():
            assert all(sum(values) == 0 for values in got[tool].values()), (name, tool)
            want[tool] = got[tool]
        assert got == want, name
        assert not data["tools_cut"] and "busiest" not in data["fragments"]["queues"]

    hour = series_of(await queue_data(ops.admin, WINDOWS["1h"]))
    day = series_of(await queue_data(ops.admin, WINDOWS["1d"]))
    # What the windows hold, spelled out (a clock that turned a minute since the rows were
    # written moves every row one bucket left; the first minute's rows then fall out).
    assert sum(hour["ocr"]["succeeded"]) == 3 and sum(day["ocr"]["succeeded"]) == 8
    assert sum(hour["ocr"]["reclaimed"]) == 1 and sum(hour["ocr"]["running"]) == 2
    assert "mail" not in hour or sum(hour["mail"]["queued"]) == 0
    assert sum(day["mail"]["succeeded"]) == 6 and sum(day["mail"]["failed"]) == 1
    assert sum(day["mail"]["queued"]) == 1  # the 9 written a day and a minute ago are out
    assert sum(day["ocr"]["failed"]) == 1  # the 3 written 2,000 minutes ago are out
    assert sum(day["mail"]["running"]) in (3, 2)


async def test_more_tools_than_shown_keeps_the_busiest_and_says_so(
    ops: App, tenure_dsn: str
) -> None:
    quiet = [(f"t{i:02d}", "queued", 3, 0, 1) for i in range(TOOLS_SHOWN + 3)]
    write(tenure_dsn, [*quiet, ("busy", "queued", 2, 0, 5), ("busy", "succeeded", 2, 1, 4)])
    for name in WINDOWS:
        data = await queue_data(ops.admin, WINDOWS[name])
        shown = series_of(data)
        assert len(shown) == TOOLS_SHOWN and sum(shown["busy"]["queued"]) == 5
        assert data["tools_cut"] and data["tools_seen"] == TOOLS_SHOWN + 4
        note = f"{TOOLS_SHOWN + 4}+ tools in the last {name}: the {TOOLS_SHOWN} busiest are shown"
        assert note in data["fragments"]["queues"]
