"""``tenure chaos``: the unpleasant test, run against your own tool and receiver.

The test the lease protocol is judged by: cut the first owner off after it acted, let
its lease expire and a second owner redo the work, then let the first one come back;
it must neither extend, nor commit, nor cause a second effect.

1. W1 (a real ``tenure worker`` process) claims one call of your tool and sends its
   request to your receiver, through a recording proxy.
2. The moment that request leaves W1, W1's link to PostgreSQL is cut (a proxy in
   ``blackhole``): W1 can neither extend its lease nor commit.
3. The lease runs out on the database's clock; W2 (a second worker, connected
   directly) claims the job under a higher token, runs your tool again — the same
   request with the same idempotency key — and commits.
4. W1's link heals; whatever W1 still tries is fenced.
5. The runner sends W1's recorded request once more, byte for byte, with W1's old
   token: the stale owner's retry.

It reports whether your receiver **replayed** the idempotent repeat (W2's request got
the first result, ``X-Idempotent-Replay: true``, not a second effect), whether it
**rejected the stale fence** (409 for W1's retry), and whether the job ended
``succeeded`` with **W2's token**. Exit status 0 only if all three hold.

Your tool must send its request through ``ctx.http_auth(...)`` (or the fence headers)
to the URL it reads from an environment variable (``--receiver-env``); the runner
sets that variable for each worker to that worker's recording proxy.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .._dsn import dsn_from_environment
from .._states import has_ended
from ._harness import Supervisor, wait_for
from ._history import read_history
from ._proxy import FaultProxy

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
REPLAY_HEADER = "x-idempotent-replay"
W1_NOTICES = ("heartbeat_lost", "result_rejected", "call_abandoned")


@dataclass
class HttpExchange:
    """One request as it crossed a recording proxy, and the answer it got."""

    raw_request: bytes
    status: int | None
    headers: dict[str, str]
    body: bytes

    @property
    def replayed(self) -> bool:
        return self.headers.get(REPLAY_HEADER, "").lower() == "true"

    def summary(self) -> dict[str, Any]:
        first = self.raw_request.split(b"\r\n", 1)[0].decode("latin-1")
        return {
            "request": first,
            "status": self.status,
            "replayed": self.replayed,
            "body": self.body[:300].decode("utf-8", "replace"),
        }


@dataclass
class ChaosReport:
    """What the unpleasant test saw, and its verdict."""

    tool: str
    job_id: int | None = None
    lease: float = 0.0
    w1_token: int | None = None
    w2_token: int | None = None
    w1_request: dict[str, Any] | None = None
    w2_request: dict[str, Any] | None = None
    stale_retry: dict[str, Any] | None = None
    replayed: bool = False
    stale_rejected: bool = False
    final_state: str | None = None
    final_token: int | None = None
    final_owner: str | None = None
    ended_with_w2: bool = False
    w1_outcomes_after_cut: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            self.replayed
            and self.stale_rejected
            and self.ended_with_w2
            and self.w1_outcomes_after_cut == 0
        )

    def lines(self) -> list[str]:
        mark = {True: "PASS", False: "FAIL"}
        w1 = self.w1_request or {}
        w2 = self.w2_request or {}
        retry = self.stale_retry or {}
        return [
            f"tenure chaos: the unpleasant test on tool {self.tool!r} "
            f"(job {self.job_id}, lease {self.lease:g} s, {self.seconds:.1f} s)",
            f"  W1 claimed with token {self.w1_token}, sent {w1.get('request')!r}: "
            f"{w1.get('status')}; then its database link was cut",
            f"  W2 took over with token {self.w2_token}, sent the same request: "
            f"{w2.get('status')} (replayed: {w2.get('replayed')})",
            f"  W1's request again, with its stale token {self.w1_token}: {retry.get('status')}",
            f"  [{mark[self.replayed]}] the receiver replayed the idempotent request "
            "instead of applying it twice",
            f"  [{mark[self.stale_rejected]}] the receiver rejected the stale fence (409)",
            f"  [{mark[self.ended_with_w2]}] the job ended {self.final_state} with token "
            f"{self.final_token} ({self.final_owner}); W2's token is {self.w2_token}",
            f"  [{mark[self.w1_outcomes_after_cut == 0]}] W1 committed nothing after the cut",
            *[f"  note: {note}" for note in self.notes],
            f"verdict: {'pass' if self.ok else 'fail'}",
        ]


def parse_response(raw: bytes) -> tuple[int | None, dict[str, str], bytes]:
    """Status, headers (lower-case) and body of the first HTTP response in ``raw``."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return None, {}, b""
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    body = rest[: int(length)] if length and length.isdigit() else rest
    return status, headers, body


