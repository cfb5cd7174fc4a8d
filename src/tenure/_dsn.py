"""DSN checks whose errors quote nothing of the DSN, and where tenure finds its DSN.

libpq's own parse errors quote the text around the fault (``missing "=" after
"S3cretPW"``), and a password is text like any other: that is how it reached a
log. tenure still lets libpq decide what parses, but never shows libpq's message:
it finds the fault itself and names it by kind and position ("entry 3 has no
'='"), never by content. Values libpq only checks when it connects (a port of
70000, an unknown sslmode) are checked here too, so a bad DSN fails before any
connection, and DSN options may not set server parameters that load code into
the server, switch off its checks or write statements (payloads) to its log.

Where the DSN comes from: the ``dsn`` argument, else ``TENURE_DSN``, else the
file that ``TENURE_DSN_FILE`` names, which keeps the credentials out of the
process environment (``/proc/<pid>/environ`` keeps what a process started with,
whatever it deletes later).
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import os
import re

import psycopg
from psycopg import pq

from ._errors import ConfigError

MAX_DSN_LENGTH = 8192
URL_PREFIXES = ("postgresql://", "postgres://")  # what libpq treats as a URL, case and all
SPACE = " \t\n\v\f\r"  # C isspace(), which libpq splits on
MAX_PORT = 65535
WHOLE_NUMBER = re.compile(r"[+-]?[0-9]{1,9}")
INTEGER_KEYS = (
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
)
CHOICES = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
    "target_session_attrs": (
        "any",
        "read-write",
        "read-only",
        "primary",
        "standby",
        "prefer-standby",
    ),
    "load_balance_hosts": ("disable", "random"),
}
# Keys tenure refuses whatever their value, and why.
REFUSED_KEYS = {
    "sslkeylogfile": "writes the TLS session keys to a file, so whoever reads it reads the traffic",
}
# Server settings a DSN's options may not set, and why.
REFUSED_SETTINGS = {
    **dict.fromkeys(
        (
            "shared_preload_libraries",
            "session_preload_libraries",
            "local_preload_libraries",
            "dynamic_library_path",
            "jit_provider",
        ),
        "loads code into the server",
    ),
    **dict.fromkeys(
        (
            "session_replication_role",
            "allow_system_table_mods",
            "allow_in_place_tablespaces",
            "ignore_system_indexes",
            "ignore_checksum_failure",
            "ignore_invalid_pages",
            "zero_damaged_pages",
        ),
        "switches off the server's triggers or integrity checks",
    ),
    **dict.fromkeys(
        ("fsync", "full_page_writes", "synchronous_commit"),
        "lets a committed lease, result or fence be lost in a crash",
    ),
}
REFUSED_SETTING_PREFIXES = {
    "log_": "writes statements, and the payloads in them, to the server's log",
    "debug_": "writes statements, and the payloads in them, to the server's log",
    "trace_": "writes statements, and the payloads in them, to the server's log",
}
# A host name or numeric address (an IPv6 one may carry a %zone); sockets start with / or @.
HOST_NAME = re.compile(r"[A-Za-z0-9._:%-]+")
SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.$-]*")


def check_dsn(dsn: str) -> str:
    """Return `dsn` if libpq parses it and its values are sane; else raise ConfigError
    saying what is wrong and where, without quoting any of it."""
    if not isinstance(dsn, str):
        raise ConfigError(f"a DSN must be a string, not {type(dsn).__name__}")
    if len(dsn) > MAX_DSN_LENGTH:
        raise ConfigError(f"malformed DSN: it is longer than {MAX_DSN_LENGTH} characters")
    if "\x00" in dsn:  # libpq would silently cut the DSN there
        raise ConfigError("malformed DSN: it contains a NUL character")
    if not _encodable(dsn):
        raise ConfigError("malformed DSN: it is not valid Unicode text (a lone surrogate)")
    params = _parse(dsn)
    if params is None:  # raised here, not in an except block: no libpq text in __context__
        raise ConfigError(f"malformed DSN: {_fault(dsn)}")
    _check_values(params, url=dsn.startswith(URL_PREFIXES))
    return dsn


def dsn_from_environment() -> str | None:
    """``TENURE_DSN``, else the contents of the file ``TENURE_DSN_FILE`` names, else None."""
    inline = os.environ.get("TENURE_DSN") or None
    path = os.environ.get("TENURE_DSN_FILE") or None
    if inline is not None and path is not None:
        raise ConfigError("TENURE_DSN and TENURE_DSN_FILE are both set; keep one")
    return read_dsn_file(path) if path is not None else inline


def child_environment(dsn: str, **extra: str) -> dict[str, str]:
    """This process's environment for a child that must use ``dsn``: ``TENURE_DSN`` set,
    ``TENURE_DSN_FILE`` dropped (a child given both refuses to start)."""
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DSN_FILE"}
    return {**env, **extra, "TENURE_DSN": dsn}


def read_dsn_file(path: str) -> str:
    """The DSN in the file at `path` (surrounding whitespace and newlines removed)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_DSN_LENGTH * 4 + 2)
    except OSError as exc:
        raise ConfigError(f"cannot read TENURE_DSN_FILE {path}: {exc.strerror or exc}") from None
    text = _decoded(raw)
    if text is None:
        raise ConfigError(f"TENURE_DSN_FILE {path} is not UTF-8 text")
    dsn = text.strip()
    if not dsn:
        raise ConfigError(f"TENURE_DSN_FILE {path} is empty")
    return dsn


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _decoded(raw: bytes) -> str | None:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def _parse(dsn: str) -> dict[str, str] | None:
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return None
    return {key: str(value) for key, value in params.items()}


