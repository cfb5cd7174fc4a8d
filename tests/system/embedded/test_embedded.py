"""The embedded server with real processes: start, stop, owner death, restarts, refusals.

Data dirs live in a fresh directory under the system temp dir made traversable
(0755): when the tests run as root the server runs as its own account, which
cannot enter pytest's own 0700 temp tree.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from tests.support.servers import run_as, traversable_temp_dir
from tests.support.waiting import wait_until

import tenure._embedded as embedded
from tenure._embedded import EmbeddedPostgres, _account, _binaries
from tenure._errors import ConfigError

OWNER_SCRIPT = """
import sys, threading
from pathlib import Path
from tenure._embedded import EmbeddedPostgres

server = EmbeddedPostgres(Path(sys.argv[1]))
server.start()
print(server.pid, flush=True)
threading.Event().wait()
"""


def _gone(pid: int) -> bool:
    """No such process, or only a zombie nobody reaped yet (it holds nothing)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return text[text.rindex(")") + 2] == "Z"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _socket_file(server: EmbeddedPostgres) -> Path:
    params = conninfo_to_dict(server.dsn)
    return Path(str(params["host"])) / f".s.PGSQL.{params['port']}"


def _query(server: EmbeddedPostgres, sql: str) -> object:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    return None if row is None else row[0]


@pytest.fixture(scope="module")
def root_dir() -> Iterator[Path]:
    with traversable_temp_dir("tenure-emb-") as path:
        yield path


@pytest.fixture
def fresh_dir(root_dir: Path, request: pytest.FixtureRequest) -> Path:
    path = root_dir / str(request.node.name)
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def running(root_dir: Path) -> Iterator[EmbeddedPostgres]:
    """One server shared by the tests that only need it running; its path is too long
    for a Unix socket, so its socket lives in a short directory elsewhere."""
    server = EmbeddedPostgres(root_dir / ("long-" + "x" * 80) / "pg18")
    server.start()
    yield server
    server.stop()
    socket_dir = _socket_file(server).parent
    if socket_dir != server.data_dir:
        socket_dir.rmdir()


def test_fresh_start_answers_and_stop_frees_everything(
    fresh_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENURE_HOME", str(fresh_dir))
    server = EmbeddedPostgres()
    assert server.data_dir == fresh_dir / "pg18"

    dsn = server.start()
    assert server.start() == dsn  # idempotent
    pid = server.pid
    assert pid is not None
    assert str(_query(server, "SELECT version()")).startswith("PostgreSQL 18")
    assert _socket_file(server).exists()

    server.stop()
    server.stop()  # idempotent
    assert server.pid is None
    assert _gone(pid)
    assert not _socket_file(server).exists()
    assert not (server.data_dir / "postmaster.pid").exists()


def test_server_dies_with_its_owner_and_leftovers_do_not_block(fresh_dir: Path) -> None:
    data_dir = fresh_dir / "pg18"
    src = str(Path(embedded.__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert owner.stdout is not None and owner.stderr is not None
    line = owner.stdout.readline()
    if not line.strip():
        owner.kill()
        pytest.fail(f"owner did not start the server: {owner.communicate()[1]}")
    postmaster = int(line)
    owner.kill()
    owner.communicate()
    wait_until(lambda: _gone(postmaster), message=f"postmaster {postmaster} outlived its owner")

    first = EmbeddedPostgres(data_dir)
    first.start()
    assert _query(first, "SELECT 1") == 1

    # A postmaster killed outright leaves its pid file and socket lock behind, naming a
    # zombie here (nobody reaps it yet); the next start must see through both.
    killed = first.pid
    assert killed is not None
    os.kill(killed, signal.SIGKILL)
    wait_until(lambda: _gone(killed), message=f"postmaster {killed} survived SIGKILL")
    assert (data_dir / "postmaster.pid").exists()

    second = EmbeddedPostgres(data_dir)
    try:
        second.start()
        assert _query(second, "SELECT 1") == 1
    finally:
        second.stop()
        first.stop()


@pytest.mark.parametrize("mode", ["immediate", "fast"])
def test_restart_keeps_committed_data(
    running: EmbeddedPostgres, mode: Literal["fast", "immediate"]
) -> None:
    table = f"kept_{mode}"
    with psycopg.connect(running.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (v int)")
        conn.execute(f"INSERT INTO {table} VALUES (42)")
    before = running.pid

    running.restart(mode)

    assert running.pid not in (None, before)
    assert _query(running, f"SELECT v FROM {table}") == 42
    assert _socket_file(running).parent != running.data_dir  # the short socket dir


def test_second_start_on_a_held_data_dir_is_refused(running: EmbeddedPostgres) -> None:
    intruder = EmbeddedPostgres(running.data_dir)
    with pytest.raises(ConfigError, match="already holds") as caught:
        intruder.start()
    assert running.dsn in str(caught.value)
    assert intruder.pid is None
    assert _query(running, "SELECT 1") == 1


def test_use_shares_a_running_server_and_leaves_it_to_its_owner(
    running: EmbeddedPostgres,
) -> None:
    """What an App without a DSN does when another process runs the server (issue 22,
    item 8; tests/system/docs/test_tutorial_shell.py does it with two processes)."""
    borrower = EmbeddedPostgres(running.data_dir)
    assert borrower.use() == running.dsn
    assert borrower.pid is None  # not its own
    assert borrower.borrowed is not None
    assert (borrower.borrowed.pid, borrower.borrowed.owner) == (running.pid, os.getpid())
    assert _query(borrower, "SELECT 1") == 1
    with pytest.raises(ConfigError, match="another process's"):
        borrower.restart()
    borrower.stop()
    assert borrower.borrowed is None
    assert running.pid is not None and _query(running, "SELECT 1") == 1  # still up


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_binaries_the_server_account_cannot_reach_are_copied(root_dir: Path) -> None:
    private = Path(tempfile.mkdtemp(prefix="tenure-private-"))  # 0700, root's own
    try:
        bundled = _binaries.bundled_install()
        top, parts = _binaries.install_parts(bundled)
        for part in parts:  # hard links where possible: as good as a copy, and instant
            shutil.copytree(part, private / part.relative_to(top), copy_function=_link_or_copy)
        hidden = private / bundled.relative_to(top)
        assert not _binaries.usable_by_others(hidden)

        copy = _binaries.cached_copy(hidden, root_dir / "cache")
        assert _binaries.cached_copy(hidden, root_dir / "cache") == copy  # made once
        assert _binaries.usable_by_others(copy)

        target = root_dir / "initdb-as-the-server-account"
        target.mkdir(mode=0o700)
        account = _account.server_account()
        assert account is not None
        os.chown(target, account.pw_uid, account.pw_gid)
        initdb = [str(copy / "bin" / "initdb"), "-N", "--locale=C", "-U", "postgres"]
        result = run_as(account.pw_name, *initdb, "-D", str(target))
        assert result.returncode == 0, result.stderr
    finally:
        shutil.rmtree(private)
