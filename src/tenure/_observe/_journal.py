"""The journal's keyed payload hash, and the writer for events no statement journals itself.

Most journal rows are written by the statement that made the change (a claim
journals job_claimed in the same statement, a commit its outcome), which costs
no round trip. What a worker only *observes* — ownership_unknown,
tool_request_started, optionally heartbeat_ok — goes through `JournalWriter`:
a bounded buffer flushed in one batched INSERT by a task on the event loop, so
a tool's request or the heartbeat thread never waits for the journal. An event
buffered while the database was away is dated when it was observed: its delay is
measured when the batch is sent on a connection, however long it waited for one.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import threading
from collections import deque
from collections.abc import Iterable

from .._errors import ConfigError, StoreError
from .._log import Event, log_event
from .._maintenance._supervisor import Signal
from .._store import JournalRow, Store
from ._events import EVENTS, WRITER_KINDS

logger = logging.getLogger("tenure.journal")

JOURNAL_KEY_ENV = "TENURE_JOURNAL_KEY"
MIN_KEY_BYTES = 16
MAX_BATCH = 1000
CAPACITY = 10_000
RETRY_PAUSE = 0.5
WRITE_TIMEOUT = 5.0  # a batch sent into a silent network must not stall the writer forever


def journal_key(value: bytes | str | None) -> bytes | None:
    """The key for payload hashes: ``value``, else ``TENURE_JOURNAL_KEY``, else None.

    A short key would make the keyed hash as guessable as an unkeyed one, so it is refused.
    """
    if value is None:
        value = os.environ.get(JOURNAL_KEY_ENV) or None
    if value is None:
        return None
    key = value.encode() if isinstance(value, str) else bytes(value)
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(f"the journal key must be at least {MIN_KEY_BYTES} bytes long")
    return key


def payload_hmac(key: bytes, tool: str, payload_json: str) -> str:
    """HMAC-SHA256 of the tool name and the canonical payload, hex.

    Equal for the same call, different for different ones, and useless to anyone
    without the key — unlike a plain hash, which a dictionary of likely payloads
    (an e-mail address, a customer number) reverses in seconds.
    """
    message = (tool + "\n" + payload_json).encode("utf-8")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def to_row(event: Event) -> JournalRow:
    """The journal row of an event: code from code/reason, duration from the kind's field."""
    fields = dict(event.fields)
    code = fields.get("code", fields.get("reason"))
    spec = EVENTS.get(event.kind)
    seconds = fields.get(spec.duration) if spec is not None and spec.duration else None
    return JournalRow(
        kind=event.kind,
        job_id=event.job,
        token=event.token,
        attempt=event.attempt,
        worker=event.worker,
        tool=event.tool,
        code=None if code is None else str(code),
        duration_ms=round(seconds * 1000) if isinstance(seconds, int | float) else None,
        detail=fields,
        observed_at=event.monotonic,
    )


class JournalWriter:
    """An event handler that journals the kinds in ``kinds``, in batches, off the hot path.

    Attach it with ``tenure._log.attach`` and run it with `start()` on the event loop
    whose store it uses. ``worker`` restricts it to one worker's events (two workers in
    one process must not journal each other's). When the database is away the buffer
    keeps up to ``capacity`` events and drops (and counts) the rest.

    A supervisor's component (``journal_writer``): ``signal`` fires after each flush
    that wrote; a failed flush is a failed ``component_round``, once per streak.
    """

    name = "journal_writer"

    def __init__(
        self,
        store: Store,
        *,
        kinds: Iterable[str] = WRITER_KINDS,
        worker: str | None = None,
        capacity: int = CAPACITY,
    ) -> None:
        self._store = store
        self._kinds = frozenset(kinds)
        self._worker = worker
        self._capacity = capacity
        self._buffer: deque[Event] = deque()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.written = 0
        self._unreported = 0
        self._failing = False
        self._stopping = False
        self.signal = Signal()

    @property
    def kinds(self) -> frozenset[str]:
        """The event kinds this writer journals (what it asks `attach` for)."""
        return self._kinds

    def __call__(self, event: Event) -> None:
        if event.kind not in self._kinds:
            return
        if self._worker is not None and event.worker != self._worker:
            return
        with self._lock:
            if len(self._buffer) >= self._capacity:
                self.dropped += 1
                self._unreported += 1
                return
            self._buffer.append(event)
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:
                pass  # the loop is closed; stop() already flushed what it could

    def start(self) -> None:
        """Start flushing on the running event loop (idempotent)."""
        if self._task is None:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.create_task(self._run(), name="tenure-journal")
            if self._buffer:
                self._wake.set()

    async def stop(self, timeout: float = 2.0) -> None:
        """Stop after one last try, within ``timeout``, to write what is buffered."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._loop = None

    async def flush(self) -> int:
        """Write everything buffered now, in batches; returns how many rows were written."""
        written = 0
        while True:
            with self._lock:
                batch = [self._buffer[i] for i in range(min(len(self._buffer), MAX_BATCH))]
            if not batch:
                if written:
                    self.signal.fire()
                return written
            rows = [to_row(event) for event in batch]
            async with asyncio.timeout(WRITE_TIMEOUT):  # not wait_for: it may swallow a cancel
                await self._store.record_events(rows)
            with self._lock:
                for _ in batch:
                    self._buffer.popleft()
            written += len(batch)
            self.written += len(batch)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.flush()
            except (StoreError, TimeoutError) as exc:
                if not self._failing:
                    self._failing = True
                    log_event(
                        logger,
                        "component_round",
                        level=logging.WARNING,
                        component=self.name,
                        outcome="failed",
                        error=type(exc).__name__,
                        buffered=len(self._buffer),
                    )
                if self._stopping:
                    return
                await asyncio.sleep(RETRY_PAUSE)
                self._wake.set()
                continue
            self._failing = False
            self._report_drops()
            if self._stopping:
                return

    def _report_drops(self) -> None:
        with self._lock:
            dropped, self._unreported = self._unreported, 0
        if dropped:
            log_event(logger, "journal_dropped", level=logging.WARNING, events=dropped)
