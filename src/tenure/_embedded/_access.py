"""Who gets in: no one but the starting user. The server asks for a password
(SCRAM-SHA-256; `local all all scram-sha-256` is its whole pg_hba.conf), generated once
and kept in a libpq passfile of the starting user (0600) that the DSN names, so the DSN
itself carries no secret. The password is set in single-user mode, before anything
listens."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import stat
import subprocess
import time
from pathlib import Path

from .._errors import ConfigError
from ._binaries import pg_bin_dir
from ._files import write_private
from ._spawn import spawn

PG_HBA = (
    "# Written by tenure: the password in the passfile next to this data dir is the only way in.\n"
    "local all all scram-sha-256\n"
)
# Single-user mode binds nothing: a fixed template around a verifier VERIFIER has checked.
SET_PASSWORD = "ALTER ROLE postgres PASSWORD '{verifier}'"  # noqa: S105 - a template
VERIFIER = re.compile(r"SCRAM-SHA-256\$[0-9]+:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+")
SECRET_SHAPE = re.compile(r"[A-Za-z0-9_-]{40,}")  # what secrets.token_urlsafe(32) gives
SECRET_BYTES = 32
SCRAM_ITERATIONS = 4096  # PostgreSQL's default


def lock_down(cluster: Path, password: str, deadline: float) -> None:
    """Give the superuser `password` and make a password the only way in.

    Single-user mode needs no connection (nothing listens) and takes a statement on
    stdin; it has no bind parameters, so the statement is a fixed template around a
    verifier that is checked to hold none of SQL's special characters.
    """
    verifier = _scram_verifier(password, os.urandom(16))
    if not VERIFIER.fullmatch(verifier):
        raise ConfigError("internal error: malformed SCRAM verifier")
    args = [str(pg_bin_dir() / "postgres"), "--single", "-D", str(cluster)]
    args += ["-c", "exit_on_error=on", "-c", "listen_addresses=", "postgres"]
    proc = spawn(args, stdout=subprocess.PIPE, stdin=subprocess.PIPE)
    statement = SET_PASSWORD.format(verifier=verifier).encode() + b"\n"
    try:
        output, _ = proc.communicate(statement, timeout=max(deadline - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise ConfigError(f"setting the password of {cluster} took too long") from None
    if proc.returncode != 0:
        said = [ln for ln in output.decode(errors="replace").splitlines() if "STATEMENT" not in ln]
        raise ConfigError(f"cannot set the password of {cluster}: {' | '.join(said[-3:])}")
    write_private(cluster / "pg_hba.conf", PG_HBA, for_server=True)


def read_secret(passfile: Path) -> str | None:
    """The password in our passfile; None when there is none, or not one tenure wrote.

    A file another user owns or may read is refused: it could have been planted, and
    libpq ignores a passfile that others may read anyway.
    """
    try:
        fd = os.open(passfile, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {passfile}: {exc.strerror}; remove it") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise ConfigError(
                f"{passfile} is not a private file (mode 0600) of uid {os.geteuid()}; remove it"
            )
        fields = f.read(4096).decode(errors="replace").strip().split(":")
    if len(fields) == 5 and fields[3] == "postgres" and SECRET_SHAPE.fullmatch(fields[4]):
        return fields[4]
    return None


def write_secret(passfile: Path, password: str) -> None:
    """A libpq passfile for the server's superuser. Any host and port: the embedded DSN is
    the only one that names this file, and proxies in front of the socket reuse it."""
    write_private(passfile, f"*:*:*:postgres:{password}\n", for_server=False)


def _scram_verifier(password: str, salt: bytes, iterations: int = SCRAM_ITERATIONS) -> str:
    """What PostgreSQL stores for a SCRAM-SHA-256 password (RFC 5802, RFC 7677), made here
    so that the server is never told the password itself (SASLprep is the identity on
    the ASCII passwords tenure generates)."""
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    server_key = hmac.digest(salted, b"Server Key", "sha256")
    salt64, stored64, server64 = (
        base64.b64encode(part).decode()
        for part in (salt, hashlib.sha256(client_key).digest(), server_key)
    )
    return f"SCRAM-SHA-256${iterations}:{salt64}${stored64}:{server64}"
