"""EmbeddedPostgres: one server on one data dir, started, shared and stopped.

The server is a direct child of its owner and listens on a Unix socket only, so nothing
else on the machine can reach it over TCP.

Lifetime: the owner calls `stop()`. If the owner dies instead, Linux sends the
postmaster SIGQUIT (PR_SET_PDEATHSIG, `_spawn.py`). SIGQUIT is an immediate shutdown:
the postmaster stops its children and removes its socket and pid file within
milliseconds, while committed data stays safe in the WAL. SIGTERM would wait for every
client (worker subprocesses keep it alive), SIGINT first writes a checkpoint while a
next owner may be waiting, and SIGKILL orphans backends that still hold shared memory.

Sharing: `use()` (what an App without a DSN calls) first looks for a server another
process of this user runs on the data dir: when its pid file names a live postgres that
lets us in with our passfile, it is used as it is, and only its owner stops it (a
`tenure enqueue` in a second terminal uses the server of the `tenure worker` in the
first, and leaves it running). `start()` owns or refuses: a start on a data dir held by
a live server raises ConfigError naming that server's DSN.

Losing the passfile is harmless: the next start sets a new password (in single-user
mode, as only the data dir's owner can). A data dir from an older tenure (trust auth,
owned by `nobody`) is upgraded on its next start, with a warning; it is never served
without a password.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

import psycopg

from .._errors import ConfigError
from ._access import PG_HBA, SECRET_BYTES, lock_down, read_secret, write_secret
from ._account import server_account
from ._binaries import pg_bin_dir, pg_major
from ._cluster import adopt, initdb
from ._files import makedirs, open_log, owned_private_dir, require_reachable, tail
from ._host import (
    POLL_INTERVAL,
    START_TIMEOUT,
    flock,
    is_running_postgres,
    shared_memory_attached,
)
from ._layout import default_data_dir, sibling, socket_dir
from ._running import RunningServer, conninfo, pid_file_lines, pid_of, ready, running_on
from ._spawn import spawn

logger = logging.getLogger("tenure.embedded")

SETTINGS = (
    "listen_addresses=",
    "max_connections=200",
    "shared_buffers=128MB",
    "cluster_name=tenure",
    "password_encryption=scram-sha-256",
    "unix_socket_permissions=0700",
)


class EmbeddedPostgres:
    """One PostgreSQL server on one data dir: started and stopped by this object's process
    (`start`), or, with `use`, another process's already running there, which only its own
    process stops."""

    def __init__(self, data_dir: Path | None = None, *, port: int = 5432) -> None:
        if not 0 < port < 65536:
            raise ConfigError(f"embedded PostgreSQL port must be 1..65535, got {port}")
        self._data_dir = (data_dir or default_data_dir()).expanduser().absolute()
        self._port = port
        self._socket_dir = socket_dir(self._data_dir, port)
        self._log = sibling(self._data_dir, ".log")
        self._passfile = sibling(self._data_dir, ".pgpass")
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
        return conninfo(self._socket_dir, self._port, self._passfile)

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
        return running_on(self._data_dir)

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
            if server_account() is not None:
                require_reachable(parent)
            makedirs(parent)
            with flock(sibling(self._data_dir, ".lock"), deadline):
                if borrow:
                    self._borrowed = self._running_server(deadline)
                    if self._borrowed is not None:
                        return self.dsn
                self._prepare(deadline)
                log = open_log(self._log)
                offset = os.fstat(log).st_size
                try:
                    self._proc = spawn(self._server_args(), stdout=log)
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
            adopt(self._data_dir)
        elif self._data_dir.is_dir() and any(self._data_dir.iterdir()):
            raise ConfigError(
                f"{self._data_dir} is neither empty nor a PostgreSQL data dir; "
                "remove it or choose another"
            )
        else:
            initdb(self._data_dir)
        if self._socket_dir != self._data_dir:
            owned_private_dir(self._socket_dir)
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
            if ready(self._data_dir):
                try:
                    psycopg.connect(running.dsn(self._passfile), connect_timeout=5).close()
                except psycopg.OperationalError as exc:
                    if ready(self._data_dir):  # not a server that began to stop meanwhile
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

    def _require_password(self, deadline: float) -> None:
        """Make the password in our passfile the only way in; runs under the start flock with
        no server on the data dir.

        Nothing to do when the passfile holds a password and pg_hba.conf is ours. Otherwise
        (a fresh data dir, a lost passfile, a data dir from an older tenure that trusted
        every local connection) set a password and write pg_hba.conf before serving.
        """
        password = read_secret(self._passfile)
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
        lock_down(self._data_dir, password, deadline)
        write_secret(self._passfile, password)

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
            if pid and is_running_postgres(pid):
                dsn = self.dsn
                if len(lines) > 4 and lines[3].strip().isdigit() and lines[4].strip():
                    dsn = conninfo(Path(lines[4].strip()), int(lines[3]), self._passfile)
                raise ConfigError(
                    f"a PostgreSQL server (pid {pid}) already holds {lock}; "
                    f"connect with TENURE_DSN={dsn!r} or stop it first"
                )
            if lock == pid_file:
                shmid = lines[6].split()[-1] if len(lines) > 6 and lines[6].split() else ""
                while shared_memory_attached(shmid):
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
                    f"{tail(self._log, log_offset)}"
                )
            if pid_of(pid_file_lines(self._data_dir)) == proc.pid and ready(self._data_dir):
                break
            if time.monotonic() > deadline:
                self._halt(signal.SIGQUIT, 5.0)
                raise ConfigError(
                    f"PostgreSQL on {self._data_dir} was not ready within {START_TIMEOUT:.0f} s: "
                    f"{tail(self._log, log_offset)}"
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
