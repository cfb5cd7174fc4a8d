"""The chaos kit's parts without a database: the history, HTTP parsing.

The proxy's own tests are in ``tests/integration/faults/test_proxy.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tenure._chaos._history import HistoryWriter, read_history
from tenure._chaos._unpleasant import first_request, parse_response


def test_the_history_keeps_whole_lines_only(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / "w1-1.jsonl", worker="w1")
    writer.write("job_claimed", job=1, token=7, deadline_monotonic=12.5)
    writer.close()
    with (tmp_path / "w1-1.jsonl").open("a") as f:
        f.write('{"ev": "torn", "job"')  # a SIGKILL in the middle of a write
    (tmp_path / "w2-2.jsonl").write_text('{"ev": "clock", "worker": "w2"}\n')
    events = read_history(tmp_path)
    assert [e["ev"] for e in events] == ["job_claimed", "clock"]
    assert events[0]["token"] == 7 and events[0]["worker"] == "w1"
    assert events[0]["pid"] == os.getpid() and {"wall", "mono"} <= set(events[0])


def test_http_requests_and_answers_are_parsed_from_raw_bytes() -> None:
    raw = b"POST /cases HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbodyGET / HTTP/1.1\r\n\r\n"
    assert first_request(raw) == b"POST /cases HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody"
    assert first_request(b"POST / HTTP/1.1\r\nHost") == b""
    answer = b"HTTP/1.1 201 Created\r\nX-Idempotent-Replay: true\r\ncontent-length: 2\r\n\r\n{}"
    assert parse_response(answer) == (
        201,
        {"x-idempotent-replay": "true", "content-length": "2"},
        b"{}",
    )
    assert parse_response(b"garbage")[0] is None
