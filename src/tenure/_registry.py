"""Registered tools: the function, its policy, and how it must be run."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard

from ._errors import PolicyError
from ._payload import MAX_PAYLOAD_BYTES
from ._policy import ToolPolicy
from ._signature import Contract, build_contract

TOOL_NAME_MAX = 200
CONCURRENCY_KEY_MAX = 500
MAX_CONCURRENCY_LIMIT = 100_000
TENANT_MAX = 200
MAX_QUOTA = 10_000_000
# A tool's concurrency key: fixed, or computed from the payload at enqueue (None: no key).
KeyRule = str | Callable[[dict[str, Any]], str | None] | None
# Metric labels a tool may declare. A fixed set, so a dashboard can rely on them and a
# typo fails at registration instead of quietly creating a new series.
LABEL_KEYS = ("model", "provider")
LABEL_VALUE_MAX = 100


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    fn: Callable[..., Any]
    policy: ToolPolicy
    is_async: bool
    contract: Contract  # the signature as a typed contract (see tenure._signature)
    labels: tuple[tuple[str, str], ...] = ()  # (key, value) pairs, see check_labels
    priority: int = 0  # default priority of its calls; higher is claimed first
    concurrency_key: KeyRule = None  # see App.tool
    retain: float | None = None  # seconds its ended jobs are kept; None: the app's

    def validate(self, payload: Any, what: str = "payload", limit: int = MAX_PAYLOAD_BYTES) -> str:
        """The canonical JSON of a payload the tool's signature accepts; PayloadError
        listing every problem otherwise (nothing is written)."""
        return self.contract.validate(payload, what, limit)


def check_labels(name: str, labels: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    """Validate a tool's metric labels: keys from LABEL_KEYS, short printable values.

    The values come from code (which model, which provider a tool calls), never from
    a request, so the number of series they create stays what the code declares.
    """
    if not labels:
        return ()
    checked: list[tuple[str, str]] = []
    for key, value in sorted(labels.items()):
        if key not in LABEL_KEYS:
            close = difflib.get_close_matches(key, LABEL_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise PolicyError(
                f"tool {name!r}: unknown label {key!r} (labels: {', '.join(LABEL_KEYS)}){hint}"
            )
        if not is_short_text(value, LABEL_VALUE_MAX):
            raise PolicyError(
                f"tool {name!r}: label {key!r} must be 1-{LABEL_VALUE_MAX} printable characters"
            )
        checked.append((key, value))
    return tuple(checked)


def make_spec(
    name: str,
    fn: Callable[..., Any],
    policy: ToolPolicy,
    labels: Mapping[str, str] | None = None,
    *,
    priority: int = 0,
    concurrency_key: KeyRule = None,
    retain: float | None = None,
) -> ToolSpec:
    if not name or len(name) > TOOL_NAME_MAX or not name.isprintable():
        raise PolicyError(f"tool name must be 1-{TOOL_NAME_MAX} printable characters, got {name!r}")
    if not callable(fn):
        raise PolicyError(f"tool {name!r} must be a function")
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise PolicyError(f"tool {name!r} must take the Context as its first positional argument")
    if concurrency_key is not None and not callable(concurrency_key):
        check_concurrency_key(concurrency_key)
    return ToolSpec(
        name,
        fn,
        policy,
        inspect.iscoroutinefunction(fn),
        build_contract(name, fn),
        check_labels(name, labels),
        check_priority(priority),
        concurrency_key,
        retain,
    )


def check_priority(priority: Any, high: int = 100) -> int:
    """Priorities are small integers: calls with a higher one are claimed first."""
    if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > high:
        raise PolicyError(f"priority must be an integer in [-{high}, {high}], got {priority!r}")
    return priority


def is_short_text(value: object, most: int) -> TypeGuard[str]:
    """A printable string of 1 to ``most`` characters (names, labels, keys)."""
    return isinstance(value, str) and 1 <= len(value) <= most and value.isprintable()


def check_concurrency_key(key: Any) -> str:
    if not is_short_text(key, CONCURRENCY_KEY_MAX):
        raise PolicyError(
            f"concurrency_key must be 1-{CONCURRENCY_KEY_MAX} printable characters, got {key!r}"
        )
    return key


class PatternTable:
    """Integers declared in code for exact names (``"provider:openai"``) or for every
    name with a prefix (``"user:*"``); the exact name wins, then the longest prefix."""

    def __init__(self, what: str, most: int, check_name: Callable[[Any], str]) -> None:
        self._what = what
        self._most = most
        self._check_name = check_name
        self._exact: dict[str, int] = {}
        self._prefixes: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self._exact or self._prefixes)

    def declare(self, pattern: str, value: int) -> None:
        self._check_name(pattern)
        if "*" in pattern[:-1]:
            raise PolicyError(f"{self._what} pattern {pattern!r}: '*' may only end a pattern")
        if isinstance(value, bool) or not isinstance(value, int):
            raise PolicyError(f"{self._what} for {pattern!r} must be an integer, got {value!r}")
        if not 1 <= value <= self._most:
            raise PolicyError(
                f"{self._what} for {pattern!r} is {value}; it must be in [1, {self._most}]"
            )
        table, key = (
            (self._prefixes, pattern[:-1]) if pattern.endswith("*") else (self._exact, pattern)
        )
        if table.get(key, value) != value:
            raise PolicyError(
                f"{self._what} pattern {pattern!r} is already declared as {table[key]}"
            )
        table[key] = value

    def lookup(self, name: str) -> int | None:
        """The value declared for ``name``, or None when no pattern covers it."""
        if name in self._exact:
            return self._exact[name]
        matches = [prefix for prefix in self._prefixes if name.startswith(prefix)]
        return self._prefixes[max(matches, key=len)] if matches else None

    def declared(self) -> str:
        return ", ".join(sorted([*self._exact, *(p + "*" for p in self._prefixes)])) or "none"


class ConcurrencyLimits(PatternTable):
    """How many calls may run at once per concurrency key, declared in code.

    A pattern is an exact key (``"provider:openai"``) or a prefix ending in
    ``*`` (``"user:*"``): then *each* key with that prefix gets the limit, so
    ``user:41`` and ``user:42`` run at most N each. The exact key wins, then
    the longest prefix. The limit is looked up when a call is queued and stored
    with it; a key that matches no declaration is refused, so a typo can never
    mean "unlimited".
    """

    def __init__(self) -> None:
        super().__init__("limit", MAX_CONCURRENCY_LIMIT, check_concurrency_key)

    def resolve(self, key: str) -> int:
        """The limit for ``key``; PolicyError when no declaration covers it."""
        limit = self.lookup(check_concurrency_key(key))
        if limit is None:
            raise PolicyError(
                f"concurrency_key {key!r} matches no declared limit "
                f"(declared: {self.declared()}); declare one with app.limit(pattern, n)"
            )
        return limit


def check_tenant(tenant: Any) -> str:
    if not is_short_text(tenant, TENANT_MAX):
        raise PolicyError(f"tenant must be 1-{TENANT_MAX} printable characters, got {tenant!r}")
    return tenant


class TenantQuotas(PatternTable):
    """How many jobs each tenant may have queued at once, declared in code.

    Patterns work as for limits (``"acme"``, ``"trial:*"``, ``"*"`` for every
    tenant). Unlike a limit, a tenant that matches no quota has none: quotas
    protect the others from a flood, they are not a permission.
    """

    def __init__(self) -> None:
        super().__init__("quota", MAX_QUOTA, check_tenant)


class ToolRegistry(Protocol):
    """What a worker (and its telemetry and the doctor) needs of an app: its tools, their
    limits and schedules, the signing key, the database, and how a call becomes a job.

    `tenure.App` builds one (``app.registry``); the layers below it see only this, never
    the App, so they cannot reach its client, its admin or its connections. The base
    layer cannot name the schedule (``_maintenance``), the job (``_store``) or the
    interceptor (``_intercept``) types, so those members are typed loosely here;
    `tenure._app.Registry` types them.
    """

    @property
    def tools(self) -> Mapping[str, ToolSpec]: ...

    @property
    def limits(self) -> ConcurrencyLimits: ...

    @property
    def schedules(self) -> Mapping[str, Any]:
        """Each `Schedule` by its name."""
        ...

    @property
    def signing_key(self) -> bytes | None: ...

    @property
    def interceptors(self) -> Any:
        """The `Interceptors` around its workers' claims, calls and commits."""
        ...

    @property
    def dsn(self) -> str: ...

    @property
    def new_job(self) -> Callable[..., Any]:
        """How a call of a tool becomes the `NewJob` to write (`Registry.new_job`: the
        payload checked against its signature, its policy, limits and quota applied)."""
        ...

    def schedule_job(self, schedule: Any, key: str) -> Any:
        """The `NewJob` of one slot of a `Schedule`."""
        ...
