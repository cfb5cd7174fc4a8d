"""``tenure chaos`` (the unpleasant test for users' own tools) against real receivers.

Against the example case service it must pass: W2's repeat is replayed, W1's stale
retry is refused with 409, and the job ends with W2's token. Against a receiver
without a fence (it applies whatever arrives) it must say so and exit 1.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.support.storm.harness import ReceiverProcess

from tenure._chaos import main

REPO_ROOT = Path(__file__).resolve().parents[3]
ARGS = ["tests.apps.storm_app:app", "storm_call", '{"n": 1, "work": 0.2}']


@pytest.fixture
def example_receiver(receiver_dsn: str, storm_dir: Path) -> Iterator[ReceiverProcess]:
    with ReceiverProcess(receiver_dsn, storm_dir / "receiver", cwd=REPO_ROOT) as receiver:
        yield receiver


class _Unfenced(BaseHTTPRequestHandler):
    """Creates a "case" for every POST, whoever sends it: no high-water mark, no replay."""

    created = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        type(self).created += 1
        body = json.dumps({"case_id": type(self).created}).encode()
        self.send_response(201)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def unfenced_receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Unfenced)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(10)


def run(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    dsn: str,
    keep: Path,
) -> tuple[int, dict[str, object]]:
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setenv("TENURE_DSN", dsn)  # restored after the test (the command sets it)
    options = ["--receiver", url, "--receiver-env", "STORM_RECEIVER_URL", "--dsn", dsn]
    code = main([*ARGS, *options, "--keep", str(keep), "--json"])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_the_example_receiver_fences_the_stale_owner_and_replays_the_repeat(
    example_receiver: ReceiverProcess,
    tenure_dsn: str,
    storm_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, report = run(capsys, monkeypatch, example_receiver.url, tenure_dsn, storm_dir / "k")
    assert code == 0, report
    assert report["ok"] is True
    assert report["replayed"] is True
    assert report["stale_rejected"] is True
    assert report["ended_with_w2"] is True
    assert report["w1_outcomes_after_cut"] == 0
    w1, w2 = report["w1_token"], report["w2_token"]
    assert isinstance(w1, int) and isinstance(w2, int) and w2 > w1
    assert report["final_token"] == w2 and report["final_owner"] == "chaos-w2"
    # The receiver's own log agrees: applied once under W1, replayed to W2, W1 refused.
    key = f"tool-job:{report['job_id']}:case"
    decided = [(d["decision"], d["token"]) for d in example_receiver.decisions() if d["key"] == key]
    assert decided == [("accepted", w1), ("replayed", w2), ("stale", w1)]


def test_a_receiver_without_a_fence_fails_the_test(
    unfenced_receiver: str,
    tenure_dsn: str,
    storm_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, report = run(capsys, monkeypatch, unfenced_receiver, tenure_dsn, storm_dir / "k")
    assert code == 1
    assert report["ok"] is False
    assert report["replayed"] is False  # W2's repeat was applied a second time
    assert report["stale_rejected"] is False  # W1's stale retry was applied a third time
    assert report["ended_with_w2"] is True  # tenure's own fence still held
    assert _Unfenced.created == 3


def test_the_report_reads_as_a_verdict() -> None:
    from tenure._chaos._unpleasant import ChaosReport

    report = ChaosReport(tool="t", job_id=1, lease=3.0, w1_token=1, w2_token=2)
    assert report.lines()[-1] == "verdict: fail"
    report.replayed = report.stale_rejected = report.ended_with_w2 = True
    assert report.lines()[-1] == "verdict: pass"
    report.w1_outcomes_after_cut = 1
    assert not report.ok


def test_the_options_fit_under_the_tenure_command() -> None:
    """What src/tenure/_cli.py adds to wire ``tenure chaos`` (see add_chaos_arguments)."""
    import argparse

    from tenure._chaos import add_chaos_arguments
    from tenure._cli import _parser

    parser = _parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if "chaos" not in commands.choices:
        add_chaos_arguments(commands.add_parser("chaos", help="the unpleasant test"))
    given = ["chaos", "m:app", "t", "--receiver", "http://r", "--receiver-env", "E"]
    args = parser.parse_args(["--dsn", "host=a", *given])
    assert (args.command, args.dsn, args.app, args.tool, args.payload) == (
        "chaos",
        "host=a",
        "m:app",
        "t",
        "{}",
    )
    assert parser.parse_args([*given, "--dsn", "host=b"]).dsn == "host=b"