@functools.cache
def _keywords() -> frozenset[str]:
    """Every connection option the loaded libpq knows."""
    return frozenset(option.keyword.decode() for option in pq.Conninfo.get_defaults())


def _unknown(kind: str, key: str, known: frozenset[str]) -> str:
    """Names the closest known option only: the key itself may be a piece of a password."""
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{kind} is not a libpq connection option{hint}"


def _fault(dsn: str) -> str:
    """What is wrong with a DSN libpq refused, by kind and position."""
    if dsn.startswith(URL_PREFIXES):
        return _url_fault(dsn)
    if dsn.lower().startswith(URL_PREFIXES):
        return "a URL must start with postgresql:// or postgres:// in lower case"
    return _pairs_fault(dsn)


def _pairs_fault(dsn: str) -> str:
    """Walk ``key=value`` entries the way libpq's conninfo_parse does."""
    i, n, entry = 0, len(dsn), 0
    while True:
        while i < n and dsn[i] in SPACE:
            i += 1
        if i >= n:
            return "libpq could not parse it as key=value entries"
        entry += 1
        start = i
        while i < n and dsn[i] != "=" and dsn[i] not in SPACE:
            i += 1
        key = dsn[start:i]
        while i < n and dsn[i] in SPACE:
            i += 1
        if i >= n or dsn[i] != "=":
            return (
                f"entry {entry} has no '=' after its key "
                "(quote a value that holds spaces: key='a b')"
            )
        i += 1
        while i < n and dsn[i] in SPACE:
            i += 1
        quoted = i < n and dsn[i] == "'"
        i += quoted
        while i < n and (dsn[i] != "'" if quoted else dsn[i] not in SPACE):
            i += 2 if dsn[i] == "\\" else 1
        if quoted and i >= n:
            return (
                f"the quoted value of entry {entry} is never closed "
                "(write a quote inside a value as \\')"
            )
        i += quoted
        if key not in _keywords():
            return _unknown(f"the key of entry {entry}", key, _keywords())


def _url_fault(dsn: str) -> str:
    """Find what libpq's URL parser refused."""
    if re.search(r"%(?![0-9A-Fa-f]{2})", dsn):
        return "a '%' in the URL is not followed by two hex digits (write a '%' as %25)"
    if re.search(r"%00", dsn):
        return "the URL percent-encodes a NUL character (%00)"
    if any(char in SPACE for char in dsn):
        return "the URL holds whitespace (write a space as %20)"
    rest = dsn.split("://", 1)[1]
    authority, _, query = rest.partition("?")
    if authority.count("[") != authority.count("]"):
        return "an IPv6 address in the URL lacks its closing ']'"
    if query:
        known = _keywords() | {"ssl"}
        for number, part in enumerate(query.split("&"), 1):
            key, equals, value = part.partition("=")
            if not equals:
                return f"query parameter {number} of the URL has no '='"
            if "=" in value:
                return f"query parameter {number} of the URL has a second '=' (write it as %3D)"
            if _percent_decoded(key) not in known:
                return _unknown(f"query parameter {number} of the URL", key, known)
    return (
        "libpq could not parse the URL (percent-encode special characters in the user, "
        "password and database name; the host list looks like host1:port1,host2:port2)"
    )


