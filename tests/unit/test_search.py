"""A job search's filters and cursors are checked before anything is read."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest

from tenure import InvalidSearch
from tenure._search import JobListing, decode_cursor, encode_cursor, job_search, page_of

AT = datetime(2026, 1, 5, 12, 30, tzinfo=UTC)


def listing(job_id: int, at: datetime = AT) -> JobListing:
    return JobListing(
        id=job_id,
        tool="t",
        state="queued",
        tenant="",
        idempotency_key=f"k{job_id}",
        attempt=0,
        max_attempts=3,
        token=0,
        owner=None,
        created_at=at,
        updated_at=at,
        finished_at=None,
        code=None,
    )


def test_a_cursor_names_the_last_row_and_comes_back_as_it() -> None:
    cursor = encode_cursor(listing(42))
    assert "=" not in cursor and cursor.isascii()
    assert decode_cursor(cursor) == (AT, 42)
    assert job_search(cursor=cursor).after == (AT, 42)
    assert job_search(cursor=cursor).params()["after_id"] == 42


@pytest.mark.parametrize(
    "cursor",
    [
        "not base64 !",
        base64.urlsafe_b64encode(b"[1, 2]").decode(),
        base64.urlsafe_b64encode(b'["2026-01-05T12:30:00", 1]').decode(),  # no offset
        base64.urlsafe_b64encode(b'["2026-01-05T12:30:00+00:00", 0]').decode(),
        base64.urlsafe_b64encode(b'["2026-01-05T12:30:00+00:00", true]').decode(),
        base64.urlsafe_b64encode(b'{"a": 1}').decode(),
        "x" * 500,
        "é",
    ],
)
def test_a_cursor_it_did_not_hand_out_is_refused(cursor: str) -> None:
    with pytest.raises(InvalidSearch, match="not a cursor"):
        job_search(cursor=cursor)


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"state": "done"}, "unknown state"),
        ({"job_id": 0}, "positive"),
        ({"job_id": 2**63}, "positive"),
        ({"job_id": True}, "positive"),
        ({"tool": "x" * 501}, "at most 500"),
        ({"since": datetime(2026, 1, 5)}, "timezone-aware"),
        ({"since": AT, "until": AT}, "before until"),
        ({"since": AT, "until": AT - timedelta(seconds=1)}, "before until"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"stat": "failed"}, "unknown filter stat"),
        ({"tool": "\x00"}, "tool holds a NUL"),  # PostgreSQL refuses NUL in text
        ({"tenant": "acme\x00"}, "tenant holds a NUL"),
        ({"key": "k\ud800"}, "key holds a NUL or a lone surrogate"),  # not UTF-8
    ],
)
def test_bad_filters_are_refused_naming_the_filter(
    filters: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidSearch, match=message):
        job_search(**filters)  # type: ignore[arg-type]


def test_a_key_without_a_tenant_is_tenant_empty_and_pages_ask_one_row_more() -> None:
    search = job_search(key="order-1", limit=2)
    assert search.tenant == "" and search.params()["limit"] == 3
    full = page_of([listing(3), listing(2), listing(1)], search)
    assert [j["id"] for j in full.jobs] == [3, 2]
    assert full.next_cursor == encode_cursor(listing(2))
    last = page_of([listing(1)], search)
    assert [j["id"] for j in last.jobs] == [1] and last.next_cursor is None
