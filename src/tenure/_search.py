"""A job search (the dashboard's explorer, `App.admin.search`): its filters, checked before
any statement runs, and its pages, each with an opaque keyset cursor to the next.

Why a keyset cursor and not an offset: an offset makes the database walk and drop every row
before the page, so page 1,000 of a big table costs a thousand pages; a cursor names the
last row seen, ``(created_at, id)``, and the next page is one index range scan from there
whatever its depth. The cursor is opaque to callers (base64 of that pair) and checked when
it comes back: a tampered one is an `InvalidSearch`, never a statement error.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict, Unpack, get_args

from ._errors import InvalidSearch
from ._states import JobState

MAX_PAGE = 500
DEFAULT_PAGE = 50
MAX_FILTER = 500  # the longest idempotency key; tools and tenants are shorter
MAX_CURSOR = 200
MAX_JOB_ID = 2**63 - 1
STATES: tuple[str, ...] = get_args(JobState)


class JobListing(TypedDict):
    """One job in a search's page: what an operator may see, never payload, result or
    error message (``code`` is the error's code)."""

    id: int
    tool: str
    state: JobState
    tenant: str
    idempotency_key: str
    attempt: int
    max_attempts: int
    token: int
    owner: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    code: str | None


@dataclass(frozen=True, slots=True)
class JobSearch:
    """Checked filters of one search; every one optional. ``key`` finds by idempotency key
    within ``tenant`` ('' when not given, as keys are unique per tenant)."""

    job_id: int | None = None
    key: str | None = None
    state: str | None = None
    tool: str | None = None
    tenant: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    after: tuple[datetime, int] | None = None
    limit: int = DEFAULT_PAGE

    def params(self) -> dict[str, Any]:
        """The statement's parameters (one more row than the page: is there a next one?)."""
        at, after_id = self.after if self.after is not None else (None, None)
        return {
            "id": self.job_id,
            "key": self.key,
            "state": self.state,
            "tool": self.tool,
            "tenant": self.tenant,
            "since": self.since,
            "until": self.until,
            "after_at": at,
            "after_id": after_id,
            "limit": self.limit + 1,
        }


class SearchFilters(TypedDict, total=False):
    """A job search's filters, every one optional (`App.admin.search`, `job_search`)."""

    job_id: int | None
    key: str | None
    state: str | None
    tool: str | None
    tenant: str | None
    since: datetime | None
    until: datetime | None
    cursor: str | None
    limit: int


def job_search(**filters: Unpack[SearchFilters]) -> JobSearch:
    """Check every filter (InvalidSearch, naming the bad one) and decode the cursor."""
    unknown = sorted(set(filters) - set(SearchFilters.__annotations__))
    if unknown:
        known = ", ".join(SearchFilters.__annotations__)
        raise InvalidSearch(f"unknown filter {', '.join(unknown)}: one of {known}")
    job_id, key, state = filters.get("job_id"), filters.get("key"), filters.get("state")
    tool, tenant = filters.get("tool"), filters.get("tenant")
    since, until = filters.get("since"), filters.get("until")
    cursor, limit = filters.get("cursor"), filters.get("limit", DEFAULT_PAGE)
    if job_id is not None and (
        isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id <= MAX_JOB_ID
    ):
        raise InvalidSearch(f"a job id is a positive 64-bit integer, got {job_id!r}")
    if state is not None and state not in STATES:
        raise InvalidSearch(f"unknown state {state!r}: one of {', '.join(STATES)}")
    for name, text in (("key", key), ("tool", tool), ("tenant", tenant)):
        if text is not None and (not isinstance(text, str) or len(text) > MAX_FILTER):
            raise InvalidSearch(f"{name} must be text of at most {MAX_FILTER} characters")
        if text is not None and not _storable(text):
            raise InvalidSearch(f"{name} holds a NUL or a lone surrogate, which no job can hold")
    for name, moment in (("since", since), ("until", until)):
        if moment is not None and (not isinstance(moment, datetime) or moment.tzinfo is None):
            raise InvalidSearch(f"{name} must be a timezone-aware datetime")
    if since is not None and until is not None and since >= until:
        raise InvalidSearch("since must be before until")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidSearch(f"limit must be 1-{MAX_PAGE}, got {limit!r}")
    if key is not None and tenant is None:
        tenant = ""  # keys are unique per tenant; no tenant is tenant ''
    after = None if cursor is None or cursor == "" else decode_cursor(cursor)
    return JobSearch(job_id, key, state, tool, tenant, since, until, after, limit)


def _storable(text: str) -> bool:
    """Text PostgreSQL can compare: no NUL, valid UTF-8 (a query with either would fail)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode_cursor(row: JobListing) -> str:
    """The cursor after ``row``: base64url of its (created_at, id), without padding."""
    text = json.dumps([row["created_at"].isoformat(), row["id"]], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR or not cursor.isascii():
        raise InvalidSearch("not a cursor this search handed out")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, job_id = json.loads(raw)
        moment = datetime.fromisoformat(at)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidSearch("not a cursor this search handed out") from None
    if (
        moment.tzinfo is None
        or isinstance(job_id, bool)
        or not isinstance(job_id, int)
        or not 0 < job_id <= MAX_JOB_ID
    ):
        raise InvalidSearch("not a cursor this search handed out")
    return moment, job_id


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of a job search, newest first: its jobs and the cursor to the next page
    (None on the last). Pass ``next_cursor`` back as ``cursor=`` with the same filters."""

    jobs: tuple[JobListing, ...] = field(default_factory=tuple)
    next_cursor: str | None = None


def page_of(rows: list[JobListing], search: JobSearch) -> JobPage:
    """The page from the statement's rows (it asked for one more than the page)."""
    shown = rows[: search.limit]
    more = len(rows) > search.limit
    return JobPage(tuple(shown), encode_cursor(shown[-1]) if more and shown else None)
