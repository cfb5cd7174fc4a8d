"""The Context handed to a tool: who it is, under which token, and may it act now."""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn, Unpack

from .._errors import ConfigError, PayloadError, PolicyError, WaitTimeout
from .._job import Job
from .._states import Answerer, OnTimeout, OwnershipState
from .._waitpoint import Suspend, WaitKind, Waitpoint, derive_token
from .._waitpoint import request_json as waitpoint_request
from .._waitpoint import waitpoint as make_waitpoint
from ._ownership import Ownership
from ._steps import job_of_record, job_record

if TYPE_CHECKING:
    from ..fence import FencedAuth
    from ..fence._signing import SentRequest
    from ._steps import Checkpoints, Steps

STEP_NAME_MAX = 200
StepKind = str  # 'step' for yours; 'model', 'tool', 'start', 'wait' for framework engines
STEP_KINDS = ("step", "model", "tool", "start", "wait")  # tenure_steps.kind's CHECK
DAY = 24 * 3600.0
MAX_WAIT = 365 * DAY
WAIT_NAME_MAX = 90  # a waitpoint's name is at most 100 characters, with its round (~n)
MAX_CHILDREN = 1000
# The step running in this task or thread: its side effects take its key.
_current_step: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tenure_current_step", default=None
)


def _child_ids(children: tuple[Any, ...]) -> list[int]:
    if not 1 <= len(children) <= MAX_CHILDREN:
        raise PolicyError(f"wait_for takes 1 to {MAX_CHILDREN} child job ids")
    for child in children:
        if isinstance(child, bool) or not isinstance(child, int):
            raise PolicyError(f"wait_for takes job ids (from ctx.enqueue), got {child!r}")
    return list(dict.fromkeys(children))


@contextlib.contextmanager
def _step_scope(name: str) -> Iterator[None]:
    """Mark ``name`` as the step running in this task or thread while the block runs."""
    current = _current_step.set(name)
    try:
        yield
    finally:
        _current_step.reset(current)


def step_name(name: Any, index: Any) -> str:
    """The recorded name of a step: ``name``, or ``name#index`` for a repeated one."""
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= STEP_NAME_MAX
        or not name.isprintable()
        or ":" in name
        or "#" in name
    ):
        raise PolicyError(
            f"a step name is 1-{STEP_NAME_MAX} printable characters without ':' or '#', "
            f"got {name!r:.80}"
        )
    if index is None:
        return name
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 10**9:
        raise PolicyError(f"a step index is an int in [0, 10**9), got {index!r}")
    full = f"{name}#{index}"
    if len(full) > STEP_NAME_MAX:
        raise PolicyError(f"step name {full!r:.80} is longer than {STEP_NAME_MAX} characters")
    return full


