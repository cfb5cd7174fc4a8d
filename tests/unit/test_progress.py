"""A tool's progress report (``ctx.report_progress`` sends what `progress_json` makes):
every bad value is a PayloadError, before anything is queued."""

from __future__ import annotations

import pytest

from tenure import PayloadError
from tenure._worker._context import progress_json


@pytest.mark.parametrize(
    ("done", "total", "said"),
    [
        (10**400, None, "progress done must be a finite number, got an integer of 1329 bits"),
        (1, 10**400, "progress total must be a finite number, got an integer of 1329 bits"),
        (-(10**400), None, "progress done must be a finite number, got an integer of 1329 bits"),
        # Past Python's int-to-text limit a repr would raise ValueError itself.
        (10**5000, None, "got an integer of 16610 bits"),
        (float("inf"), None, "progress done must be a finite number, got inf"),
        (True, None, "progress done must be a finite number, got True"),
        ("3", None, "progress done must be a finite number, got '3'"),
        ("x" * 500, None, "got 'xxxxxxxx"),
        (-1, None, "progress done must not be negative, got -1"),
        (-(2**70), None, "must not be negative, got an integer of 71 bits"),
    ],
    ids=lambda value: type(value).__name__,  # pytest's own str() of 10**5000 raises too
)
def test_a_bad_progress_value_is_a_payload_error_with_a_short_message(
    done: object, total: object, said: str
) -> None:
    with pytest.raises(PayloadError) as refused:
        progress_json(done, total, None)  # type: ignore[arg-type]
    assert said in str(refused.value)
    assert len(str(refused.value)) < 120


def test_large_but_finite_progress_is_kept_exactly() -> None:
    assert progress_json(10**300, 10**301, "big") == (
        f'{{"done": {10**300}, "total": {10**301}, "message": "big"}}'
    )
    assert progress_json(2.5, 10.0, None) == '{"done": 2.5, "total": 10.0, "message": null}'
