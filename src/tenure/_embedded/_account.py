"""The account the server runs as. PostgreSQL refuses to run as root, so for root it runs
as the system account `_tenure`, made on first need; for anyone else it runs as they do."""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .._errors import ConfigError
from ._host import START_TIMEOUT, child_env, flock, tell

SERVER_USER = "_tenure"  # Debian's convention for system accounts (_apt, _chrony)
LEGACY_SERVER_USER = "nobody"  # ran the server for root before tenure had its own account
ACCOUNT_TOOLS = ("useradd", "adduser")  # shadow-utils everywhere, Debian's adduser after it
SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"  # root's PATH may lack them (cron, su)
NOLOGIN_SHELLS = ("/usr/sbin/nologin", "/sbin/nologin")
# Serialises the making of the account across processes; only root takes it, so it lives
# where only root may write (/run), not in a temp dir another user could plant it in.
ACCOUNT_LOCK = Path("/run" if os.path.isdir("/run") else tempfile.gettempdir()) / (
    "tenure-account.lock"
)


def server_user() -> str:
    """The name of the account that runs the server for root (a test gives it another)."""
    return SERVER_USER


@functools.cache
def server_account() -> pwd.struct_passwd | None:
    """The account the server runs as: None (ourselves) unless we are root, then
    SERVER_USER, made on first need. Not `nobody`: every daemon that drops its rights
    runs as nobody, and each of them could then read the data dir and use the socket."""
    if os.geteuid() != 0:
        return None
    account = find_account(SERVER_USER)
    if account is None:
        # Made once, under a lock of the host's: processes that start servers together (a
        # test run's workers) each ran useradd at once, and one of them was left holding a
        # uid that the account did not end up with.
        with flock(ACCOUNT_LOCK, time.monotonic() + START_TIMEOUT):
            account = find_account(SERVER_USER) or _create_account(SERVER_USER)
    if account.pw_uid == 0:
        raise ConfigError(f"account {SERVER_USER!r} has uid 0; the server needs its own account")
    return account


def find_account(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def give_to_server(path: Path) -> None:
    """Make `path` the server account's (nothing to do when we run the server ourselves)."""
    account = server_account()
    if account is not None:
        os.chown(path, account.pw_uid, account.pw_gid)


def account_tool(tool: str, name: str) -> None:
    """Run ``tool name`` (userdel, groupdel); ConfigError saying why when it fails."""
    path = shutil.which(tool, path=os.pathsep.join([os.environ.get("PATH", ""), SBIN_PATH]))
    if path is None:
        raise ConfigError(f"no {tool} here to delete {name!r}; delete it by hand")
    ran = subprocess.run([path, name], capture_output=True, text=True, env=child_env(), check=False)
    if ran.returncode != 0:
        said = (ran.stderr or ran.stdout).strip().splitlines()
        raise ConfigError(f"{tool} {name} failed: {said[-1] if said else ran.returncode}")


def _create_account(name: str) -> pwd.struct_passwd:
    """Create `name` as a system account with a group of its own, no home and no login."""
    shell = next((s for s in NOLOGIN_SHELLS if os.access(s, os.X_OK)), "/bin/false")
    search = os.pathsep.join([os.environ.get("PATH", ""), SBIN_PATH])
    common = ["--system", "--no-create-home", "--shell", shell]
    arguments = {
        "useradd": [*common, "--user-group", "--home-dir", "/nonexistent", name],
        "adduser": [*common, "--group", "--home", "/nonexistent", name],
    }
    failures = []
    for tool in ACCOUNT_TOOLS:
        path = shutil.which(tool, path=search)
        if path is None:
            failures.append(f"no {tool}")
            continue
        try:
            done = subprocess.run(
                [path, *arguments.get(tool, [name])],
                capture_output=True,
                text=True,
                timeout=START_TIMEOUT,
                env=child_env(),
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            failures.append(f"{tool}: {exc}")
            continue
        account = find_account(name)  # made now, or by a concurrent start just before
        if account is not None:
            if done.returncode == 0:
                tell(
                    f"created the system account {name!r} to run PostgreSQL, which refuses to "
                    "run as root (`tenure embedded --remove` deletes it)"
                )
            return account
        said = (done.stderr or done.stdout).strip().splitlines()
        failures.append(f"{tool} exited with {done.returncode}: {said[-1] if said else '-'}")
    raise ConfigError(
        f"tenure runs as root, so PostgreSQL runs as the system account {name!r}, which is "
        f"missing and could not be created ({'; '.join(failures)}); create it "
        f"(useradd --system --user-group --no-create-home --shell {shell} {name}) "
        "or run tenure as a user other than root"
    )
