"""Starting a PostgreSQL program: as the server's account, in a session of its own, and
dying with the process that started it."""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .._errors import ConfigError
from ._account import server_account
from ._host import child_env

DEATH_SIGNAL = signal.SIGQUIT
PR_SET_PDEATHSIG = 1


def spawn(
    args: list[str], *, stdout: int, stdin: int = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    """Start a PostgreSQL program as the server's user, in its own session, dying with us."""
    account = server_account()
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
            env=child_env(),
            start_new_session=True,  # a terminal's Ctrl-C goes to the owner, not the server
            preexec_fn=_die_with_owner_hook(),
            **kwargs,
        )

    try:
        return _spawner(os.getpid()).submit(popen).result()
    except (OSError, subprocess.SubprocessError) as exc:
        raise ConfigError(f"cannot run {args[0]}: {exc}") from exc


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
