"""Every list of the journal is in time order: the database's time, then id (issue 22, item 11).

A worker that could not reach the database keeps what it saw and journals it later,
back-dated to when it happened (``record_events``), so its row's id is newer than its
time. Ordered by id, such a row showed after events that happened after it: in
`tenure events` (whose header says "oldest first"), in `tenure jobs show`'s timeline and
in the dashboard's ownership feed.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from tests.integration.store.helpers import new_job

from tenure._cli import main
from tenure._dashboard import _pages
from tenure._store import EventQuery, JournalRow, Store

AGO = 60.0  # seconds the late row is back-dated by


def _late(kind: str, job_id: int, token: int, seconds_ago: float) -> JournalRow:
    """A row a worker saw ``seconds_ago`` and journals only now."""
    return JournalRow(
        kind, job_id, token, 1, "w1", "t", None, None, {}, time.monotonic() - seconds_ago
    )


def _kinds(text: str, *kinds: str) -> list[str]:
    """The kinds named in ``text``, line by line, in the order they are shown."""
    found = re.compile(rf"\b({'|'.join(kinds)})\b")
    return [m.group(1) for line in text.splitlines() if (m := found.search(line))]


async def test_a_back_dated_event_takes_its_place_in_time_everywhere(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    await store.enqueue(new_job("ordered"))
    [job] = await store.claim("w1", {"t": 60_000}, 1)  # job_claimed, dated now
    # A cancel that happened after the claim, and a lost heartbeat from a minute before it,
    # journaled after both (a larger id than either).
    await store.record_events([_late("cancelled", job.id, job.token, 0.0)])
    await store.record_events([_late("heartbeat_lost", job.id, job.token, AGO)])
    in_time = ["heartbeat_lost", "job_claimed", "cancelled"]
    by_id = ["job_claimed", "cancelled", "heartbeat_lost"]

    timeline = await store.job_timeline(job.id)
    assert [e["kind"] for e in timeline] == in_time
    assert [e["kind"] for e in sorted(timeline, key=lambda e: e["id"])] == by_id
    newest_first = await store.find_events(EventQuery(job_id=job.id, limit=10))
    assert [e["kind"] for e in newest_first] == in_time[::-1]
    feed = await store.notable_events(10)  # the dashboard's overview
    assert [e["kind"] for e in feed] == ["cancelled", "heartbeat_lost"]
    page = _pages.events_table(feed, with_job=True)
    assert page.index("kind-cancelled") < page.index("kind-heartbeat_lost")

    kinds = ("job_claimed", "cancelled", "heartbeat_lost")
    assert await asyncio.to_thread(main, ["events", "--job", str(job.id)]) == 0
    out = capsys.readouterr().out
    assert "oldest first" in out and _kinds(out, *kinds) == in_time
    assert await asyncio.to_thread(main, ["jobs", "show", str(job.id)]) == 0
    out = capsys.readouterr().out
    assert _kinds(out.split("timeline", 1)[1], *kinds) == in_time