def first_request(raw: bytes) -> bytes:
    """The first complete HTTP request in ``raw`` (headers and Content-Length body)."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        return b""
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or 0)
    return head + sep + rest[:length]


def exchange(proxy: FaultProxy) -> HttpExchange | None:
    """The first request through ``proxy`` that got an answer (or the first one at all)."""
    found = None
    for sent, received in proxy.transcripts:
        request = first_request(bytes(sent))
        if not request:
            continue
        status, headers, body = parse_response(bytes(received))
        candidate = HttpExchange(request, status, headers, body)
        if status is not None:
            return candidate
        found = found or candidate
    return found


def resend(raw: bytes, host: str, port: int, timeout: float = 30.0) -> HttpExchange:
    """Send ``raw`` (one HTTP request) on a fresh connection; read the whole answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(raw)
        received = b""
        while True:
            status, headers, body = parse_response(received)
            length = headers.get("content-length")
            if status is not None and length and len(body) >= int(length):
                break
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    status, headers, body = parse_response(received)
    return HttpExchange(raw, status, headers, body)


def run_chaos(
    app_target: str,
    tool: str,
    payload: dict[str, Any],
    receiver_url: str,
    *,
    receiver_env: str,
    dsn: str | None = None,
    timeout: float | None = None,
    workdir: Path | None = None,
    cwd: Path | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> ChaosReport:
    """Run the unpleasant test (see the module docstring) and return what happened."""
    from .._app import App, load_app

    began = time.monotonic()
    loaded = load_app(app_target)
    given = dsn or dsn_from_environment()
    # The user's App object may have been built before the DSN was known, or used already
    # (a module imported earlier, a second run in one process): a client of our own on the
    # given server, with the same tools and signing key, leaves it as it was.
    app = loaded
    if given:
        app = App(given, signing_key=loaded.registry.signing_key)
        app.registry.tools.update(loaded.registry.tools)
    spec = app.tools.get(tool)
    if spec is None:
        raise SystemExit(f"tenure chaos: {app_target} has no tool {tool!r}")
    lease = spec.policy.lease.lease
    report = ChaosReport(tool=tool, lease=lease)
    limit = timeout if timeout is not None else 3 * lease + 60.0
    target = app.dsn  # the given DSN, else $TENURE_DSN, else the embedded server
    url = urlsplit(receiver_url)
    if url.scheme != "http" or not url.hostname:
        raise SystemExit("tenure chaos: --receiver must be an http:// URL")
    port = url.port or 80
    temp = None
    if workdir is None:
        temp = Path(tempfile.mkdtemp(prefix="tenure-chaos-"))
        workdir = temp
    cut = threading.Event()
    supervisor = Supervisor(target, workdir, app_target, concurrency=1, poll_interval=0.1, cwd=cwd)
    proxies: list[FaultProxy] = []

    def receiver_proxy(name: str, hook: Callable[[], None] | None) -> str:
        proxy = FaultProxy(url.hostname or "", port, name=name, record=True, on_first_request=hook)
        proxies.append(proxy.start())
        return f"http://{proxy.host}:{proxy.port}{url.path.rstrip('/')}"

    try:
        w1_db: list[FaultProxy] = []

        def cut_w1() -> None:
            w1_db[0].set_mode("blackhole")
            cut.set()

        w1_url = receiver_proxy("w1-receiver", cut_w1)
        handle = supervisor.spawn("chaos-w1", proxy=True, env={receiver_env: w1_url})
        assert handle.proxy is not None
        w1_db.append(handle.proxy)
        supervisor.wait_started("chaos-w1")
        job = app.sync.enqueue(tool, payload, idempotency_key=f"tenure-chaos:{uuid.uuid4()}")
        report.job_id = job.id
        say(f"job {job.id} queued; waiting for W1 to send its request")
        wait_for(cut.is_set, limit, "W1 never sent a request to the receiver")
        report.w1_token = app.sync.admin.job(job.id)["token"]
        say(f"W1 (token {report.w1_token}) sent; its database link is cut")
        w2_url = receiver_proxy("w2-receiver", None)
        supervisor.spawn("chaos-w2", proxy=False, env={receiver_env: w2_url})
        wait_for(
            lambda: has_ended(app.sync.admin.job(job.id)["state"]),
            limit,
            f"job {job.id} did not end within {limit:g} s",
            interval=0.1,
        )
        row = app.sync.admin.job(job.id)
        report.final_state, report.final_token = row["state"], row["token"]
        report.final_owner = row["owner"]
        claims = [
            e
            for e in read_history(supervisor.history_dir)
            if e.get("ev") == "job_claimed" and e.get("job") == job.id
        ]
        w2_claims = [int(e["token"]) for e in claims if e.get("worker") == "chaos-w2"]
        report.w2_token = max(w2_claims) if w2_claims else None
        report.ended_with_w2 = (
            row["state"] == "succeeded"
            and report.w2_token is not None
            and row["token"] == report.w2_token
            and row["owner"] == "chaos-w2"
        )
        say(f"the job ended {row['state']} under token {row['token']}; W1's link heals")
        handle.proxy.set_mode("pass")
        first = exchange(proxies[0])
        second = exchange(proxies[1])
        report.w1_request = first.summary() if first else None
        report.w2_request = second.summary() if second else None
        if second is None:
            report.notes.append("W2 sent no request (did the tool use the receiver at all?)")
        elif second.status is not None and 200 <= second.status < 300:
            report.replayed = second.replayed and first is not None and first.status is not None
        if first is not None and first.raw_request:
            retry = resend(first.raw_request, url.hostname or "", port)
            report.stale_retry = retry.summary()
            report.stale_rejected = retry.status == 409

        # Healed, W1 learns that its lease is gone (or has its late commit refused).
        def w1_noticed() -> bool:
            return any(
                e.get("ev") in W1_NOTICES and e.get("job") == job.id
                for e in read_history(supervisor.history_dir)
                if e.get("worker") == "chaos-w1"
            )

        try:
            wait_for(w1_noticed, lease + 15.0, "W1 never noticed", interval=0.1)
        except TimeoutError:
            report.notes.append("W1 logged nothing about losing the job after the heal")
        outcomes = app.sync.admin.find_events(
            kinds=("succeeded", "failed", "retried", "released"), job_id=job.id, worker="chaos-w1"
        )
        report.w1_outcomes_after_cut = len(outcomes)
    finally:
        supervisor.close()
        for proxy in proxies:
            proxy.stop()
        app.close()
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    report.seconds = time.monotonic() - began
    return report


DESCRIPTION = (
    "Run the unpleasant test against your tool and receiver: a stale owner must be "
    "fenced, the repeat replayed, and the job end with the new owner's token."
)


def add_chaos_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``tenure chaos``, on ``parser`` (a subparser of ``tenure``'s, or a
    parser of its own). ``--dsn`` does not override a ``--dsn`` given before ``chaos``."""
    parser.description = DESCRIPTION
    parser.add_argument("app", help="MODULE:APP with the tool registered")
    parser.add_argument("tool", help="the tool to call (it must send a fenced request)")
    parser.add_argument("payload", nargs="?", default="{}", help="the call's payload (JSON)")
    parser.add_argument("--receiver", required=True, help="the receiver's base URL (http://...)")
    parser.add_argument(
        "--receiver-env",
        required=True,
        metavar="NAME",
        help="the environment variable your tool reads the receiver's URL from",
    )
    parser.add_argument(
        "--dsn",
        default=argparse.SUPPRESS,
        help="PostgreSQL DSN (default: $TENURE_DSN, else embedded); use a test database",
    )
    parser.add_argument("--timeout", type=float, help="seconds per step (default 3 leases + 60)")
    parser.add_argument("--keep", type=Path, help="keep worker logs and histories here")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def chaos_command(args: argparse.Namespace) -> int:
    """Run ``tenure chaos`` from parsed arguments; 0 if the receiver passed, else 1."""
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        print(f"tenure chaos: payload is not JSON: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not isinstance(payload, dict):
        print("tenure chaos: payload must be a JSON object", file=sys.stderr)
        return EXIT_USAGE
    report = run_chaos(
        args.app,
        args.tool,
        payload,
        args.receiver,
        receiver_env=args.receiver_env,
        dsn=getattr(args, "dsn", None),
        timeout=args.timeout,
        workdir=args.keep,
        cwd=Path.cwd(),
        say=(lambda _: None) if args.json else (lambda line: print(line, flush=True)),
    )
    if args.json:
        print(json.dumps({**asdict(report), "ok": report.ok}, default=str))
    else:
        print("\n".join(report.lines()))
    return EXIT_OK if report.ok else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """``tenure chaos MODULE:APP TOOL [PAYLOAD] --receiver URL --receiver-env NAME``."""
    parser = add_chaos_arguments(argparse.ArgumentParser(prog="tenure chaos"))
    return chaos_command(parser.parse_args(argv))
