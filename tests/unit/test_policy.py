import math

import pytest

from tenure import LeasePolicy, PolicyError, RetryPolicy, ToolPolicy


def test_defaults_satisfy_the_interval_rule() -> None:
    policy = LeasePolicy()
    assert policy.lease > policy.missed_beats * policy.heartbeat + policy.jitter
    assert policy.margin == policy.jitter


def test_interval_rule_violation_names_the_numbers_and_the_fix() -> None:
    with pytest.raises(PolicyError) as caught:
        LeasePolicy(lease=35, heartbeat=30, jitter=20, missed_beats=1)
    message = str(caught.value)
    assert "1·30 + 20 = 50" in message
    assert "lease above 50" in message
    assert "heartbeat below 15" in message


def test_equality_is_not_enough() -> None:
    with pytest.raises(PolicyError):
        LeasePolicy(lease=80, heartbeat=30, jitter=20, missed_beats=2)
    LeasePolicy(lease=80.001, heartbeat=30, jitter=20, missed_beats=2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lease": math.nan},
        {"lease": math.inf},
        {"lease": -1},
        {"lease": 0.1},
        {"lease": 10 * 24 * 3600},
        {"heartbeat": 0},
        {"heartbeat": "30"},
        {"jitter": -1},
        {"missed_beats": 0},
        {"missed_beats": 1.5},
        {"missed_beats": True},
        {"safety_margin": 1000},
    ],
)
def test_lease_values_outside_caps_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(PolicyError):
        LeasePolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"max_attempts": 101},
        {"max_attempts": 2.0},
        {"backoff": -1},
        {"backoff": math.nan},
        {"factor": 0.5},
        {"jitter": 2},
        {"permanent": ("x",)},
    ],
)
def test_retry_values_outside_caps_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(PolicyError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_time_limit_is_capped() -> None:
    with pytest.raises(PolicyError):
        ToolPolicy(time_limit=8 * 24 * 3600)
    with pytest.raises(PolicyError):
        ToolPolicy(time_limit=math.nan)


def test_backoff_grows_exponentially_within_jitter_and_cap() -> None:
    policy = RetryPolicy(backoff=1.0, factor=2.0, max_backoff=10.0, jitter=0.2)
    for attempt, base in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0)]:
        for _ in range(50):
            assert base * 0.8 <= policy.delay(attempt) <= base * 1.2
    assert all(policy.delay(30) <= 10.0 for _ in range(50))
    assert RetryPolicy(jitter=0.0, backoff=1, factor=3).delay(3) == 9.0
