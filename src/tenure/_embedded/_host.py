"""The machine as the embedded server meets it: processes, as /proc tells of them; the
environment a PostgreSQL program runs in; and tenure's one-line notes on stderr about
what it made here. Nothing in it knows a data dir."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from .._errors import ConfigError

START_TIMEOUT = 30.0
POLL_INTERVAL = 0.02


def tell(message: str) -> None:
    """One ``tenure: ...`` line on stderr: what tenure just did on this machine."""
    print(f"tenure: {message}", file=sys.stderr, flush=True)


def child_env() -> dict[str, str]:
    """Our environment without libpq/server PG* variables, in the C locale."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def parent_pid(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def command_of(pid: int) -> str:
    """A process's command line, shortened (``?`` when it cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    words = [os.fsdecode(word) for word in raw.split(b"\0") if word]
    line = " ".join(Path(w).name if i < 2 and "/" in w else w for i, w in enumerate(words))
    return line if len(line) <= 120 else line[:117] + "..."


def processes_of(uid: int) -> list[int]:
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


def is_running_postgres(pid: int) -> bool:
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


def shared_memory_attached(shmid: str) -> bool:
    """Whether processes still attach the SysV segment of a previous server (Linux only)."""
    if not shmid.isdigit():
        return False
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return False
    return any(row.split()[1] == shmid and int(row.split()[6]) > 0 for row in rows)


@contextlib.contextmanager
def flock(path: Path, deadline: float) -> Iterator[None]:
    """Serialise across processes: starts on one data dir (initdb, pid file check, launch),
    and the making of the server's account."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
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