def _percent_decoded(text: str) -> str:
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text)


def _check_values(params: dict[str, str], *, url: bool) -> None:
    """What libpq only checks when it connects, or never: refuse it before any connection."""
    for key, reason in REFUSED_KEYS.items():
        if key in params:
            raise ConfigError(f"refused DSN: {key} {reason}")
    ports = params["port"].split(",") if "port" in params else []
    for number, port in enumerate(ports, 1):
        port = port.strip(SPACE)
        valid = port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) <= MAX_PORT
        if port and not valid:
            where = f"port {number}" if len(ports) > 1 else "the port"
            hint = " (percent-encode any ':', '/' or '@' in the user and password)" if url else ""
            raise ConfigError(f"malformed DSN: {where} is not a number from 1 to {MAX_PORT}{hint}")
    for number, host in enumerate(params.get("host", "").split(","), 1):
        host = host.strip(SPACE)
        if host and not host.startswith(("/", "@")) and not HOST_NAME.fullmatch(host):
            hint = " (percent-encode any '@' in the user and password)" if url else ""
            raise ConfigError(
                f"malformed DSN: host {number} is neither a host name, an IP address nor a "
                f"socket directory{hint}"
            )
    hosts = (params.get("host") or params.get("hostaddr") or "").split(",")
    if len(ports) > 1 and len(ports) != len(hosts):
        raise ConfigError(f"malformed DSN: {len(ports)} ports for {len(hosts)} hosts")
    for number, address in enumerate(params.get("hostaddr", "").split(","), 1):
        if address.strip(SPACE) and not _is_ip_address(address.strip(SPACE)):
            raise ConfigError(f"malformed DSN: hostaddr {number} is not a numeric IP address")
    for key in INTEGER_KEYS:
        if key in params and params[key].strip(SPACE):
            if not WHOLE_NUMBER.fullmatch(params[key].strip(SPACE)):
                raise ConfigError(f"malformed DSN: {key} is not a whole number")
    for key, choices in CHOICES.items():
        if key in params and params[key] not in choices:
            raise ConfigError(f"malformed DSN: {key} must be one of {', '.join(choices)}")
    if "options" in params:
        _check_options(params["options"])


def _is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _check_options(options: str) -> None:
    """The server settings in ``options`` (``-c name=value`` or ``--name=value``, split the
    way the server splits them) are settings, and none that REFUSED_SETTINGS names."""
    words = _split_options(options)
    number = 0
    while number < len(words):
        word = words[number]
        number += 1
        if word == "-c" and number < len(words):
            setting = words[number]
            number += 1
        elif word.startswith("-c") and len(word) > 2:
            setting = word[2:]
        elif word.startswith("--") and len(word) > 2:
            setting = word[2:]
        else:
            raise ConfigError(
                f"malformed DSN: word {number} of options is not a setting "
                "(options may hold only -c name=value and --name=value)"
            )
        name, equals, _ = setting.partition("=")
        if not equals or not SETTING_NAME.fullmatch(name):
            raise ConfigError(f"malformed DSN: setting {number} of options is not name=value")
        _refuse_setting(name.lower().replace("-", "_"))


def _refuse_setting(name: str) -> None:
    """Name only what tenure's lists name: the setting itself may be a piece of a secret."""
    if name in REFUSED_SETTINGS:
        raise ConfigError(f"refused DSN: its options set {name}, which {REFUSED_SETTINGS[name]}")
    for prefix, reason in REFUSED_SETTING_PREFIXES.items():
        if name.startswith(prefix):
            raise ConfigError(f"refused DSN: its options set a {prefix}* setting, which {reason}")


def _split_options(options: str) -> list[str]:
    """Split on whitespace, a backslash escaping the next character (pg_split_opts)."""
    words: list[str] = []
    current: list[str] = []
    escaped = False
    for char in options:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in SPACE:
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(char)
    if current:
        words.append("".join(current))
    return words
