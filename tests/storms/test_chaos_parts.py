"""The chaos kit's parts without a database: the proxy's modes, the history, HTTP parsing."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure._chaos._history import HistoryWriter, read_history
from tenure._chaos._proxy import ChaosProxy
from tenure._chaos._unpleasant import first_request, parse_response


@pytest.fixture
def echo() -> Iterator[int]:
    """A TCP echo server on loopback; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=pump, args=(conn,), daemon=True).start()

    def pump(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    server.close()


def talk(proxy: ChaosProxy, data: bytes, timeout: float = 2.0) -> bytes:
    """Send ``data``, return what came back: b"" for silence, b"<reset>" for an RST."""
    try:
        with socket.create_connection((proxy.host, proxy.port), timeout=timeout) as sock:
            sock.sendall(data)
            return sock.recv(65536)
    except TimeoutError:
        return b""
    except (ConnectionResetError, BrokenPipeError):
        return b"<reset>"


def test_the_proxy_passes_drops_resets_and_delays(echo: int) -> None:
    with ChaosProxy("127.0.0.1", echo, record=True) as proxy:
        assert talk(proxy, b"hello") == b"hello"
        proxy.set_mode("drop_responses")
        assert talk(proxy, b"lost", timeout=0.5) == b""
        assert proxy.bytes_dropped == 4  # the echo came back and was discarded
        proxy.set_mode("blackhole")
        assert talk(proxy, b"void", timeout=0.5) == b""
        assert proxy.bytes_dropped == 8  # this time the request itself
        proxy.set_mode("reset")
        assert talk(proxy, b"x") in (b"", b"<reset>")
        assert proxy.resets >= 1
        proxy.set_mode("delay", delay=0.3)
        with socket.create_connection((proxy.host, proxy.port), timeout=5) as sock:
            sock.sendall(b"slow")
            sock.settimeout(0.2)
            with pytest.raises(TimeoutError):
                sock.recv(100)  # not yet: 0.3 s each way
            sock.settimeout(5)
            assert sock.recv(100) == b"slow"
        proxy.set_mode("pass")
        assert talk(proxy, b"again") == b"again"
        assert (bytes(proxy.transcripts[0][0]), bytes(proxy.transcripts[0][1])) == (
            b"hello",
            b"hello",
        )
    with pytest.raises(ValueError, match="unknown proxy mode"):
        ChaosProxy("127.0.0.1", echo).set_mode("wobble")


def test_the_first_request_hook_runs_before_the_bytes_go_on(echo: int) -> None:
    seen: list[int] = []
    proxy = ChaosProxy("127.0.0.1", echo, on_first_request=lambda: seen.append(len(seen)))
    with proxy:
        assert talk(proxy, b"one") == b"one"
        assert talk(proxy, b"two") == b"two"
    assert seen == [0]  # once, for the first request only


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
