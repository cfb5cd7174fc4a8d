"""Hostile-input corpus: DSNs (issue 17, item 18).

Malformed and hostile DSNs (unbalanced quotes, missing '=', bad percent-encoding,
passwords with quotes, spaces, non-ASCII or NUL, unknown keys, huge values, URL
ports like 70000 or -1, options that set dangerous server parameters) reach tenure
through `check_dsn`, ``App(dsn=...)``, ``TENURE_DSN`` and ``TENURE_DSN_FILE``.
Every one must end in a ConfigError that quotes no part of the password (libpq's
own messages quote the text around the fault), with no libpq text chained to it,
and before anything connects: every DSN points at a listener that counts
connection attempts. Sound DSNs with awkward passwords pass unchanged, also
without connecting.
"""

from __future__ import annotations

import socket
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.support.waiting import wait_until

import tenure
from tenure._dsn import check_dsn
from tenure._errors import ConfigError

PASSWORD = "Zq9xKv7w"
HEAD = "host=127.0.0.1 port={port}"
URL = "postgresql://u:{pw}@127.0.0.1:{port}/db"


@dataclass(frozen=True)
class Case:
    name: str
    dsn: str  # {port}: the listener's; {pw}: the password (default PASSWORD)
    password: str = PASSWORD

    def text(self, port: int) -> str:
        return self.dsn.replace("{port}", str(port)).replace("{pw}", self.password)


HOSTILE = [
    # key=value entries
    Case("unbalanced quote", f"{HEAD} password='{{pw}}"),
    Case("escaped last quote", f"{HEAD} password='{{pw}}\\'"),
    Case("quote inside a quoted value", f"{HEAD} password='{{pw}}' dbname=x", "Zq9x'Kv7w"),
    Case("space in an unquoted password", f"{HEAD} password={{pw}}", "Zq9x Kv7w"),
    Case("password piece as a key", f"{HEAD} password={{pw}}=", "Zq9x Kv7w"),
    Case("bare word", f"{HEAD} {{pw}}"),
    Case("non-ASCII, unquoted space", f"{HEAD} password={{pw}}", "Zq9xü€ Kv7w"),
    Case("double quote and space", f"{HEAD} password={{pw}}", 'Zq9x" Kv7w'),
    Case("NUL in a password", f"{HEAD} password={{pw}}", "Zq9x\x00Kv7w"),
    Case("NUL after a password", f"{HEAD} password={{pw}}\x00 sslmode=disable"),
    Case("lone surrogate", f"{HEAD} password={{pw}}", "Zq9x\ud800Kv7w"),
    Case("misspelt key", f"{HEAD} passwrod={{pw}}"),
    Case("password as a key", f"{HEAD} {{pw}}=1"),
    Case("empty key", f"{HEAD} ={{pw}}"),
    Case("huge password", f"{HEAD} password={{pw}}", PASSWORD * 2000),
    Case("huge host", "host=" + "h" * 10_000 + " password={pw}"),
    Case("port 70000", "host=127.0.0.1 port=70000 password={pw}"),
    Case("port -1", "host=127.0.0.1 port=-1 password={pw}"),
    Case("port 0", "host=127.0.0.1 port=0 password={pw}"),
    Case("two ports, one host", f"{HEAD},{{port}} password={{pw}}"),
    Case("hostaddr not an address", "hostaddr={pw} port={port}"),
    Case("connect_timeout not a number", f"{HEAD} connect_timeout={{pw}}"),
    Case("unknown sslmode", f"{HEAD} sslmode={{pw}}"),
    Case("URL scheme in capitals", "POSTGRESQL://u:{pw}@127.0.0.1:{port}/db"),
    # URLs
    Case("bad percent-encoding", URL, "Zq9x%zzKv7w"),
    Case("trailing percent", URL, "Zq9xKv7w%"),
    Case("percent-encoded NUL", URL, "Zq9x%00Kv7w"),
    Case("space in a URL", URL, "Zq9x Kv7w"),
    Case("unencoded slash", URL, "Zq9x/Kv7w"),
    Case("unencoded at", URL, "Zq9x@Kv7w"),
    Case("URL port 70000", "postgresql://u:{pw}@127.0.0.1:70000/db"),
    Case("URL port -1", "postgresql://u:{pw}@127.0.0.1:-1/db"),
    Case("URL port 0", "postgresql://u:{pw}@127.0.0.1:0/db"),
    Case("URL port of 20 digits", "postgresql://u:{pw}@127.0.0.1:99999999999999999999/db"),
    Case("URL port in words", "postgresql://u:{pw}@127.0.0.1:five/db"),
    Case(
        "URL port in full-width digits", "postgresql://u:{pw}@127.0.0.1:\uff15\uff14\uff13\uff12/db"
    ),
    Case("URL second port bad", "postgresql://u:{pw}@127.0.0.1:{port},h2:x/db"),
    Case("unclosed IPv6 bracket", "postgresql://u:{pw}@[::1:{port}/db"),
    Case("query parameter without '='", "postgresql://u@127.0.0.1:{port}/db?password={pw}&ssl"),
    Case("query parameter with two '='", "postgresql://u@127.0.0.1:{port}/db?password=Zq9x=Kv7w"),
    Case("password as a query key", "postgresql://u@127.0.0.1:{port}/db?{pw}=1"),
    Case("query port 70000", "postgresql://u:{pw}@127.0.0.1/db?port=70000"),
    # options that reach for the server
    Case("preload a library", f"{HEAD} password={{pw}} options='-c session_preload_libraries=x'"),
    Case("preload, glued -c", f"{HEAD} password={{pw}} options='-clocal_preload_libraries=x'"),
    Case("library path", f"{HEAD} password={{pw}} options='--dynamic-library-path=/tmp'"),
    Case("no triggers", f"{HEAD} password={{pw}} options='-c session_replication_role=replica'"),
    Case("log statements", f"{HEAD} password={{pw}} options='--log-statement=all'"),
    Case("log durations", f"{HEAD} password={{pw}} options='-c log_min_duration_statement=0'"),
    Case("debug output", f"{HEAD} password={{pw}} options='-c debug_print_parse=on'"),
    Case("no durable commit", f"{HEAD} password={{pw}} options='-c synchronous_commit=off'"),
    Case("zero damaged pages", f"{HEAD} password={{pw}} options='-c zero_damaged_pages=on'"),
    Case("system table switch", f"{HEAD} password={{pw}} options='-O'"),
    Case("dangling -c", f"{HEAD} password={{pw}} options='-c'"),
    Case("setting without a value", f"{HEAD} options='-c {{pw}}'"),
    Case("refused prefix, secret name", f"{HEAD} options='-c log_{{pw}}=1'"),
    Case("log statements in a URL", URL + "?options=-c%20log_statement%3Dall"),
    Case("TLS key log", f"{HEAD} password={{pw}} sslkeylogfile=/tmp/keys"),
]

