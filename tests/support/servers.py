"""What a helper process (a pooler, say) needs to reach the server a test DSN names, and a
server of a test's own to stop, crash and restart."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from tenure._embedded import EmbeddedPostgres
from tenure._store import migrate


def dsn_password(dsn: str) -> str:
    """The password a DSN carries or names through its passfile ('' when none): the embedded
    server asks for the one in its passfile."""
    params = conninfo_to_dict(dsn)
    if params.get("password"):
        return str(params["password"])
    passfile = params.get("passfile")
    if not passfile:
        return ""
    user = str(params.get("user", ""))
    for line in Path(str(passfile)).read_text().splitlines():
        fields = line.split(":")
        if len(fields) == 5 and fields[3] in ("*", user):
            return fields[4]
    return ""


def socket_owner(dsn: str, default: str) -> str:
    """The account owning the Unix socket directory the DSN connects through (only it, and
    root, may enter the embedded server's), else `default`."""
    host = str(conninfo_to_dict(dsn).get("host", ""))
    if host.startswith("/"):
        return pwd.getpwuid(Path(host).stat().st_uid).pw_name
    return default


@contextlib.contextmanager
def traversable_temp_dir(prefix: str) -> Iterator[Path]:
    """A fresh dir under the system temp dir that other accounts may pass (0755): as root
    the embedded server runs as an account of its own, which cannot enter pytest's 0700
    temp tree. Removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_as(
    name: str, *args: str, password: str | None = None, stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    """Run a program as account `name` from /, with no PG* settings but the password it
    guesses (PGPASSWORD): how another local user would try the embedded server."""
    account = pwd.getpwnam(name)
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "PGCONNECT_TIMEOUT": "5", **env}
    if password is not None:
        env["PGPASSWORD"] = password
    return subprocess.run(
        args,
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[],
        cwd="/",
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@contextlib.contextmanager
def private_server(prefix: str, port: int = 5432) -> Iterator[EmbeddedPostgres]:
    """An embedded PostgreSQL of the test's own, tenure migrated in, for a test to stop,
    crash and restart; stopped and removed afterwards. It listens on a Unix socket in its
    own directory only, so ``port`` names the socket and never clashes with a neighbour."""
    with traversable_temp_dir(prefix) as root:
        server = EmbeddedPostgres(root / "data", port=port)
        try:
            migrate(server.start())
            yield server
        finally:
            server.stop()
