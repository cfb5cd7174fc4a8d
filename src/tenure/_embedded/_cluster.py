"""The data dir's making: initdb into a fresh sibling renamed into place (a killed initdb
leaves no half data dir), and, as root, an older tenure's data dir (owned by `nobody`)
taken over for the server's account."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .._errors import ConfigError
from ._account import LEGACY_SERVER_USER, find_account, give_to_server, server_account, server_user
from ._binaries import pg_bin_dir
from ._host import tell
from ._spawn import spawn

logger = logging.getLogger("tenure.embedded")


def initdb(data_dir: Path) -> None:
    """Initialise into a fresh sibling, then rename: a killed initdb leaves no half data dir."""
    parent = data_dir.parent
    for leftover in parent.glob(f".{data_dir.name}.initdb-*"):  # we hold the start flock
        shutil.rmtree(leftover, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{data_dir.name}.initdb-", dir=parent))
    try:
        give_to_server(tmp)
        args = [str(pg_bin_dir() / "initdb"), "--locale=C", "-E", "UTF8", "-U", "postgres"]
        # Closed until the password is set (_access.lock_down): never open, not even briefly.
        args += ["--auth-local=reject", "--auth-host=reject", "-D", str(tmp)]
        proc = spawn(args, stdout=subprocess.PIPE)
        output, _ = proc.communicate()
        if proc.returncode != 0:
            lines = output.decode(errors="replace").strip().splitlines()
            raise ConfigError(f"initdb failed for {data_dir}: {' | '.join(lines[-5:])}")
        try:
            os.rename(tmp, data_dir)  # replaces a missing or empty dir, nothing else
        except OSError as exc:
            raise ConfigError(f"cannot move the new cluster to {data_dir}: {exc}") from exc
        tell(
            f"created an embedded PostgreSQL data directory in {data_dir} "
            "(`tenure embedded --remove` deletes it)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def adopt(data_dir: Path) -> None:
    """As root, take over a data dir of an older tenure (owned by `nobody`) for the server
    account; refuse any other owner's."""
    account = server_account()
    if account is None:
        return
    owner = data_dir.stat().st_uid
    if owner == account.pw_uid:
        return
    legacy = find_account(LEGACY_SERVER_USER)
    user = server_user()
    if legacy is None or owner != legacy.pw_uid:
        raise ConfigError(
            f"{data_dir} belongs to uid {owner}, not to {user!r}, the account that runs "
            f"PostgreSQL for root; chown -R it to {user} or choose another data dir"
        )
    logger.warning("%s was %s's; it now belongs to %s", data_dir, legacy.pw_name, user)
    uid, gid = account.pw_uid, account.pw_gid
    os.chown(data_dir, uid, gid)
    for dirpath, dirnames, filenames in os.walk(data_dir):
        for name in (*dirnames, *filenames):
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)
