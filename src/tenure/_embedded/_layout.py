"""Where the server's files are (`<base>` is `$TENURE_HOME`, else
`$XDG_DATA_HOME/tenure`, else `~/.local/share/tenure`; as root, `/var/lib/tenure` when
that base is not traversable by others, as `/root` is not):

    <base>/pg18/       the data dir; the major version in its name keeps a newer
                       server from opening an older cluster
    <base>/pg18.log    the server's output (opened by the owner, appended to)
    <base>/pg18.lock   flock held while a process starts the server
    <base>/pg18.pgpass the generated password, as a libpq passfile (0600)

The socket lives in the data dir, or in `/tmp/tenure-<uid>-<hash>/` when that path would
pass the ~107-byte limit of Unix socket paths."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ._account import server_user
from ._binaries import pg_major
from ._files import blocking_ancestor

ROOT_HOME = Path("/var/lib/tenure")
SHORT_SOCKET_PARENT = Path("/tmp")  # noqa: S108 - the dir made in it is checked for ownership
SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes including the trailing NUL


def default_data_dir() -> Path:
    """Where the server keeps its data when no data dir is given (see the module docstring)."""
    return _default_base() / f"pg{pg_major()}"


def sibling(data_dir: Path, suffix: str) -> Path:
    """The file next to the data dir named after it: its ``.log``, ``.lock``, ``.pgpass``."""
    return data_dir.with_name(data_dir.name + suffix)


def socket_dir(data_dir: Path, port: int) -> Path:
    """The data dir itself, unless the socket path would be too long for a Unix socket.

    As root the server account is part of the name: a dir left by an older tenure
    (owned by `nobody`, who could have made it) is never reused."""
    if len(os.fsencode(data_dir / f".s.PGSQL.{port}")) <= SOCKET_PATH_MAX:
        return data_dir
    key = f"{data_dir}:{server_user()}" if os.geteuid() == 0 else str(data_dir)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return SHORT_SOCKET_PARENT / f"tenure-{os.geteuid()}-{digest}"


def _default_base() -> Path:
    configured = os.environ.get("TENURE_HOME")
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) / "tenure" if xdg else Path.home() / ".local" / "share" / "tenure"
    if os.geteuid() == 0 and blocking_ancestor(base) is not None:
        return ROOT_HOME
    return base