class Context:
    """A tool's view of its own job.

    ``idempotency_key(op)`` is stable across attempts and workers — a repeated
    request after a timeout must carry the same key, never a fresh one.
    ``ensure_owned()`` is the check to make right before every irreversible
    step; `fence_headers()` and `http_auth()` carry the key and the fencing
    token to the receiver, which is the only place a stale owner can still be
    stopped once its request is on the wire.
    """

    def __init__(
        self,
        *,
        job_id: int,
        tool: str,
        token: int,
        attempt: int,
        max_attempts: int,
        worker: str,
        ownership: Ownership,
        safety_margin: float,
        signing_key: bytes | None = None,
        progress: Callable[[str], None] | None = None,
        waitpoint_secret: bytes | None = None,
        waitpoints: Mapping[str, Any] | None = None,
        steps: Steps | None = None,
        tenant: str = "",
    ) -> None:
        self.job_id = job_id
        self.tool = tool
        self.token = token
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.worker = worker
        self._ownership = ownership
        self._margin = safety_margin
        self._signing_key = signing_key
        self._cancel = False  # set by the worker's thread, read by the tool's: a plain flag
        self._progress = progress
        self._waitpoint_secret = waitpoint_secret
        self._waitpoints = waitpoints  # answered or timed out, by name (from the job's row)
        self.tenant = tenant
        self._steps = steps
        self._counters: dict[str, int] = {}  # default names of sleeps, starts and waits
        self._checkpoints: Checkpoints | None = None  # this attempt's, made by the first step
        self._named: set[str] = set()  # step names this attempt used (each once)
        self._names_lock = threading.Lock()  # steps may run in several threads at once

    def __repr__(self) -> str:
        return (
            f"Context(job_id={self.job_id}, tool={self.tool!r}, token={self.token}, "
            f"attempt={self.attempt}/{self.max_attempts})"
        )

    @property
    def fence_scope(self) -> str:
        return f"tool-job:{self.job_id}"

    def idempotency_key(self, operation: str | None = None) -> str:
        """The stable key of one side effect of this job: ``tool-job:{job}:{operation}``.

        Inside a step (`step`) ``operation`` defaults to the step's name, so a step's side
        effect has the key ``tool-job:{job}:{step}`` on every attempt and every worker."""
        operation = self._operation(operation)
        if not operation or not operation.isprintable() or ":" in operation or len(operation) > 200:
            raise ValueError(
                f"operation must be 1-200 printable characters without ':', got {operation!r}"
            )
        return f"{self.fence_scope}:{operation}"

    def _operation(self, operation: str | None) -> str:
        if operation is not None:
            return operation
        current = _current_step.get()
        if current is None:
            raise ValueError("name the operation: outside a step there is no default")
        return current

    @property
    def current_step(self) -> str | None:
        """The name of the step running here (in this task or thread), or None."""
        return _current_step.get()

    def fence_headers(
        self, operation: str | None = None, **request: Unpack[SentRequest]
    ) -> dict[str, str]:
        """Idempotency-Key, X-Execution-Fence, X-Fence-Scope (and a signature if keyed).

        With a signing key the signature covers the request too, so ``method``,
        ``path`` (the URL as sent) and ``body`` (the exact bytes) are required;
        ``http_auth(op)`` reads them from the request for you. Inside a step,
        ``operation`` defaults to the step's name.
        """
        from ..fence import fence_headers

        key = self.idempotency_key(operation)
        return fence_headers(self.fence_scope, self.token, key, self._signing_key, **request)

    def http_auth(self, operation: str | None = None) -> FencedAuth:
        """An httpx auth that adds the fence headers and checks ownership before sending
        (inside a step, ``operation`` defaults to the step's name)."""
        from ..fence import FencedAuth

        return FencedAuth(self, self._operation(operation))

    @property
    def lease_remaining(self) -> float:
        """Seconds of confirmed lease left on this worker's monotonic clock."""
        return self._ownership.remaining()

    @property
    def ownership(self) -> OwnershipState:
        """``owned``, ``unknown``, ``lost`` or ``cancelled``."""
        return self._ownership.status

    @property
    def cancelled(self) -> bool:
        """True once the tool should stop: lease lost, job cancelled, time limit or shutdown.

        Threaded tools poll this (async tools are cancelled with CancelledError).
        """
        return self._cancel or self._ownership.status in ("lost", "cancelled")

    def report_progress(
        self, done: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Say how far the call got: ``done`` of ``total`` (units are yours), and a short
        ``message`` (at most 1,000 characters).

        Callable from async and threaded tools alike; it never waits for the database.
        Reports are coalesced: the worker writes the latest one, fenced by this call's
        owner and token like a heartbeat, at most a few times a second for all of its
        calls, so calling this in a tight loop is fine. A stale owner's report is refused.
        Whoever waits sees it in ``job.progress`` and through ``app.watch(job_id)``. The
        message is your own text: it stays on the job's row and never enters the journal.
        """
        if self._progress is None:
            return
        self._progress(progress_json(done, total, message))

    def waitpoint(
        self,
        name: str,
        *,
        timeout: float = 24 * 3600.0,
        on_timeout: OnTimeout = "resume",
        answer: Any = None,
        answered_by: Answerer = "holder",
    ) -> Waitpoint:
        """This call's waitpoint ``name``: pending (hand ``wp.token`` out, then
        `suspend`), or, when the call was resumed, ``answered`` (``wp.answer``) or
        ``timed_out``. The token is the same on every attempt. ``timeout`` (seconds,
        1 s to a year) is how long it may stay open (an answer after it is refused);
        then the job is resumed with ``wp.timed_out`` (``on_timeout="resume"``) or
        fails (``"fail"``). After a retry (`App.admin.retry`), a waitpoint that closed
        without an answer is pending again, and suspending opens it again.

        ``answer`` declares the answer's type (a TypedDict, a pydantic model, a
        dataclass, ``bool``, a ``Literal``...): ``wp.answer`` is then that type, and an
        answer that does not fit it raises PayloadError here. ``answered_by`` says who may
        answer: ``"holder"`` (the default), only whoever holds ``wp.token``, a person or a
        service; ``"caller"``, the job's caller too, without the token (over MCP its
        client is asked, by elicitation, with a form built from ``answer``, which must
        then be a flat object of strings, numbers, booleans and enums, or one of those;
        default ``str``). Never declare ``"caller"`` for a decision the calling agent
        must not take itself: an approval, a sign-off."""
        if self._waitpoint_secret is None:
            raise ConfigError("this context has no waitpoint secret (not run by a worker)")
        return make_waitpoint(
            self._waitpoint_secret,
            self.job_id,
            self._waitpoints,
            name,
            timeout,
            on_timeout,
            answer,
            answered_by,
        )

    def suspend(self, waitpoint: Waitpoint, *, request: Any = None) -> NoReturn:
        """End this attempt waiting at ``waitpoint``: no lease, no heartbeat, no worker
        slot while it waits; the attempt is not counted. The job is called again when
        the waitpoint is answered or times out. ``request`` (JSON) says what is asked,
        for whoever answers (shown on the job; never journaled). Raises; nothing after
        it runs."""
        if not waitpoint.pending:
            raise PolicyError(
                f"waitpoint {waitpoint.name!r} was already {waitpoint.state}; "
                "wait again under a new name"
            )
        raise Suspend(waitpoint, waitpoint_request(request))

    # -- fenced steps ------------------------------------------------------------------

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        index: int | None = None,
        kind: StepKind = "step",
        detail: Callable[[Any], dict[str, Any] | None] | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once for this job and return its JSON result.

        The first time, ``fn`` runs (awaited if it returns an awaitable) and its result
        is recorded as the step ``name``, fenced like a commit: only while this attempt
        still owns the job (owner, token, live lease). A later attempt (a retry, another
        worker after a crash or a takeover, the call resumed after a suspension) gets
        the recorded result back without running ``fn``. What is returned is always the
        JSON form (a tuple comes back a list), the same on the first run and on a replay.

        Names are unique within the job: a repeated ``name`` raises PolicyError unless
        each use gives its own ``index`` (recorded as ``name#index``). Inside ``fn``,
        `idempotency_key()` and `http_auth()` default to the step's own key,
        ``tool-job:{job}:{name}``, the same on every attempt. Raises PayloadError when
        the result is not JSON or larger than 4 MiB, LeaseLost when the database
        refused the checkpoint (a newer owner holds the job; nothing was recorded), and
        whatever ``ensure_owned`` raises before ``fn`` starts.

        ``kind`` and ``detail`` are for framework engines: the kind of work (``step``,
        ``model``, ``tool``) and a small content-free JSON object for watchers, or a
        function of the result giving one (a model's token usage). They are recorded
        with the step and shown on the run page, never the result. Pass a keyword of
        ``fn``'s named ``index``, ``kind`` or ``detail`` through `functools.partial`.
        """
        full, checkpoints = self._begin_step(name, index, kind)
        found, value = await checkpoints.lookup(full)
        if found:
            return value
        self.ensure_owned()
        started = time.monotonic()
        with _step_scope(full):
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        return await checkpoints.record(full, value, time.monotonic() - started, kind, detail)

    def step_sync(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        index: int | None = None,
        kind: StepKind = "step",
        detail: Callable[[Any], dict[str, Any] | None] | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """`step` for a threaded (plain ``def``) tool: ``fn`` runs in the tool's own thread;
        the checkpoint is read and written by the worker's event loop meanwhile."""
        full, checkpoints = self._begin_step(name, index, kind)
        run = checkpoints.steps.run
        found, value = run(checkpoints.lookup(full))
        if not found:
            self.ensure_owned()
            started = time.monotonic()
            with _step_scope(full):
                value = fn(*args, **kwargs)
            value = run(checkpoints.record(full, value, time.monotonic() - started, kind, detail))
        return value

    # -- durable waits and child jobs ----------------------------------------------------

    async def sleep(self, seconds: float, *, name: str | None = None) -> None:
        """Wait ``seconds`` without holding anything: the attempt ends here (state
        ``waiting``: no lease, no heartbeat, no worker slot) and the job is called again
        from the top once the time has passed, by any worker; on that call (its earlier
        steps replayed) this returns at once. Resolution is the rescuer's interval (about
        a second). ``name`` (default ``sleep#n``, the n-th sleep of the call) is how the
        call recognises this sleep when it is called again."""
        self._sleep(seconds, name)

    def sleep_sync(self, seconds: float, *, name: str | None = None) -> None:
        """`sleep` for a threaded tool."""
        self._sleep(seconds, name)

    def _sleep(self, seconds: float, name: str | None) -> None:
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or not 0 <= seconds <= MAX_WAIT
        ):
            raise PolicyError(f"sleep takes seconds in [0, {MAX_WAIT:g}], got {seconds!r}")
        full = self._wait_name(name, "sleep")
        if seconds == 0 or (self._waitpoints or {}).get(full) is not None:
            return  # nothing to wait for, or waited already
        raise Suspend(self._internal_waitpoint(full, float(seconds), "sleep", ()), None)

    async def enqueue(
        self,
        tool: str,
        payload: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        priority: int | None = None,
        delay: float = 0.0,
    ) -> int:
        """Start a child job: ``tool`` called with ``payload`` in this job's tenant, keyed
        ``tool-job:{job}:{name}``; its id. A step (``name``, default ``start#n``): queued
        and recorded in one transaction under this job's token, so a call run again gets
        the same child back, never a second one. Wait for it with `wait_for`."""
        full, checkpoints = self._begin_step(*self._default_name(name, "start"), "start")
        found, value = await checkpoints.lookup(full)
        if found:
            return int(value)
        steps = checkpoints.steps
        if steps.new_job is None:
            raise ConfigError("this context cannot start jobs (not run by a worker)")
        key = self.idempotency_key(full)
        child = steps.new_job(
            tool, dict(payload or {}), key, priority, delay, None, self.tenant or None
        )
        self.ensure_owned()
        return await checkpoints.start(full, replace(child, parent_id=self.job_id))

    def enqueue_sync(
        self,
        tool: str,
        payload: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        priority: int | None = None,
        delay: float = 0.0,
    ) -> int:
        """`enqueue` for a threaded tool."""
        run = self._open_checkpoints().steps.run
        return run(self.enqueue(tool, payload, name=name, priority=priority, delay=delay))

    async def wait_for(
        self, *children: int, name: str | None = None, timeout: float = DAY
    ) -> list[Job]:
        """Wait for child jobs (ids from `enqueue`) to end, holding nothing meanwhile; their
        final rows, in the order given (look at each one's state, result and error).

        If one is still going, the attempt ends here (state ``waiting``: no lease, no
        heartbeat, no worker slot); the last child's end queues this job again, in the
        same transaction as that child's commit, and the call, run again from the top,
        gets here with its earlier steps replayed. The rows are recorded as a step
        (``name``, default ``wait#n``), so later calls read them from the checkpoint
        even once the children were pruned. WaitTimeout if they did not all end within
        ``timeout`` seconds of the wait."""
        ids = _child_ids(children)
        full, checkpoints = self._begin_step(*self._default_name(name, "wait"), "wait")
        if len(full) > WAIT_NAME_MAX:
            raise PolicyError(f"a wait's name is at most {WAIT_NAME_MAX} characters")
        found, value = await checkpoints.lookup(full)
        if found:
            return [job_of_record(record) for record in value]
        rows = await checkpoints.children(ids)
        missing = [i for i in ids if i not in rows]
        if missing:
            raise PolicyError(f"jobs {missing} are not children of job {self.job_id}")
        pending = tuple(i for i in ids if not rows[i].done)
        if not pending:
            records = [job_record(rows[i]) for i in ids]
            await checkpoints.record(full, records, 0.0, "wait", {"children": len(ids)})
            return [rows[i] for i in ids]
        seen = self._waitpoints or {}
        round_ = next(n for n in range(1, 10**6) if f"{full}~{n}" not in seen)
        if (seen.get(f"{full}~{round_ - 1}") or {}).get("timed_out"):
            raise WaitTimeout(f"children {list(pending)} did not end within {timeout:g} s")
        wait = self._internal_waitpoint(f"{full}~{round_}", timeout, "children", pending)
        raise Suspend(wait, None)

    def wait_for_sync(
        self, *children: int, name: str | None = None, timeout: float = DAY
    ) -> list[Job]:
        """`wait_for` for a threaded tool."""
        run = self._open_checkpoints().steps.run
        return run(self.wait_for(*children, name=name, timeout=timeout))

    def _default_name(self, name: str | None, base: str) -> tuple[str, int | None]:
        """``(name, None)`` as given, else ``(base, n)``: the n-th default of this call."""
        if name is not None:
            return name, None
        with self._names_lock:
            n = self._counters.get(base, 0)
            self._counters[base] = n + 1
        return base, n

    def _wait_name(self, name: str | None, base: str) -> str:
        """A sleep's name, claimed among this call's step names (a sleep records no step)."""
        full = step_name(*self._default_name(name, base))
        if len(full) > WAIT_NAME_MAX:
            raise PolicyError(f"a wait's name is at most {WAIT_NAME_MAX} characters")
        with self._names_lock:
            if full in self._named:
                raise PolicyError(f"{full!r} was already used in this job: names are unique")
            self._named.add(full)
        return full

    def _internal_waitpoint(
        self, name: str, seconds: float, kind: WaitKind, children: tuple[int, ...]
    ) -> Waitpoint:
        if self._waitpoint_secret is None:
            raise ConfigError("this context has no waitpoint secret (not run by a worker)")
        # The row needs a token (its hash is the waitpoints' lookup key), derived like any
        # waitpoint's; it answers nothing: complete_waitpoint ends only kind 'answer', and
        # this one is answered by nobody (its deadline, or its children, end it).
        token = derive_token(self._waitpoint_secret, self.job_id, name)
        return Waitpoint(
            name, token, seconds, "resume", answered_by="nobody", kind=kind, children=children
        )

    def _begin_step(self, name: str, index: int | None, kind: StepKind) -> tuple[str, Checkpoints]:
        """The step's recorded name, claimed for this attempt, and the attempt's steps."""
        if kind not in STEP_KINDS:
            raise PolicyError(f"a step's kind is one of {', '.join(STEP_KINDS)}, got {kind!r}")
        full = step_name(name, index)
        with self._names_lock:
            if full in self._named:
                raise PolicyError(
                    f"step {full!r} was already used in this job: step names are unique "
                    "(give each repetition its own index=...)"
                )
            self._named.add(full)
        return full, self._open_checkpoints()

    def _open_checkpoints(self) -> Checkpoints:
        with self._names_lock:
            if self._checkpoints is None:
                if self._steps is None:
                    raise ConfigError("this context has no steps (not run by a worker)")
                self._checkpoints = self._steps.checkpoints(
                    self.job_id, self.token, self._ownership
                )
            return self._checkpoints

    def ensure_owned(self, margin: float | None = None) -> None:
        """Raise LeaseLost, OwnershipUnknown or JobCancelled unless an irreversible step
        may start now: the lease is confirmed and at least ``margin`` seconds of it remain
        (default: the tool's safety margin)."""
        self._ownership.ensure(self._margin if margin is None else margin)

    def _request_stop(self) -> None:
        self._cancel = True


MAX_PROGRESS_MESSAGE = 1000


def progress_json(done: float, total: float | None, message: str | None) -> str:
    """The JSON of one progress report; PayloadError for values that are not one."""
    for name, value in (("done", done), ("total", total)):
        if value is None and name == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
            raise PayloadError(f"progress {name} must be a finite number, got {_shown(value)}")
        if value < 0:
            raise PayloadError(f"progress {name} must not be negative, got {_shown(value)}")
    if message is not None:
        if not isinstance(message, str):
            raise PayloadError(f"progress message must be text, got {type(message).__name__}")
        if len(message) > MAX_PROGRESS_MESSAGE:
            raise PayloadError(
                f"progress message is {len(message)} characters; the limit is "
                f"{MAX_PROGRESS_MESSAGE}"
            )
        message = message.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    return json.dumps({"done": done, "total": total, "message": message}, allow_nan=False)


def _finite(value: float) -> bool:
    """Whether ``value`` is a number a float can hold: an int past the float range
    (10**400) is refused like infinity, instead of raising OverflowError."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _shown(value: object) -> str:
    """A bad value for an error message: a huge int by its size (its repr would be
    thousands of digits, or raise ValueError past Python's conversion limit)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
