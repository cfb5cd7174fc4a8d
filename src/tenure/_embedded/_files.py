"""Files and directories made safely for the server: private (0600/0700) where others
could have planted one, passable (0755) where the server's account must get through,
replaced whole, locked across processes, deleted with a line saying so."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from pathlib import Path

from .._errors import ConfigError
from ._account import give_to_server, server_account, server_user

LOG_ROTATE_BYTES = 8 << 20


def makedirs(path: Path) -> None:
    """Create missing directories as 0755 regardless of umask, so the server's user can pass."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o755)
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(f"cannot create {directory}: {exc}; set TENURE_HOME") from exc
        os.chmod(directory, 0o755)  # noqa: S103 - the server's user must pass


def blocking_ancestor(path: Path) -> Path | None:
    """The first existing directory on the way to `path` that others cannot traverse."""
    for directory in reversed((path.resolve(), *path.resolve().parents)):
        if directory.exists() and not directory.stat().st_mode & stat.S_IXOTH:
            return directory
    return None


def require_reachable(path: Path) -> None:
    blocking = blocking_ancestor(path)
    if blocking is not None:
        raise ConfigError(
            f"{path} is not reachable by user {server_user()!r}, who runs PostgreSQL for root "
            f"({blocking} lacks o+x); choose another data dir or set TENURE_HOME"
        )


def owned_private_dir(path: Path) -> None:
    """Make `path` (in a world-writable dir) or accept it only if the server's user owns it
    and nobody else may enter: another user could have made it first."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(path, 0o700)
        give_to_server(path)
    account = server_account()
    uid = os.geteuid() if account is None else account.pw_uid
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
        raise ConfigError(f"{path} is not a private directory of uid {uid}; remove it")


def write_private(path: Path, text: str, *, for_server: bool) -> None:
    """Replace `path` whole with a new 0600 file (ours, or the server's)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            if for_server:
                give_to_server(tmp)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def open_log(path: Path) -> int:
    """Append-only log fd owned by us; the server only inherits it, so it cannot rewrite it."""
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > LOG_ROTATE_BYTES:
            path.replace(path.with_name(path.name + ".1"))
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)


def tail(log: Path, offset: int) -> str:
    """The last lines this run wrote to the log, on one line."""
    try:
        with log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return f"(no log at {log})"
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-5:]) or f"(nothing logged; see {log})"


def delete(path: Path) -> list[str]:
    """Remove a file or a whole directory tree; ``["removed PATH"]`` if it was there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            return []
    return [f"removed {path}"]
