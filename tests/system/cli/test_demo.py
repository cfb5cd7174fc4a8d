"""`tenure demo` as a newcomer runs it: each protection its report names happened (a count
above zero, by owner), every flag `--help` lists is honoured or refused, and however it ends
(its report, SIGTERM while it lingers or while a worker is frozen) every process it started
is gone: workers, the example case service, the dashboard, the embedded PostgreSQL.

Each run has its own embedded server (``TENURE_HOME`` in a temporary directory), so the
demo's fixed database names never meet another test's."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from tests.support.cli import run_tenure
from tests.support.waiting import wait_until
from tests.support.workers import REPO_ROOT

pytestmark = pytest.mark.slow

# Every protection the report names, each of which the demo makes happen.
PROTECTIONS = (
    "reclaims after a lost lease",
    "stale owners stopped, their lease lost",
    "stale commits rejected",
    "stale requests rejected by the fence",
    "repeated requests replayed, not reapplied",
)
RUN_TIMEOUT = 240.0


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = defaultdict(list)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        found[int(fields[1])].append(int(stat.parent.name))
    return found


def _descendants(pid: int) -> set[int]:
    children, found, todo = _children(), set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _listening(url: str) -> bool:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex((parts.hostname, parts.port)) == 0


@dataclass
class Demo:
    """One `tenure demo` process and what it prints."""

    process: subprocess.Popen[bytes]
    out: Path
    children: set[int] = field(default_factory=set)  # seen before it was told to stop

    def text(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace")

    def wait_for(self, marker: str, timeout: float = RUN_TIMEOUT) -> str:
        wait_until(
            lambda: marker in self.text() or self.process.poll() is not None,
            timeout=timeout,
            interval=0.1,
            message=f"the demo never printed {marker!r}",
        )
        text = self.text()
        assert marker in text, f"the demo ended (rc {self.process.returncode}):\n{text[-4000:]}"
        return text

    def url(self, role: str) -> str:
        found = re.search(rf"(?:{role})[^\n]*?(http://127\.0\.0\.1:\d+)", self.text())
        assert found, self.text()
        return found.group(1)

    def terminate_and_check(self) -> None:
        """SIGTERM the demo: it exits 143, and everything it started stops with it."""
        started = self.children = _descendants(self.process.pid)
        urls = [self.url("receiver|tracker"), self.url("dashboard")]
        assert started and all(_listening(url) for url in urls)
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(60) == 128 + signal.SIGTERM, self.text()[-3000:]
        wait_until(
            lambda: not any(_running(pid) for pid in started),
            timeout=30,
            interval=0.1,
            message=f"left running after SIGTERM: {[p for p in started if _running(p)]}",
        )
        assert not any(_listening(url) for url in urls)
        assert "SIGTERM: stopping everything the demo started" in self.text()


@pytest.fixture
def demo_home() -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix="tenure-demo-test-"))
    os.chmod(work, 0o755)  # as root, the embedded server runs as its own account
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def start_demo(demo_home: Path) -> Iterator[list[Demo]]:
    """Start ``tenure demo ARGS`` on a private embedded server; whatever a failed test left
    running is SIGKILLed afterwards (a demo without its fix leaves its children behind)."""
    started: list[Demo] = []
    yield started
    for demo in started:
        leftovers = _descendants(demo.process.pid) | demo.children | {demo.process.pid}
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        demo.process.wait(30)


def _launch(started: list[Demo], home: Path, *args: str) -> Demo:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
    env["TENURE_HOME"] = str(home / "home")
    out = home / f"demo-{len(started)}.out"
    with out.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "tenure", "demo", *args],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    demo = Demo(process, out)
    started.append(demo)
    return demo


def _count(report: str, label: str) -> int:
    found = re.search(rf"^  {re.escape(label)}\s+(\d+)", report, re.MULTILINE)
    assert found, f"{label!r} not in the report:\n{report}"
    return int(found.group(1))


def test_every_protection_the_report_names_happened_and_sigterm_while_lingering_stops_all(
    start_demo: list[Demo], demo_home: Path
) -> None:
    """The default demo: each named protection counted above zero (stale commits and
    stale fences read 0 in every default run before the demo staged them), owners
    counted once however many rows they left; then SIGTERM while the dashboard lingers
    (the example case service was still listening 80 s later)."""
    demo = _launch(start_demo, demo_home, "--linger", "300")
    report = demo.wait_for("dashboard stays up for 300 s")
    ok = "verdict: every call committed once, every side effect applied once"
    assert ok in report, f"the whole output:\n{report}"
    for label in PROTECTIONS:
        assert _count(report, label) > 0, (label, report)
    assert _count(report, "duplicates committed") == 0
    assert _count(report, "duplicate side effects applied") == 0
    assert re.search(r"SIGKILL worker-\d in the middle of jobs", report)
    assert report.count("froze (SIGSTOP") == 3 and report.count("SIGCONT worker-") == 3
    assert httpx.get(demo.url("dashboard"), timeout=10).status_code == 200
    demo.terminate_and_check()


def test_sigterm_while_a_worker_is_frozen_stops_every_process_the_demo_started(
    start_demo: list[Demo], demo_home: Path
) -> None:
    demo = _launch(start_demo, demo_home, "--jobs", "3")
    demo.wait_for("froze (SIGSTOP")
    demo.terminate_and_check()


def test_the_pipeline_demo_honours_linger_with_its_dashboard(
    start_demo: list[Demo], demo_home: Path
) -> None:
    """`--pipeline --linger` kept no dashboard up before: the flag was ignored."""
    demo = _launch(start_demo, demo_home, "--pipeline", "--runs", "1", "--linger", "300")
    report = demo.wait_for("dashboard stays up for 300 s")
    assert "verdict: no verdict lost, no step dispatched twice" in report
    url = demo.url("dashboard stays up")
    page = httpx.get(url, timeout=10)
    assert page.status_code == 200 and "review" in page.text, page.text[:2000]
    demo.terminate_and_check()


def test_the_agent_demo_honours_linger_too(start_demo: list[Demo], demo_home: Path) -> None:
    pytest.importorskip("pydantic_ai", reason="needs the extra: pip install -e '.[pydantic-ai]'")
    demo = _launch(start_demo, demo_home, "--agent", "--linger", "300")
    report = demo.wait_for("dashboard stays up for 300 s")
    assert "verdict: model calls = steps, one effect per tool call, the same answer" in report, (
        report
    )
    assert httpx.get(demo.url("dashboard stays up"), timeout=10).status_code == 200
    demo.terminate_and_check()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pipeline", "--jobs", "5"], "--jobs has no meaning with --pipeline"),
        (["--agent", "--jobs", "5"], "--jobs has no meaning with --agent"),
        (["--agent", "--runs", "2"], "--runs has no meaning with --agent"),
        (["--runs", "2"], "--runs has no meaning without --pipeline"),
        (["--pipeline", "--agent"], "not allowed with argument"),
    ],
)
def test_a_flag_of_another_variant_is_refused_not_ignored(args: list[str], message: str) -> None:
    done = run_tenure(["demo", *args], timeout=60)
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, err
    assert message in err and "Traceback" not in err, err