SOUND = [
    Case("quoted awkward password", f"{HEAD} password='{{pw}}'", "Zq9x \\'ü€\\\\ Kv7w"),
    Case("percent-encoded password", URL, "Zq9x%40%2F%3A%25%20%C3%BCKv7w"),
    Case("several hosts", "postgresql://u:{pw}@127.0.0.1:{port},127.0.0.1:{port}/db"),
    Case("harmless options", f"{HEAD} password={{pw}} options='-c search_path=app -cwork_mem=4MB'"),
    Case("every checked value", f"{HEAD} password={{pw}} sslmode=prefer connect_timeout=3"),
]


class Listener:
    """A TCP port that counts who connects to it."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.05)
        self.port: int = self._socket.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._socket.accept()
            except TimeoutError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._socket.close()


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    listening = Listener()
    with socket.create_connection(("127.0.0.1", listening.port), timeout=5):
        pass  # the counter works: one connection, counted
    wait_until(lambda: listening.connections == 1, message="the listener counted nothing")
    listening.connections = 0
    yield listening
    listening.close()


def _pieces(password: str) -> set[str]:
    """Every part of the password long enough to be recognisable (4+ characters)."""
    return {password[i : i + 4] for i in range(len(password) - 3)}


def _assert_quotes_nothing(error: BaseException, password: str) -> None:
    chain: list[BaseException | None] = [error, error.__cause__, error.__context__]
    shown = "".join(traceback.format_exception(error)) + "".join(map(repr, chain))
    leaked = sorted(piece for piece in _pieces(password) if piece in shown)
    assert not leaked, f"{error} quotes {leaked}"
    assert error.__cause__ is None and error.__context__ is None


def _entry_points(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Any]]:
    """Each way a DSN reaches tenure, as a callable that takes nothing."""
    monkeypatch.delenv("TENURE_DSN", raising=False)
    monkeypatch.delenv("TENURE_DSN_FILE", raising=False)
    yield "check_dsn", lambda: check_dsn(dsn)
    yield "App(dsn=...)", lambda: tenure.App(dsn=dsn)
    if "\x00" not in dsn and "\ud800" not in dsn:  # an environment cannot hold these
        monkeypatch.setenv("TENURE_DSN", dsn)
        yield "TENURE_DSN", tenure.App
        monkeypatch.delenv("TENURE_DSN")
    if "\ud800" not in dsn:  # nor can a UTF-8 file
        dsn_file = tmp_path / "dsn"
        dsn_file.write_bytes(dsn.encode())
        monkeypatch.setenv("TENURE_DSN_FILE", str(dsn_file))
        yield "TENURE_DSN_FILE", tenure.App
        monkeypatch.delenv("TENURE_DSN_FILE")


@pytest.mark.parametrize("case", HOSTILE, ids=[case.name for case in HOSTILE])
def test_a_hostile_dsn_is_a_config_error_that_quotes_no_part_of_the_password(
    case: Case, listener: Listener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = case.text(listener.port)
    for way, call in _entry_points(dsn, tmp_path, monkeypatch):
        with pytest.raises(ConfigError) as caught:
            call()
        _assert_quotes_nothing(caught.value, case.password)
        assert str(caught.value), way
    assert listener.connections == 0


@pytest.mark.parametrize("case", SOUND, ids=[case.name for case in SOUND])
def test_a_sound_dsn_with_an_awkward_password_passes_and_connects_to_nothing(
    case: Case, listener: Listener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = case.text(listener.port)
    for way, call in _entry_points(dsn, tmp_path, monkeypatch):
        made = call()
        assert made == dsn if way == "check_dsn" else made.configured_dsn == dsn, way
        if way != "check_dsn":
            made.close()
    assert listener.connections == 0


@pytest.mark.parametrize("value", [b"host=127.0.0.1 password=Zq9xKv7w", 5432, ["host=x"]])
def test_a_dsn_that_is_not_a_string_is_a_config_error(value: Any) -> None:
    with pytest.raises(ConfigError, match="must be a string") as caught:
        check_dsn(value)
    _assert_quotes_nothing(caught.value, PASSWORD)
