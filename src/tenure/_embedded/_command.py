"""What `tenure embedded` shows (`status`) and deletes (`remove`): the server's data dir
and files, and, as root, the system account and the binaries copied for it."""

from __future__ import annotations

import contextlib
import grp
import os
import time
from pathlib import Path

from .._errors import ConfigError
from ._account import account_tool, find_account, server_account, server_user
from ._binaries import BINARY_CACHE
from ._files import delete
from ._host import START_TIMEOUT, command_of, flock, processes_of
from ._layout import default_data_dir, sibling
from ._server import EmbeddedPostgres


def status(server: EmbeddedPostgres) -> list[tuple[str, str]]:
    """What `tenure embedded` shows: where the server keeps its data, whether it runs and
    which process started it, its DSN while it runs, its log, the account it runs as."""
    made = (server.data_dir / "PG_VERSION").is_file()
    rows = [("data directory", f"{server.data_dir}{'' if made else ' (not created yet)'}")]
    running = server.running()
    if running is None:
        rows.append(("server", "not running (a command without TENURE_DSN starts it)"))
    else:
        owner = running.owner
        by = f", started by pid {owner} ({command_of(owner)})" if owner else ""
        rows.append(("server", f"running, pid {running.pid}{by}"))
        rows.append(("DSN", running.dsn(server.passfile)))
    rows.append(("log", str(server.log)))
    if os.geteuid() == 0:
        user = server_user()
        made = find_account(user) is not None
        rows.append(("runs as", f"{user}{'' if made else ' (not created yet)'}"))
    return rows


def remove(server: EmbeddedPostgres) -> list[str]:
    """Delete what tenure made for the embedded server: its data dir (every job in it),
    log, passfile and lock, and its socket dir. For the default data dir (no TENURE_HOME)
    also its base dir once empty and, as root, the system account and the copy of the
    binaries, unless processes still run as that account (another data dir's server).
    Refused while the server runs. One line per thing done."""
    data_dir = server.data_dir
    lock = sibling(data_dir, ".lock")
    done = []
    with contextlib.ExitStack() as held:
        if lock.exists():
            held.enter_context(flock(lock, time.monotonic() + START_TIMEOUT))  # no start now
        running = server.running()
        if running is not None:
            by = f", started by pid {running.owner}" if running.owner else ""
            raise ConfigError(
                f"the embedded PostgreSQL in {data_dir} is running (pid {running.pid}{by}); "
                "stop that process first"
            )
        leftovers = data_dir.parent.glob(f".{data_dir.name}.initdb-*")
        extra = [server.socket_dir] if server.socket_dir != data_dir else []
        for path in (data_dir, *leftovers, *extra, server.log, Path(f"{server.log}.1")):
            done += delete(path)
        done += delete(server.passfile) + delete(lock)
    if data_dir == default_data_dir() and not os.environ.get("TENURE_HOME"):
        with contextlib.suppress(OSError):  # not empty: someone else's files are there too
            data_dir.parent.rmdir()
            done.append(f"removed {data_dir.parent}")
        if os.geteuid() == 0:  # the account is every data dir's: only with the default one
            done += _remove_server_account()
    return done or [f"nothing to remove: no embedded PostgreSQL in {data_dir}"]


def _remove_server_account() -> list[str]:
    """As root: delete the account that runs the server and the binaries copied for it,
    unless a process still runs as it (a server on another data dir)."""
    user = server_user()
    account = find_account(user)
    if account is None:
        return []
    busy = processes_of(account.pw_uid)
    if busy:
        pids = ", ".join(map(str, busy[:5]))
        why = "servers of other data dirs"
        return [f"kept the system account {user!r}: pids {pids} run as it ({why})"]
    done = [line for copy in sorted(BINARY_CACHE.glob("pg-*")) for line in delete(copy)]
    with contextlib.suppress(OSError):
        BINARY_CACHE.rmdir()
    account_tool("userdel", user)
    with contextlib.suppress(KeyError):  # userdel leaves the group where USERGROUPS_ENAB is no
        grp.getgrnam(user)
        account_tool("groupdel", user)
    server_account.cache_clear()
    return [*done, f"removed the system account {user!r}"]
