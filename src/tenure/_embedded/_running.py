"""A server running on a data dir, as its pid file (`postmaster.pid`) tells: its pid, the
process that started it, where it listens, whether it is ready; and its DSN."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from psycopg.conninfo import make_conninfo

from ._host import is_running_postgres, parent_pid

PID_STATUS_LINE = 7  # postmaster.pid: "ready" once the server accepts connections


@dataclass(frozen=True, slots=True)
class RunningServer:
    """A live postmaster on a data dir, as its pid file says: its pid, the process that
    started it (its parent), and where it listens."""

    pid: int
    owner: int | None
    socket_dir: Path
    port: int

    def dsn(self, passfile: Path) -> str:
        return conninfo(self.socket_dir, self.port, passfile)


def running_on(data_dir: Path) -> RunningServer | None:
    """The live postmaster that the data dir's pid file names; None without one (no pid
    file, or a stale one)."""
    lines = pid_file_lines(data_dir)
    pid = pid_of(lines)
    if pid is None or not is_running_postgres(pid):
        return None
    port = int(lines[3]) if len(lines) > 3 and lines[3].isdigit() else 5432
    socket_dir = Path(lines[4]) if len(lines) > 4 and lines[4] else data_dir
    return RunningServer(pid, parent_pid(pid), socket_dir, port)


def ready(data_dir: Path) -> bool:
    """Whether the pid file says its server accepts connections."""
    return pid_file_lines(data_dir)[PID_STATUS_LINE:][:1] == ["ready"]


def conninfo(socket_dir: Path, port: int, passfile: Path) -> str:
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


def pid_file_lines(data_dir: Path) -> list[str]:
    try:
        return [line.strip() for line in (data_dir / "postmaster.pid").read_text().splitlines()]
    except OSError:
        return []


def pid_of(lines: list[str]) -> int | None:
    return int(lines[0]) if lines and lines[0].isdigit() else None
