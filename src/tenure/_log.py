"""The telemetry contract's one entry point: every event goes through `log_event`.

An event is an `Event` value — kind, job id, token, attempt, tool, worker and a
few scalar fields (codes, durations, counts). `log_event` hands it to every
attached handler (metrics, the journal writer, tests: see `attach`) and writes
it as one log line: ``event=job_claimed job=42 token=1043 ...``, or one JSON
object per line with ``TENURE_LOG_FORMAT=json``. The ``tenure`` command logs
through `LineFormatter` (see `configure_logging`), which stamps every line
``ts=2026-12-01T15:37:09.123Z`` (UTC, milliseconds) in either format.

Events carry ids, tokens, codes and durations only — never payloads, results
or error messages, which may hold personal data. The catalogue of kinds, and
who emits and journals each, is ``tenure.telemetry.EVENTS``; users attach handlers
through ``tenure.telemetry.attach``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._text import has_controls, json_text

Scalar = str | int | float | bool


class _JobLike(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def token(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def tool(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened to a job (or a worker), as every consumer sees it.

    ``monotonic`` is when it was emitted on this process's monotonic clock, so a
    consumer that writes it later (the journal writer) can tell how late it is.
    """

    kind: str
    job: int | None = None
    token: int | None = None
    attempt: int | None = None
    tool: str | None = None
    worker: str | None = None
    fields: Mapping[str, Scalar] = field(default_factory=dict)
    level: int = logging.INFO
    monotonic: float = 0.0

    def record(self) -> dict[str, Scalar]:
        """The event as one flat mapping, in log-line order."""
        head: dict[str, Scalar | None] = {
            "event": self.kind,
            "job": self.job,
            "token": self.token,
            "attempt": self.attempt,
            "tool": self.tool,
            "worker": self.worker,
        }
        record = {k: v for k, v in head.items() if v is not None}
        record.update(self.fields)
        return record


Handler = Callable[[Event], None]


def _json_from_environment() -> bool:
    return os.environ.get("TENURE_LOG_FORMAT") == "json"


# Whether event lines are JSON objects, as `configure_logging` was told; None until then,
# when TENURE_LOG_FORMAT says (a program embedding tenure configures its own logging).
_as_json: bool | None = None

# The attribute of a LogRecord that carries an event's fields (see `emit`), so a
# formatter can lay the line out itself instead of parsing the message.
EVENT_FIELDS = "tenure_event"

# (handler, the kinds it wants or None for all); replaced, never mutated, so emitters
# read them without a lock.
_handlers: tuple[tuple[Handler, frozenset[str] | None], ...] = ()
_wanted: frozenset[str] | None = frozenset()  # kinds some handler wants; None: every kind
_handlers_lock = threading.Lock()
_handler_errors = logging.getLogger("tenure.telemetry")


def _publish(handlers: tuple[tuple[Handler, frozenset[str] | None], ...]) -> None:
    global _handlers, _wanted
    wanted: set[str] | None = set()
    for _, kinds in handlers:
        if kinds is None or wanted is None:
            wanted = None
        else:
            wanted |= kinds
    _wanted = None if wanted is None else frozenset(wanted)
    _handlers = handlers


def attach(handler: Handler, kinds: Iterable[str] | None = None) -> Callable[[], None]:
    """Send events from now on to ``handler`` (only those of ``kinds``, if given); returns
    the function that detaches it.

    Handlers run on the emitting thread (the event loop, the heartbeat thread, a
    tool's thread), so they must be quick and thread-safe; one that raises is
    logged and skipped, never allowed to break the code that emitted the event.
    Naming ``kinds`` is what lets a busy worker skip building the events nobody
    wants: a job's routine claim and finish are DEBUG lines, and without a
    handler that asks for them they cost one set lookup each.
    """
    entry = (handler, None if kinds is None else frozenset(kinds))
    with _handlers_lock:
        _publish((*_handlers, entry))

    def detach() -> None:
        with _handlers_lock:
            remaining = list(_handlers)
            if entry in remaining:
                remaining.remove(entry)
            _publish(tuple(remaining))

    return detach


def enabled(logger: logging.Logger, kind: str, level: int = logging.INFO) -> bool:
    """Whether an event of ``kind`` at ``level`` would reach a handler or the log; callers
    on a hot path check it before computing the event's fields."""
    wanted = _wanted
    return wanted is None or kind in wanted or logger.isEnabledFor(level)


