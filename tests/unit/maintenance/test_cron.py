"""The cron parser and the slot rules, without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tenure import PolicyError
from tenure._maintenance._cron import Cron
from tenure._maintenance._scheduler import Every, Schedule


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "field", "values"),
    [
        ("* * * * *", "minutes", tuple(range(60))),
        ("*/15 * * * *", "minutes", (0, 15, 30, 45)),
        ("5/20 * * * *", "minutes", (5, 25, 45)),
        ("10-14 * * * *", "minutes", (10, 11, 12, 13, 14)),
        ("0-30/10,45 * * * *", "minutes", (0, 10, 20, 30, 45)),
        ("0 9-17/4 * * *", "hours", (9, 13, 17)),
        ("0 0 1,15,31 * *", "days", frozenset({1, 15, 31})),
        ("0 0 * jan-mar,Dec *", "months", frozenset({1, 2, 3, 12})),
        ("0 0 * * MON-FRI", "weekdays", frozenset({1, 2, 3, 4, 5})),
        ("0 0 * * 5-7", "weekdays", frozenset({0, 5, 6})),  # 7 is Sunday too
        ("0 0 * * sun", "weekdays", frozenset({0})),
        ("@hourly", "minutes", (0,)),
    ],
)
def test_fields_parse(expression: str, field: str, values: object) -> None:
    assert getattr(Cron.parse(expression), field) == values


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("* * * *", "has 4 fields; expected 5"),
        ("* * * * * *", "has 6 fields"),
        ("", "has 0 fields"),
        ("60 * * * *", "minute value 60 is outside 0-59"),
        ("* 24 * * *", "hour value 24 is outside 0-23"),
        ("* * 0 * *", "day value 0 is outside 1-31"),
        ("* * * 13 *", "month value 13 is outside 1-12"),
        ("* * * * 8", "weekday value 8 is outside 0-7"),
        ("*/0 * * * *", "minute step '0' must be a positive number"),
        ("*/x * * * *", "minute step 'x' must be a positive number"),
        ("30-10 * * * *", "minute range '30-10' runs backwards"),
        ("* * * JANUARY *", "month 'JANUARY' is not a number or a name (JAN-DEC)"),
        ("MON * * * *", "minute 'MON' is not a number"),
        ("1,,2 * * * *", "minute '' is not a number"),
        ("0 0 30 2 *", "names no day that exists"),
        ("@fortnightly", "has 1 fields"),
    ],
)
def test_invalid_expressions_say_why(expression: str, message: str) -> None:
    with pytest.raises(PolicyError, match="cron expression") as caught:
        Cron.parse(expression)
    assert message in str(caught.value)


def test_previous_and_next_around_a_moment() -> None:
    cron = Cron.parse("*/15 9-17 * * MON-FRI")
    friday = at("2024-05-03T17:50:30")
    assert cron.previous(friday) == at("2024-05-03T17:45:00")
    assert cron.next(friday) == at("2024-05-06T09:00:00")  # Monday
    assert cron.previous(at("2024-05-06T09:00:00")) == at("2024-05-06T09:00:00")  # inclusive
    assert cron.next(at("2024-05-06T09:00:00")) == at("2024-05-06T09:15:00")  # strictly after
    assert cron.previous(at("2024-05-06T08:59:59")) == at("2024-05-03T17:45:00")


def test_both_day_fields_restricted_means_either() -> None:
    cron = Cron.parse("0 12 13 * FRI")  # Vixie cron: the 13th, or any Friday
    assert cron.next(at("2024-09-10T00:00:00")) == at("2024-09-13T12:00:00")  # a Friday 13th
    assert cron.next(at("2024-09-13T12:00:00")) == at("2024-09-20T12:00:00")  # a Friday
    assert cron.next(at("2024-10-04T12:00:00")) == at("2024-10-11T12:00:00")
    assert cron.next(at("2024-10-11T12:00:00")) == at("2024-10-13T12:00:00")  # a Sunday 13th
    starred = Cron.parse("0 12 */2 * FRI")  # a field starting with '*' means both must hold
    assert starred.next(at("2024-09-10T00:00:00")) == at("2024-09-13T12:00:00")
    assert starred.next(at("2024-09-13T12:00:00")) == at("2024-09-27T12:00:00")


def test_month_ends_leap_days_and_macros() -> None:
    assert Cron.parse("0 0 31 * *").next(at("2024-04-01T00:00:00")) == at("2024-05-31T00:00:00")
    leap = Cron.parse("0 0 29 2 *")
    assert leap.next(at("2024-03-01T00:00:00")) == at("2028-02-29T00:00:00")
    assert leap.previous(at("2027-12-31T00:00:00")) == at("2024-02-29T00:00:00")
    assert Cron.parse("@daily").previous(at("2024-01-01T00:00:00")) == at("2024-01-01T00:00:00")
    assert Cron.parse("@weekly").next(at("2024-05-01T10:00:00")) == at("2024-05-05T00:00:00")
    assert Cron.parse("@yearly").previous(at("2024-05-01T10:00:00")) == at("2024-01-01T00:00:00")


def test_times_are_read_in_utc() -> None:
    from zoneinfo import ZoneInfo

    berlin = datetime(2024, 5, 3, 11, 7, tzinfo=ZoneInfo("Europe/Berlin"))  # 09:07 UTC
    assert Cron.parse("0 9 * * *").previous(berlin) == at("2024-05-03T09:00:00")


def test_every_counts_slots_from_the_epoch() -> None:
    rule = Every(90)
    moment = at("2024-05-03T10:00:00") + timedelta(seconds=10)
    previous = rule.previous(moment)
    assert previous.timestamp() % 90 == 0 and previous <= moment < rule.next(moment)
    assert rule.next(moment) - previous == timedelta(seconds=90)
    for bad in (0.5, 0, -1, float("nan"), True, "60"):
        with pytest.raises(PolicyError, match="every="):
            Every(bad)  # type: ignore[arg-type]


class TestDecide:
    """A slot on time runs; a missed one runs once or is skipped; a new schedule starts next."""

    rule = Cron.parse("0 * * * *")  # hourly: default grace 60 s
    slot = at("2024-05-03T10:00:00")

    def decide(self, now: str, last: str | None, catch_up: str = "once") -> object:
        schedule = Schedule("s", "t", self.rule, catch_up=catch_up)  # type: ignore[arg-type]
        return schedule.decide(at(now), None if last is None else at(last))

    def test_on_time(self) -> None:
        assert self.decide("2024-05-03T10:00:02", "2024-05-03T09:00:00") == (self.slot, True)
        assert self.decide("2024-05-03T10:01:00", "2024-05-03T09:00:00", "skip") == (
            self.slot,
            True,
        )
        assert self.decide("2024-05-03T10:00:02", None, "skip") == (self.slot, True)

    def test_already_decided(self) -> None:
        assert self.decide("2024-05-03T10:59:00", "2024-05-03T10:00:00") is None

    def test_missed_slots(self) -> None:
        late = "2024-05-03T10:01:01"  # past the grace; 06:00..09:00 were missed as well
        assert self.decide(late, "2024-05-03T05:00:00", "once") == (self.slot, True)
        assert self.decide(late, "2024-05-03T05:00:00", "skip") == (self.slot, False)
        assert self.decide(late, None, "once") == (self.slot, False)  # a new schedule

    def test_grace_and_keys(self) -> None:
        every = Schedule("e", "t", Every(10))
        assert every.grace_for(self.slot) == 5.0
        assert Schedule("c", "t", self.rule).grace_for(self.slot) == 60.0
        assert Schedule("g", "t", self.rule, grace=2).grace_for(self.slot) == 2
        assert every.slot_key(self.slot) == "periodic:e:2024-05-03T10:00:00Z"
        half = self.slot + timedelta(milliseconds=500)
        assert every.slot_key(half) == "periodic:e:2024-05-03T10:00:00.500Z"

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"name": ""}, "schedule name must be"),
            ({"name": "a:b"}, "without ':'"),
            ({"catch_up": "all"}, "catch_up='all' must be one of"),
            ({"grace": 0}, "grace=0 must be a positive"),
        ],
    )
    def test_invalid_schedules(self, options: dict[str, object], message: str) -> None:
        with pytest.raises(PolicyError, match=message):
            Schedule(**{"name": "s", "tool": "t", "rule": self.rule, **options})  # type: ignore[arg-type]
