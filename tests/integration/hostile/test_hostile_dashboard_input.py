"""Unauthenticated input that used to reach the server as a 500 and an ERROR traceback: a
webhook answer nested 100,000 deep, a NUL in an explorer filter. Each is a 400 naming what
is wrong, no ERROR line is logged, and nothing changes."""

from __future__ import annotations

import logging

import httpx
import pytest
from tests.integration.observe.test_observe_dashboard import open_board, serve
from tests.integration.store.helpers import new_job
from tests.support.workers import closing_app

from tenure import App, InvalidSearch
from tenure._store import Store

__all__ = ["open_board"]  # a fixture, imported for the tests below

pytestmark = pytest.mark.storage

DEEP = b"[" * 100_000 + b"]" * 100_000
JSONB = "which PostgreSQL jsonb refuses"


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_deep_webhook_answer_is_a_400_before_it_is_parsed(
    tenure_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The open route, on a dashboard that asks people for a token: no token needed to
    send it, so no token may be needed to be refused cleanly."""
    for board in serve(tenure_dsn, "dashboard-test-token-0123456789"):
        for body, reason in (
            (DEEP, "the answer is nested deeper than 64 levels"),
            (b'{"a":' * 100_000, "the answer is nested deeper than 64 levels"),
            (b'{"note": "\\u0000"}', f"the answer holds a NUL character, {JSONB}"),
            (b"{not json", "the answer is not JSON"),
        ):
            response = board.post("/waitpoints/wp_some_token", content=body)
            assert (response.status_code, response.json()) == (400, {"error": reason})
        assert board.post("/waitpoints/wp_some_token", json={"ok": 1}).status_code == 409
    assert _errors(caplog) == []


@pytest.mark.parametrize("field", ["tool", "tenant", "key"])
async def test_a_nul_in_an_explorer_filter_is_a_400_naming_the_filter(
    open_board: httpx.Client, tenure_dsn: str, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(tenure_dsn, max_size=1)
    await store.open()
    try:
        await store.enqueue(new_job("k1", tool="alpha"))
    finally:
        await store.close()
    for value in ("\x00", "alpha\x00"):
        api = open_board.get("/api/jobs", params={field: value})
        assert api.status_code == 400, api.text
        assert api.json() == {
            "error": f"{field} holds a NUL or a lone surrogate, which no job can hold"
        }
        page = open_board.get("/jobs", params={field: value})
        assert page.status_code == 400
        assert f"{field} holds a NUL" in page.text
    assert len(open_board.get("/api/jobs").json()["jobs"]) == 1  # the explorer still works
    assert _errors(caplog) == []


def test_search_jobs_refuses_a_nul_as_its_docstring_promises(tenure_dsn: str) -> None:
    for app in closing_app(App(tenure_dsn)):
        with pytest.raises(InvalidSearch, match="tool holds a NUL"):
            app.sync.admin.search(tool="\x00")
        with pytest.raises(InvalidSearch, match="tenant holds a NUL"):
            app.sync.admin.search(tenant="a\x00b", key="k")
        assert app.sync.admin.search(tool="alpha").jobs == ()
