"""Text a caller or a tool chose is shown as data, never interpreted (issue 22, item 2).

An MCP key holds ``[/]`` (rich markup's closing tag: `tenure jobs show` exited 1 on it),
``[link=…]`` (a hyperlink in the terminal) and ``:key:`` (rich's emoji code: every MCP key
showed as ``mcp🔑…``); a tool's progress message holds terminal controls (``ESC ]0;…BEL``
sets the window title, ``ESC [2J`` clears the screen). The command, the dashboard and
the log lines must show each as the characters it is, with every control visible.
"""

from __future__ import annotations

import asyncio

import pytest
from tests.integration.store.helpers import new_job

from tenure._cli import main
from tenure._dashboard import _pages
from tenure._store import LeaseConnection, Store
from tenure._text import json_text

KEY = "mcp:key:[/][link=https://evil.example]click[/link][bold]"
OWNER = "w[/]:key:"
MESSAGE = "step 3\x1b]0;owned\x07\x1b[2J\u009b31m\u202egnp.exe"
RAW = ("\x1b", "\x07", "\u009b", "\u202e", "🔑")


def _clean(text: str) -> None:
    """Nothing a terminal would act on, and no emoji made from a code."""
    for char in RAW:
        assert char not in text, (char, text)


async def test_jobs_show_and_list_print_keys_owners_and_progress_as_text(
    store: Store, tenure_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job = await store.enqueue(new_job(KEY))
    [claimed] = await store.claim(OWNER, {"t": 60_000}, 1)
    lease = LeaseConnection(tenure_dsn)
    try:
        report = (claimed.id, claimed.token, json_text({"done": 3, "total": 9, "message": MESSAGE}))
        assert await asyncio.to_thread(lease.report_progress, OWNER, [report], 5) == {job.id}
    finally:
        lease.close()

    assert await asyncio.to_thread(main, ["jobs", "show", str(job.id)]) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert KEY in out  # every character of it, none taken as markup
    assert OWNER in out
    assert "step 3\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202egnp.exe" in out

    assert await asyncio.to_thread(main, ["jobs", "list"]) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert OWNER in out

    assert await asyncio.to_thread(main, ["events", "--job", str(job.id)]) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert OWNER in out

    detail = await store.job_detail(job.id)
    cell = _pages.progress_cell(detail["progress"])  # the dashboard's job page
    _clean(cell)
    assert "\\x1b]0;owned\\x07" in cell
    _clean(_pages.running_table(await store.running_leases(10), detail["db_now"]))
