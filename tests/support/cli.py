"""The ``tenure`` command as a real subprocess, and what its failures must look like.

A failing command prints one error line on stderr (``tenure: error: ...``), under
it only the indented problems of a payload that does not fit its tool, exits
non-zero, and never shows a traceback or asyncio's "Future exception was never
retrieved" (printed when a failed future is collected, after the error line).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from .workers import REPO_ROOT

__all__ = ["assert_clean_error", "assert_one_line_error", "run_tenure"]

TIMEOUT = 60.0


def run_tenure(
    args: Sequence[str | bytes],
    *,
    dsn: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path = REPO_ROOT,
    timeout: float = TIMEOUT,
) -> subprocess.CompletedProcess[bytes]:
    """``python -m tenure ARGS`` with ``TENURE_DSN=dsn``; output kept as bytes (an argument
    may be invalid UTF-8, and so may what a broken command prints)."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
    child_env.update(env or {})
    if dsn is not None:
        child_env["TENURE_DSN"] = dsn
    return subprocess.run(
        [sys.executable.encode(), b"-m", b"tenure", *(os.fsencode(a) for a in args)],
        cwd=cwd,
        env=child_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def assert_one_line_error(done: subprocess.CompletedProcess[bytes], *expected: str) -> str:
    """The command failed cleanly: non-zero exit, one line on stderr holding ``expected``."""
    head = assert_clean_error(done.returncode, done.stderr, done.stdout, *expected)
    assert len(done.stderr.splitlines()) == 1, done.stderr
    return head


def assert_clean_error(code: int, stderr: bytes | str, stdout: bytes | str, *expected: str) -> str:
    """A failure as the command must show it: a non-zero exit, nothing on stdout, one error
    line on stderr holding ``expected`` and under it nothing but indented problems; no
    traceback. Returns the error line."""
    err = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    shown = f"rc={code}\nstderr:\n{err}\nstdout:\n{stdout[-2000:]!r}"
    assert code != 0, shown
    assert "Traceback" not in err and "never retrieved" not in err, shown
    head, *problems = err.splitlines() or [""]
    assert head.startswith("tenure") and ": error: " in head and err.endswith("\n"), shown
    assert all(line.startswith("  ") for line in problems), shown
    for text in expected:
        assert text in head, shown
    assert not stdout, shown
    return head
