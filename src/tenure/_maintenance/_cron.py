"""Five-field cron expressions, read in UTC: the minutes a schedule fires at.

    ┌ minute        0-59
    │ ┌ hour        0-23
    │ │ ┌ day       1-31
    │ │ │ ┌ month   1-12 or JAN-DEC
    │ │ │ │ ┌ weekday  0-7 or SUN-SAT (0 and 7 are Sunday)
    * * * * *

A field is ``*``, a number, a range ``a-b``, either with a step (``*/15``,
``8-18/2``, ``5/10`` = from 5 to the end), or a comma list of those. As in
Vixie cron, when both day fields are restricted (neither starts with ``*``) a
day matches if either does. Macros: ``@yearly`` (``@annually``), ``@monthly``,
``@weekly``, ``@daily`` (``@midnight``), ``@hourly``. Written here rather than
taken from a dependency: this is all a schedule needs, and it is small enough
to test completely.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from .._errors import PolicyError

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# (field name, lowest, highest, names for lowest.. in order)
FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day", 1, 31, ()),
    ("month", 1, 12, MONTHS),
    ("weekday", 0, 7, WEEKDAYS),
)
DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February at its longest
# A day that matches at all comes round within 8 years (29 February skips 2100).
SEARCH_DAYS = 8 * 366 + 1


def _value(text: str, field: str, low: int, high: int, names: tuple[str, ...]) -> int:
    if text.upper() in names:
        return low + names.index(text.upper())
    if not text.isdigit():
        kind = "a number" + (f" or a name ({names[0]}-{names[-1]})" if names else "")
        raise PolicyError(f"{field} {text!r} is not {kind}")
    value = int(text)
    if not low <= value <= high:
        raise PolicyError(f"{field} value {value} is outside {low}-{high}")
    return value


def _field(text: str, field: str, low: int, high: int, names: tuple[str, ...]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        span, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise PolicyError(f"{field} step {step_text!r} must be a positive number")
            step = int(step_text)
        if span == "*":
            first, last = low, high
        elif "-" in span:
            start, _, end = span.partition("-")
            first = _value(start, field, low, high, names)
            last = _value(end, field, low, high, names)
            if first > last:
                raise PolicyError(f"{field} range {span!r} runs backwards")
        else:
            first = _value(span, field, low, high, names)
            last = high if slash else first
        values.update(range(first, last + 1, step))
    return frozenset(values)


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed expression; `previous` and `next` find its slots around a moment."""

    expression: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool
    any_weekday: bool

    @classmethod
    def parse(cls, expression: str) -> Cron:
        """Parse ``expression``; anything it cannot mean raises PolicyError saying why."""
        if not isinstance(expression, str):
            raise PolicyError(f"a cron expression must be a string, got {expression!r}")
        text = MACROS.get(expression.strip().lower(), expression)
        parts = text.split()
        if len(parts) != len(FIELDS):
            raise PolicyError(
                f"cron expression {expression!r} has {len(parts)} fields; expected 5 "
                "(minute hour day month weekday) or one of " + ", ".join(MACROS)
            )
        try:
            minute, hour, day, month, weekday = (
                _field(part, *spec) for part, spec in zip(parts, FIELDS, strict=True)
            )
        except PolicyError as exc:
            raise PolicyError(f"cron expression {expression!r}: {exc}") from None
        cron = cls(
            expression=expression,
            minutes=tuple(sorted(minute)),
            hours=tuple(sorted(hour)),
            days=day,
            months=month,
            weekdays=frozenset(w % 7 for w in weekday),
            any_day=parts[2].startswith("*"),
            any_weekday=parts[4].startswith("*"),
        )
        if cron.any_weekday and not any(
            d <= DAYS_IN_MONTH[m - 1] for m in cron.months for d in cron.days
        ):
            raise PolicyError(f"cron expression {expression!r} names no day that exists")
        return cron

    def _day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        by_day = day.day in self.days
        by_weekday = day.isoweekday() % 7 in self.weekdays
        if self.any_day or self.any_weekday:
            return by_day and by_weekday
        return by_day or by_weekday

    def previous(self, moment: datetime) -> datetime | None:
        """The latest slot at or before ``moment``."""
        moment = moment.astimezone(UTC)
        day = moment.date()
        for _ in range(SEARCH_DAYS):
            if self._day_matches(day):
                times = [
                    (h, m)
                    for h in self.hours
                    for m in self.minutes
                    if day < moment.date() or (h, m) <= (moment.hour, moment.minute)
                ]
                if times:
                    return datetime.combine(day, time(*times[-1]), UTC)
            day -= timedelta(days=1)
        return None

    def next(self, moment: datetime) -> datetime | None:
        """The earliest slot strictly after ``moment``."""
        start = moment.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
        day = start.date()
        for _ in range(SEARCH_DAYS):
            if self._day_matches(day):
                for h in self.hours:
                    for m in self.minutes:
                        if day > start.date() or (h, m) >= (start.hour, start.minute):
                            return datetime.combine(day, time(h, m), UTC)
            day += timedelta(days=1)
        return None
