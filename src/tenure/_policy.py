"""Lease and retry policies, validated when a tool is registered.

Durations come from the tool's registration (capped here), never from a
request or a model's output. The interval rule ``L > R·H + J`` is checked
eagerly so that a lease which an ordinary delay could take away from a live
worker never reaches production.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from ._errors import PolicyError

# Hard caps: values outside are refused, never silently clamped.
MIN_LEASE = 0.5
MAX_LEASE = 24 * 3600.0
MIN_HEARTBEAT = 0.1
MAX_TIME_LIMIT = 7 * 24 * 3600.0
MAX_ATTEMPTS = 100
MAX_MISSED_BEATS = 10
MAX_BACKOFF = 24 * 3600.0


def _positive(name: str, value: float, *, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value):
        raise PolicyError(f"{name} must be finite, got {value!r}")
    if not low <= value <= high:
        raise PolicyError(f"{name}={value:g} s is outside the allowed range [{low:g}, {high:g}] s")
    return float(value)


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    """Lease L, heartbeat H, jitter reserve J and tolerated missed beats R.

    The defaults are a common first choice, not a rule: a 90 s lease renewed every
    30 s survives two lost heartbeats and 20 s of jitter (90 > 2·30 + 20).
    ``safety_margin`` is the lease time a tool must still have before an
    irreversible step (`Context.ensure_owned`); it defaults to J.
    """

    lease: float = 90.0
    heartbeat: float = 30.0
    jitter: float = 20.0
    missed_beats: int = 2
    safety_margin: float | None = None

    def __post_init__(self) -> None:
        _positive("lease", self.lease, low=MIN_LEASE, high=MAX_LEASE)
        _positive("heartbeat", self.heartbeat, low=MIN_HEARTBEAT, high=MAX_LEASE)
        _positive("jitter", self.jitter, low=0.0, high=MAX_LEASE)
        if self.safety_margin is not None:
            _positive("safety_margin", self.safety_margin, low=0.0, high=self.lease)
        beats = self.missed_beats
        if (
            isinstance(beats, bool)
            or not isinstance(beats, int)
            or not 1 <= beats <= MAX_MISSED_BEATS
        ):
            raise PolicyError(
                f"missed_beats must be an integer in [1, {MAX_MISSED_BEATS}], got {beats!r}"
            )
        budget = beats * self.heartbeat + self.jitter
        if not self.lease > budget:
            longest_beat = (self.lease - self.jitter) / beats
            raise PolicyError(
                f"lease {self.lease:g} s must exceed missed_beats·heartbeat + jitter = "
                f"{beats}·{self.heartbeat:g} + {self.jitter:g} = {budget:g} s; "
                f"use a lease above {budget:g} s"
                + (f" or a heartbeat below {longest_beat:g} s" if longest_beat > 0 else "")
            )

    @property
    def margin(self) -> float:
        return self.jitter if self.safety_margin is None else self.safety_margin

    @property
    def lease_ms(self) -> int:
        return round(self.lease * 1000)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts a job gets and how long it waits between them.

    Backoff is exponential with jitter (``base · factor^(attempt-1)``, capped,
    then scaled by a random factor in ``[1 - jitter, 1 + jitter]``) so that a
    receiver that failed for everyone is not hit again by everyone at once.
    """

    max_attempts: int = 5
    backoff: float = 1.0
    factor: float = 2.0
    max_backoff: float = 300.0
    jitter: float = 0.2
    permanent: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            raise PolicyError(f"max_attempts must be an integer, got {attempts!r}")
        if not 1 <= attempts <= MAX_ATTEMPTS:
            raise PolicyError(f"max_attempts={attempts} is outside [1, {MAX_ATTEMPTS}]")
        _positive("backoff", self.backoff, low=0.0, high=MAX_BACKOFF)
        _positive("max_backoff", self.max_backoff, low=0.0, high=MAX_BACKOFF)
        _positive("factor", self.factor, low=1.0, high=100.0)
        _positive("retry jitter", self.jitter, low=0.0, high=1.0)
        for kind in self.permanent:
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                raise PolicyError(f"permanent must list exception classes, got {kind!r}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        exponent = min(max(attempt - 1, 0), 64)
        raw = min(self.max_backoff, self.backoff * self.factor**exponent)
        spread = (rng or random).uniform(1 - self.jitter, 1 + self.jitter)
        return max(0.0, min(self.max_backoff, raw * spread))


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """Everything tenure needs to run one tool: lease, retries and the time limit.

    The time limit guards quality, the lease guards ownership: a live but stuck
    call is stopped by its time limit, never kept forever by heartbeats.
    """

    lease: LeasePolicy = field(default_factory=LeasePolicy)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    time_limit: float = 600.0

    def __post_init__(self) -> None:
        _positive("time_limit", self.time_limit, low=0.01, high=MAX_TIME_LIMIT)
