"""Every database error as a tenure error with a verdict: one table, read top to bottom.

A statement the database refused or never answered becomes one of `tenure._errors`'
StoreError types, and its *verdict* says what the caller may do next:

- ``retry``: the statement was rolled back (a deadlock, a serialization failure, a lock
  or statement timeout, too many connections, a connection never handed out) and may
  pass if it is sent again;
- ``fail``: sending it again cannot help (a constraint, a value the database cannot
  store, a missing privilege, a schema this tenure does not expect, any other refusal);
- ``uncertain``: no answer came (the connection broke, the server went away mid-statement,
  our own deadline passed): it may or may not have been applied, so whoever repeats it
  must be ready to find it applied.

`RULES` is the table. A rule matches an exact SQLSTATE (five characters) or a SQLSTATE
class (two), exact first; an error without a SQLSTATE (psycopg's own, client-side, or no
answer at all) matches by its type, the first rule in the table's order. Anything
unmatched is a StatementFailed that fails. `store_error` applies it.

The tenant quota (SQLSTATE ``TQ001``, raised by ``tenure_place``) is a row here too; it
becomes the public QuotaExceeded.

A broken link is a ConnectionLost (a DatabaseUnavailable): ``uncertain`` when a statement
was in flight, ``retry`` when there was no connection to send it on (the pool found none
in time, the server refused connections while starting or stopping, or `typed_errors`
says the error came while connecting). Waiters read again after either.

Who applies it: `_connection.typed_errors` and `typed_method`, which `StoreBase` puts
around every method of every group of statements, and the heartbeat's and the listener's
own connections, migrations and probes: nothing above the store sees a psycopg error.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import psycopg_pool

from .._errors import (
    ConnectionLost,
    ConstraintViolation,
    DatabaseBusy,
    DatabaseUnavailable,
    DataRejected,
    ErrorVerdict,
    PermissionDenied,
    QuotaExceeded,
    SchemaMismatch,
    StatementFailed,
    StoreError,
    TenureError,
    one_line,
)

# Raised by tenure_place (migration 0005) when an enqueue would pass its tenant's quota.
QUOTA_SQLSTATE = "TQ001"


@dataclass(frozen=True, slots=True)
class Rule:
    """``match``: a SQLSTATE (5 characters), a SQLSTATE class (2) or a psycopg type."""

    match: str | type[Exception]
    error: type[TenureError]
    verdict: ErrorVerdict
    says: str


R = Rule
RULES: tuple[Rule, ...] = (
    # -- the statement may pass if sent again: it was rolled back ---------------------------
    R("40001", DatabaseBusy, "retry", "serialization failure"),
    R("40P01", DatabaseBusy, "retry", "deadlock detected"),
    R("55P03", DatabaseBusy, "retry", "lock not available"),
    R("55006", DatabaseBusy, "retry", "object in use"),
    R("57014", DatabaseBusy, "retry", "statement cancelled (a statement timeout)"),
    R("53", DatabaseBusy, "retry", "insufficient resources"),
    R("25006", DatabaseBusy, "retry", "read-only transaction (a standby, or a failover)"),
    # No connection to send it on (the server refuses connections while it starts or stops;
    # the pool found none in time, as while the server is away): nothing was sent.
    R("57P03", ConnectionLost, "retry", "the server is starting up or shutting down"),
    R(psycopg_pool.PoolTimeout, ConnectionLost, "retry", "no connection could be had in time"),
    # -- no answer: it may or may not have been applied -------------------------------------
    R("08", ConnectionLost, "uncertain", "connection failure"),
    R("57P01", ConnectionLost, "uncertain", "the server terminated the connection"),
    R("57P02", ConnectionLost, "uncertain", "the server crashed"),
    R("57P05", ConnectionLost, "uncertain", "the session timed out idle"),
    R("40003", DatabaseUnavailable, "uncertain", "statement completion unknown"),
    R(psycopg_pool.PoolClosed, DatabaseUnavailable, "uncertain", "the pool is closed"),
    R(psycopg.OperationalError, ConnectionLost, "uncertain", "the database connection failed"),
    R(psycopg.InterfaceError, DatabaseUnavailable, "uncertain", "the connection is unusable"),
    R(TimeoutError, DatabaseUnavailable, "uncertain", "no answer before the deadline"),
    R(OSError, DatabaseUnavailable, "uncertain", "the network failed"),
    # -- sending it again cannot help --------------------------------------------------------
    R(QUOTA_SQLSTATE, QuotaExceeded, "fail", "tenant quota exceeded"),
    R("23", ConstraintViolation, "fail", "constraint violation"),
    R("22", DataRejected, "fail", "a value the database cannot store"),
    R("54", DataRejected, "fail", "a value past a database limit"),
    R(psycopg.DataError, DataRejected, "fail", "a value the database cannot store"),
    R("42501", PermissionDenied, "fail", "insufficient privilege"),
    R("28", PermissionDenied, "fail", "authorization refused"),
    R("42P01", SchemaMismatch, "fail", "undefined table (is the schema migrated?)"),
    R("42703", SchemaMismatch, "fail", "undefined column (is the schema migrated?)"),
    R("42883", SchemaMismatch, "fail", "undefined function (is the schema migrated?)"),
    R("3F000", SchemaMismatch, "fail", "undefined schema"),
    R(psycopg.IntegrityError, ConstraintViolation, "fail", "constraint violation"),
    R(psycopg.ProgrammingError, StatementFailed, "fail", "the statement is malformed"),
)
DEFAULT = Rule(psycopg.Error, StatementFailed, "fail", "the database refused the statement")

_EXACT = {r.match: r for r in RULES if isinstance(r.match, str) and len(r.match) == 5}
_CLASS = {r.match: r for r in RULES if isinstance(r.match, str) and len(r.match) == 2}
_TYPES = [r for r in RULES if not isinstance(r.match, str)]
assert len(_EXACT) + len(_CLASS) + len(_TYPES) == len(RULES), "a rule matches nothing"


def rule_for(exc: BaseException) -> Rule | None:
    """The table's rule for a database error (or a statement's missing answer); None for
    anything else, which is no database error (a bug, a cancel)."""
    sqlstate = getattr(exc, "sqlstate", None) if isinstance(exc, psycopg.Error) else None
    if sqlstate:
        return _EXACT.get(sqlstate) or _CLASS.get(sqlstate[:2]) or DEFAULT
    for rule in _TYPES:
        assert not isinstance(rule.match, str)
        if isinstance(exc, rule.match):
            return rule
    return DEFAULT if isinstance(exc, psycopg.Error) else None


def store_error(exc: BaseException, *, connecting: bool = False) -> TenureError | None:
    """The tenure error for ``exc`` by `RULES`: a StoreError (or QuotaExceeded) carrying
    its verdict; a StoreError passes through as it is; None for no database error.

    The message names the rule and the SQLSTATE, never the database's own text (it can
    quote the values a statement carried); that error stays reachable as the cause. The
    one exception is libpq's own word on a connection (``connecting``: the error came
    while one was opened, or a connection error without a SQLSTATE): it names the host
    and what failed, never a statement's values, and says what to fix ("Connection
    refused", "password authentication failed"). ``connecting`` also makes a missing
    answer ``retry``: no statement was sent.
    """
    if isinstance(exc, StoreError):
        return exc
    rule = rule_for(exc)
    if rule is None:
        return None
    sqlstate = getattr(exc, "sqlstate", None) if isinstance(exc, psycopg.Error) else None
    if rule.error is QuotaExceeded:
        detail = exc.diag.message_detail if isinstance(exc, psycopg.Error) else None
        return QuotaExceeded(detail or "tenant quota exceeded")
    assert issubclass(rule.error, StoreError)
    constraint = exc.diag.constraint_name if isinstance(exc, psycopg.Error) else None
    where = f"SQLSTATE {sqlstate}" if sqlstate else type(exc).__name__
    if constraint:
        where += f", constraint {constraint}"
    says = rule.says
    if connecting or (sqlstate is None and isinstance(exc, psycopg.OperationalError)):
        says = one_line(exc)  # libpq's word: "connection failed: ... Connection refused"
    verdict = rule.verdict
    if connecting and verdict == "uncertain":
        verdict = "retry"
    return rule.error(
        f"{says} ({where})", verdict=verdict, sqlstate=sqlstate, constraint=constraint
    )


def verdict_of(exc: BaseException) -> ErrorVerdict | None:
    """The verdict on ``exc`` (None: no database error)."""
    error = store_error(exc)
    if error is None:
        return None
    return error.verdict if isinstance(error, StoreError) else "fail"
