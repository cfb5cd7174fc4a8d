"""`tenure embedded` says where the embedded server is and whether it runs; `--remove`
undoes what tenure made for it (issue 22, item 12).

Running as root, the first `tenure demo` created a `_tenure` system account and
`/var/lib/tenure` without saying so, and nothing took them away again. Each is now
said on stderr when it is made, and `tenure embedded --remove` deletes them. As root
these tests use an account name of their own (`fresh_account_name`) and stand-ins for
`/var/lib/tenure` and root's private home: `_tenure` may run other servers here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.servers import traversable_temp_dir

from tenure._cli import main
from tenure._embedded import EmbeddedPostgres, _account, _layout

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root gets a server account")


@pytest.fixture
def base(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A traversable scratch dir, and an environment without any DSN or TENURE_HOME."""
    for name in [n for n in os.environ if n.startswith(("TENURE_", "PG", "XDG_DATA_HOME"))]:
        monkeypatch.delenv(name)
    with traversable_temp_dir("tenure-remove-") as path:
        yield path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_status_then_remove_refused_while_it_runs_then_done(
    base: Path,
    fresh_account_name: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = base / "home"
    monkeypatch.setenv("TENURE_HOME", str(home))
    code, out, _ = _run(capsys, "embedded")
    assert code == 0
    assert re.search(rf"^data directory\s+{home / 'pg18'} \(not created yet\)$", out, re.M)
    assert re.search(r"^server\s+not running", out, re.M)

    server = EmbeddedPostgres()
    server.start()
    try:
        code, out, _ = _run(capsys, "embedded")
        assert re.search(
            rf"^server\s+running, pid {server.pid}, started by pid {os.getpid()}", out, re.M
        )
        assert re.search(r"^DSN\s+host=", out, re.M)
        code, out, err = _run(capsys, "embedded", "--remove")
        assert code == 1 and out == ""
        assert err == (
            f"tenure: error: the embedded PostgreSQL in {home / 'pg18'} is running "
            f"(pid {server.pid}, started by pid {os.getpid()}); stop that process first\n"
        )
        assert (home / "pg18" / "PG_VERSION").is_file()
    finally:
        server.stop()

    code, out, _ = _run(capsys, "embedded", "--remove")
    assert code == 0
    removed = {line.removeprefix("removed ") for line in out.splitlines()}
    assert {str(home / n) for n in ("pg18", "pg18.log", "pg18.pgpass", "pg18.lock")} <= removed
    assert home.is_dir() and list(home.iterdir()) == []  # TENURE_HOME itself is the user's
    if os.geteuid() == 0:  # the account serves every data dir: kept for a TENURE_HOME
        assert _account.find_account(fresh_account_name) is not None
    code, out, _ = _run(capsys, "embedded", "--remove")
    assert (code, out) == (0, f"nothing to remove: no embedded PostgreSQL in {home / 'pg18'}\n")


@as_root
def test_as_root_the_account_and_the_data_dir_are_announced_then_removed(
    base: Path,
    fresh_account_name: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root_home = base / "var" / "lib" / "tenure"  # /var/lib/tenure's stand-in
    private = base / "root"
    private.mkdir(mode=0o700)  # like /root: the server's account cannot pass
    monkeypatch.setattr(_layout, "ROOT_HOME", root_home)
    monkeypatch.setenv("HOME", str(private))

    code, _, err = _run(capsys, "migrate")
    assert code == 0, err
    assert (
        f"tenure: created the system account {fresh_account_name!r} to run PostgreSQL, which "
        "refuses to run as root (`tenure embedded --remove` deletes it)\n"
    ) in err
    assert (
        f"tenure: created an embedded PostgreSQL data directory in {root_home / 'pg18'} "
        "(`tenure embedded --remove` deletes it)\n"
    ) in err
    assert _account.find_account(fresh_account_name) is not None

    code, out, _ = _run(capsys, "embedded")
    assert re.search(rf"^data directory\s+{root_home / 'pg18'}$", out, re.M)
    assert re.search(rf"^runs as\s+{fresh_account_name}$", out, re.M)

    code, out, err = _run(capsys, "embedded", "--remove")
    assert code == 0, err
    assert f"removed {root_home / 'pg18'}" in out.splitlines()
    assert f"removed {root_home}" in out.splitlines()
    assert f"removed the system account {fresh_account_name!r}" in out.splitlines()
    assert not root_home.exists() and (base / "var" / "lib").is_dir()
    assert _account.find_account(fresh_account_name) is None
