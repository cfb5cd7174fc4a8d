"""The dashboard's job explorer: ``/jobs`` (HTML) and ``/api/jobs`` (JSON), and what a bulk
cancel or retry of the selected jobs answered, job by job.

A search is read from the query string (state, tool, tenant, created since/until, an id,
an idempotency key, a cursor), checked by `tenure._search` before anything runs, and sent as
one statement (`Store.search_jobs`, the statement behind `App.admin.search`). Pages follow a
keyset cursor, never an offset. Every value shown is escaped; no payload, result or error
message is ever selected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from .._errors import InvalidSearch
from .._search import STATES, JobPage, JobSearch, job_search
from ._pages import clock, h

MAX_BULK = 100  # jobs one bulk action may name (two pages of the default size)
FIELDS = ("id", "key", "state", "tool", "tenant", "since", "until")


def _moment(name: str, text: str) -> datetime | None:
    """An ISO 8601 time; without an offset (a browser's datetime-local field) it is UTC."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidSearch(f"{name} must be a time like 2026-01-31T14:00 (UTC)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def search_from(query: Mapping[str, str]) -> JobSearch:
    """The search a query string asks for; empty fields are absent filters."""
    raw_id = query.get("id", "").strip()
    if raw_id and not (raw_id.isascii() and raw_id.isdigit() and len(raw_id) <= 19):
        raise InvalidSearch("a job id is a positive integer")
    limit = query.get("limit", "")
    if limit and not (limit.isascii() and limit.isdigit() and len(limit) <= 4):
        raise InvalidSearch("limit must be a number")
    return job_search(
        job_id=int(raw_id) if raw_id else None,
        key=query.get("key") or None,
        state=query.get("state") or None,
        tool=query.get("tool") or None,
        tenant=query.get("tenant") or None,
        since=_moment("since", query.get("since", "")),
        until=_moment("until", query.get("until", "")),
        cursor=query.get("cursor") or None,
        limit=int(limit) if limit else 50,
    )


def _kept(query: Mapping[str, str]) -> dict[str, str]:
    """The filters to carry to the next page (never the cursor itself)."""
    return {name: query[name] for name in (*FIELDS, "limit") if query.get(name)}


def listing_json(page: JobPage) -> dict[str, Any]:
    """The JSON answer of ``/api/jobs``: the rows (times in ISO 8601) and the next cursor."""
    jobs = [
        {
            key: value.isoformat() if isinstance(value, datetime) else value
            for key, value in row.items()
        }
        for row in page.jobs
    ]
    return {"jobs": jobs, "next_cursor": page.next_cursor}


def _form(query: Mapping[str, str]) -> str:
    def text(name: str, label: str, kind: str = "text", hint: str = "") -> str:
        return (
            f'<label>{label}<input type="{kind}" name="{name}" id="f-{name}" '
            f'value="{h(query.get(name, ""))}"{hint}></label>'
        )

    chosen = query.get("state", "")
    options = "".join(
        f'<option value="{s}"{" selected" if s == chosen else ""}>{s or "any"}</option>'
        for s in ("", *STATES)
    )
    return (
        '<form method="get" action="/jobs" class="explorer-filters" id="filters">'
        f'<label>state<select name="state" id="f-state">{options}</select></label>'
        + text("tool", "tool")
        + text("tenant", "tenant")
        + text("since", "created since (UTC)", "datetime-local", ' step="1"')
        + text("until", "until (UTC)", "datetime-local", ' step="1"')
        + text("id", "job id", "text", ' inputmode="numeric"')
        + text("key", "idempotency key")
        + '<button type="submit" id="search">Search</button>'
        '<a href="/jobs" class="reset">clear</a></form>'
    )


def _rows(page: JobPage, can_act: bool) -> str:
    cells = []
    for job in page.jobs:
        pick = (
            f'<td><input type="checkbox" name="job" value="{job["id"]}" '
            f'aria-label="select job {job["id"]}"></td>'
            if can_act
            else ""
        )
        cells.append(
            f'<tr data-job="{job["id"]}" data-state="{h(job["state"])}">{pick}'
            f'<td><a href="/jobs/{job["id"]}">{job["id"]}</a></td><td>{h(job["tool"])}</td>'
            f'<td class="state state-{h(job["state"])}">{h(job["state"])}</td>'
            f'<td>{h(job["tenant"] or "-")}</td><td class="key">{h(job["idempotency_key"])}</td>'
            f'<td>{job["attempt"]}/{job["max_attempts"]}</td><td class="token">{job["token"]}</td>'
            f"<td>{h(job['owner'] or '-')}</td><td>{h(job['code'] or '-')}</td>"
            f"<td>{h(_when(job['created_at']))}</td><td>{clock(job['finished_at'])}</td></tr>"
        )
    pick_head = "<th></th>" if can_act else ""
    return (
        f'<table class="jobs"><thead><tr>{pick_head}<th>job</th><th>tool</th><th>state</th>'
        "<th>tenant</th><th>idempotency key</th><th>attempt</th><th>token</th><th>owner</th>"
        "<th>code</th><th>created (UTC)</th><th>finished</th></tr></thead>"
        f"<tbody>{''.join(cells)}</tbody></table>"
    )


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def explorer(
    query: Mapping[str, str],
    page: JobPage | None,
    *,
    error: str | None,
    csrf: str | None,
    can_act: bool,
) -> str:
    """The explorer's body: the filters, the page (or the search's error), the pager."""
    parts = [f"<section><h2>Jobs</h2>{_form(query)}"]
    if error is not None:
        parts.append(f'<p class="error" id="search-error">{h(error)}</p></section>')
        return "".join(parts)
    assert page is not None
    if not page.jobs:
        parts.append('<p class="empty" id="no-jobs">no job matches</p>')
    else:
        table = _rows(page, can_act)
        if can_act:
            parts.append(
                '<form method="post" action="/jobs/bulk" id="bulk">'
                f'<input type="hidden" name="csrf" value="{h(csrf)}">{table}'
                '<p class="bulk-actions">With the selected jobs: '
                '<button type="submit" name="action" value="cancel" id="bulk-cancel">Cancel'
                '</button> <button type="submit" name="action" value="retry" id="bulk-retry">'
                f"Retry</button> (at most {MAX_BULK})</p></form>"
            )
        else:
            parts.append(
                table + '<p class="hint actions-off">Bulk cancel and retry need an access '
                "token: start the dashboard with TENURE_DASHBOARD_TOKEN set.</p>"
            )
    pager = []
    if query.get("cursor"):
        first = urlencode(_kept(query))
        pager.append(f'<a href="/jobs?{h(first)}" id="first-page">first page</a>')
    if page.next_cursor is not None:
        after = urlencode({**_kept(query), "cursor": page.next_cursor})
        pager.append(f'<a href="/jobs?{h(after)}" id="next-page">next page</a>')
    parts.append(f'<p class="pager">{" · ".join(pager)}</p></section>')
    return "".join(parts)


def bulk_ids(values: Sequence[str]) -> list[int]:
    """The jobs a bulk form names, each once, in order; InvalidSearch past MAX_BULK or on
    anything that is not a job id."""
    ids: list[int] = []
    for value in values:
        if not (value.isascii() and value.isdigit() and 0 < len(value) <= 19):
            raise InvalidSearch("a bulk action names jobs by their ids")
        if int(value) not in ids:
            ids.append(int(value))
    if not ids:
        raise InvalidSearch("select at least one job")
    if len(ids) > MAX_BULK:
        raise InvalidSearch(f"a bulk action takes at most {MAX_BULK} jobs")
    return ids


def bulk_result(action: str, results: Sequence[tuple[int, str, bool]]) -> str:
    """What the bulk action did to each job: (id, what happened, whether it acted)."""
    done = sum(1 for _, _, acted in results if acted)
    rows = "".join(
        f'<tr data-job="{job_id}" class="{"acted" if acted else "refused"}">'
        f'<td><a href="/jobs/{job_id}">{job_id}</a></td><td>{h(text)}</td></tr>'
        for job_id, text, acted in results
    )
    return (
        f'<section><h2>Bulk {h(action)}</h2><p class="notice" id="bulk-summary">'
        f"{done} of {len(results)} jobs: {h(action)} done; the others say why not.</p>"
        f'<table class="bulk-results"><thead><tr><th>job</th><th>result</th></tr></thead>'
        f'<tbody>{rows}</tbody></table><p><a href="/jobs" id="back">back to the jobs</a></p>'
        "</section>"
    )
