"""The store's one table of database errors (`tenure._store._errors.RULES`): every error
PostgreSQL can raise gets a tenure type and a verdict, and a constraint is never uncertain."""

from __future__ import annotations

import psycopg
import psycopg.errors
import psycopg_pool
import pytest

from tenure._errors import (
    ConnectionLost,
    ConstraintViolation,
    DatabaseBusy,
    DatabaseUnavailable,
    DataRejected,
    PermissionDenied,
    QuotaExceeded,
    SchemaMismatch,
    StatementFailed,
    StoreError,
)
from tenure._store import RULES, store_error
from tenure._store._errors import rule_for, verdict_of

EVERY_SQLSTATE = sorted(psycopg.errors._sqlcodes)  # every code psycopg knows (PostgreSQL's)


def raised(sqlstate: str, message: str = "the server's text") -> psycopg.Error:
    return psycopg.errors.lookup(sqlstate)(message)


def test_every_sqlstate_has_a_tenure_type_and_a_verdict() -> None:
    assert len(EVERY_SQLSTATE) > 200
    for sqlstate in EVERY_SQLSTATE:
        error = store_error(raised(sqlstate))
        assert isinstance(error, StoreError), sqlstate
        assert error.verdict in ("retry", "fail", "uncertain"), sqlstate


def test_a_constraint_violation_is_never_uncertain() -> None:
    for sqlstate in (s for s in EVERY_SQLSTATE if s.startswith("23")):
        error = store_error(raised(sqlstate))
        assert isinstance(error, ConstraintViolation), sqlstate
        assert error.verdict == "fail", sqlstate
    # ... nor one psycopg raises without a SQLSTATE.
    assert verdict_of(psycopg.IntegrityError("client side")) == "fail"


@pytest.mark.parametrize(
    ("sqlstate", "kind", "verdict"),
    [
        ("23505", ConstraintViolation, "fail"),  # unique
        ("23514", ConstraintViolation, "fail"),  # check
        ("22P05", DataRejected, "fail"),  # untranslatable character (a NUL in jsonb)
        ("22003", DataRejected, "fail"),  # numeric out of range
        ("54000", DataRejected, "fail"),  # a jsonb past its size limit
        ("42501", PermissionDenied, "fail"),
        ("28P01", PermissionDenied, "fail"),
        ("42P01", SchemaMismatch, "fail"),
        ("42703", SchemaMismatch, "fail"),
        ("42601", StatementFailed, "fail"),  # a syntax error: a bug, not weather
        ("XX000", StatementFailed, "fail"),
        ("40001", DatabaseBusy, "retry"),
        ("40P01", DatabaseBusy, "retry"),
        ("55P03", DatabaseBusy, "retry"),
        ("57014", DatabaseBusy, "retry"),  # statement_timeout: rolled back
        ("53300", DatabaseBusy, "retry"),  # too many connections
        ("25006", DatabaseBusy, "retry"),  # a standby refuses writes (failover)
        ("08006", ConnectionLost, "uncertain"),
        ("57P01", ConnectionLost, "uncertain"),  # admin shutdown mid-statement
        ("57P02", ConnectionLost, "uncertain"),
        ("57P03", ConnectionLost, "retry"),  # cannot connect now: nothing was sent
        ("40003", DatabaseUnavailable, "uncertain"),  # statement completion unknown
    ],
)
def test_the_table_says(sqlstate: str, kind: type[StoreError], verdict: str) -> None:
    error = store_error(raised(sqlstate))
    assert type(error) is kind
    assert isinstance(error, StoreError)
    assert error.verdict == verdict and error.sqlstate == sqlstate


def test_errors_without_a_sqlstate_match_by_type() -> None:
    cases: list[tuple[BaseException, type[StoreError], str]] = [
        (psycopg.OperationalError("server closed"), ConnectionLost, "uncertain"),
        (psycopg.InterfaceError("the connection is closed"), DatabaseUnavailable, "uncertain"),
        (psycopg_pool.PoolTimeout("couldn't get a connection"), ConnectionLost, "retry"),
        (psycopg_pool.PoolClosed("the pool is closed"), DatabaseUnavailable, "uncertain"),
        (TimeoutError(), DatabaseUnavailable, "uncertain"),
        (ConnectionResetError(), DatabaseUnavailable, "uncertain"),
        (psycopg.DataError("PostgreSQL text fields cannot contain NUL"), DataRejected, "fail"),
        (psycopg.ProgrammingError("cannot adapt"), StatementFailed, "fail"),
        (psycopg.DatabaseError("odd"), StatementFailed, "fail"),
    ]
    for exc, kind, verdict in cases:
        error = store_error(exc)
        assert type(error) is kind, exc
        assert isinstance(error, StoreError) and error.verdict == verdict, exc


def test_what_is_no_database_error_gets_no_verdict() -> None:
    assert store_error(ValueError("a bug")) is None
    assert verdict_of(KeyError("a bug")) is None


class OverQuota(psycopg.DatabaseError):
    """What tenure_place raises (a custom SQLSTATE psycopg has no class of its own for)."""

    sqlstate = "TQ001"


def test_a_store_error_passes_through_and_the_quota_is_the_public_type() -> None:
    busy = DatabaseBusy("x", sqlstate="40001")
    assert store_error(busy) is busy
    assert isinstance(store_error(OverQuota("over")), QuotaExceeded)
    assert verdict_of(OverQuota("over")) == "fail"
    plain = store_error(psycopg.errors.lookup("P0001")("quota"))
    assert isinstance(plain, StatementFailed)  # a plain RAISE is no quota


def test_the_message_never_repeats_the_servers_text() -> None:
    """The server's text can quote the values a statement carried (a payload)."""
    exc = raised("22P02", 'invalid input syntax for type json: "card 4111 1111"')
    error = store_error(exc)
    assert error is not None and "4111" not in str(error)
    assert "22P02" in str(error)


def test_the_table_is_unambiguous() -> None:
    keys = [rule.match for rule in RULES]
    assert len(keys) == len(set(keys))
    for rule in RULES:
        if isinstance(rule.match, str):
            assert len(rule.match) in (2, 5), rule
            if rule.match in psycopg.errors._sqlcodes:  # each exact rule is the one it finds
                assert rule_for(raised(rule.match)) is rule


def test_an_error_while_connecting_is_retried_and_says_what_libpq_said() -> None:
    """No statement was sent, so a missing answer is ``retry``; libpq's own line names the
    host and what failed (never a statement's values), which is what an operator fixes."""
    exc = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 1 failed: '
        "Connection refused\n\tIs the server running on that host?"
    )
    error = store_error(exc, connecting=True)
    assert isinstance(error, ConnectionLost) and error.verdict == "retry"
    assert "Connection refused" in str(error) and "\n" not in str(error)
    refused = store_error(
        raised("28P01", 'password authentication failed for user "x"'), connecting=True
    )
    assert isinstance(refused, PermissionDenied) and refused.verdict == "fail"
    assert "password authentication failed" in str(refused)
    # Mid-statement, the same loss is uncertain: the statement may have been applied.
    assert verdict_of(exc) == "uncertain"