def _render(value: Any) -> str:
    text = str(value)
    if not text or has_controls(text) or any(c.isspace() or c in '"=' for c in text):
        return json_text(text)
    return text


def format_line(record: Mapping[str, Scalar], *, as_json: bool = False) -> str:
    """``key=value`` pairs (values with spaces, quotes or controls JSON-quoted), or one JSON
    object; either way one line, with every control escaped (``\\u001b``): a value a
    caller or a tool chose (a key, a worker name, an exception's message) can neither
    forge a line nor reach the terminal that tails the log."""
    if as_json:
        return json_text(record, default=str)
    return " ".join(f"{k}={_render(v)}" for k, v in record.items())


def log_event(
    logger: logging.Logger,
    kind: str,
    *,
    job: _JobLike | int | None = None,
    level: int = logging.INFO,
    token: int | None = None,
    attempt: int | None = None,
    tool: str | None = None,
    worker: str | None = None,
    **fields: Scalar | None,
) -> None:
    """Emit one event: to every attached handler, then as a log line.

    ``job`` is a job-like object (its id, token, attempt and tool are used) or a
    bare id; explicit ``token``/``attempt``/``tool`` win over the object's.
    Fields that are None are left out.
    """
    if not enabled(logger, kind, level):
        return
    if job is not None and not isinstance(job, int):
        token = job.token if token is None else token
        attempt = job.attempt if attempt is None else attempt
        tool = job.tool if tool is None else tool
        job = job.id
    event = Event(
        kind,
        job,
        token,
        attempt,
        tool,
        worker,
        {k: v for k, v in fields.items() if v is not None},
        level,
        time.monotonic(),
    )
    emit(logger, event)


def emit(logger: logging.Logger, event: Event) -> None:
    """Hand a ready-made event to every attached handler, then log it."""
    for handler, kinds in _handlers:
        if kinds is not None and event.kind not in kinds:
            continue
        try:
            handler(event)
        except Exception:
            _handler_errors.exception("telemetry handler %r failed on %s", handler, event.kind)
    if logger.isEnabledFor(event.level):
        record = event.record()
        as_json = _as_json if _as_json is not None else _json_from_environment()
        logger.log(event.level, format_line(record, as_json=as_json), extra={EVENT_FIELDS: record})


# -- log lines of the tenure command -------------------------------------------------------


def utc_stamp(created: float) -> str:
    """``2026-12-01T15:37:09.123Z``: ISO 8601 in UTC with milliseconds, whatever the host's
    time zone, so lines of workers on several machines sort and compare as they are."""
    millis = int((created % 1) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{millis:03d}Z"


class LineFormatter(logging.Formatter):
    """One line per record, ``ts`` first: an event's own fields (from `emit`), or the level,
    logger and message of any other record, as ``key=value`` pairs or one JSON object.

    A traceback stays on its record's line (``exc="Traceback ..."``, escaped), so a log
    shipper never splits it into lines without a time or a logger.
    """

    def __init__(self, *, as_json: bool = False) -> None:
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Scalar] = {"ts": utc_stamp(record.created)}
        fields: Mapping[str, Scalar] | None = getattr(record, EVENT_FIELDS, None)
        if fields is not None:
            line.update(fields)
        else:
            line["level"] = record.levelname.lower()
            line["logger"] = record.name
            line["msg"] = record.getMessage()
            if record.exc_info:
                line["exc"] = self.formatException(record.exc_info)
            if record.stack_info:
                line["stack"] = self.formatStack(record.stack_info)
        return format_line(line, as_json=self.as_json)


def configure_logging(
    level: str, *, others: str = "WARNING", as_json: bool = False, own: Iterable[str] = ()
) -> bool:
    """Log to stderr through `LineFormatter`: tenure's loggers (and those named in ``own``,
    the app's package) at ``level``, every other library's at ``others``.

    Other libraries log at INFO what a worker's log must not hold: httpx's ``HTTP
    Request: POST http://cases.internal/customers/4711`` carries whole URLs, and paths
    hold customer ids. Like `logging.basicConfig`, this does nothing when the root
    logger already has handlers (the program embedding tenure configured logging);
    returns whether it configured.
    """
    global _as_json
    root = logging.getLogger()
    if root.handlers:
        return False
    _as_json = as_json
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LineFormatter(as_json=as_json))
    root.addHandler(handler)
    root.setLevel(others)
    logging.captureWarnings(True)  # warnings become stamped lines too (py.warnings, at others)
    for name in ("tenure", *own):
        logging.getLogger(name).setLevel(level)
    return True
