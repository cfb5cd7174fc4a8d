"""The blocking face, ``app.sync``: the App's coroutines run to their end on its private
event loop thread. Generated from the async methods, so there is one code path, not two
hand-written copies (tests/unit/test_public_api.py checks every coroutine has its twin)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

from ._admin import Admin
from ._client import Client

if TYPE_CHECKING:
    from ._connection import Connection

T = TypeVar("T")
P = ParamSpec("P")


class _Blocking:
    """Runs the coroutines of ``of`` on the connection's private event loop thread."""

    _async: type

    def __init__(self, of: Any, connection: Connection) -> None:
        self._of = of
        self._connection = connection


def _blocking(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[_Blocking, P], T]:
    """The blocking twin of an async method: the same coroutine, run to its end."""

    @functools.wraps(method)
    def blocking(self: _Blocking, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._connection.run(method(self._of, *args, **kwargs))

    owner = method.__qualname__.split(".")[0]
    face = "App" if owner == "Client" else f"App.{owner.lower()}"
    blocking.__doc__ = f"Blocking form of `{face}.{method.__name__}` (same arguments).\n\n" + (
        method.__doc__ or ""
    )
    return blocking


class SyncAdmin(_Blocking):
    """``app.sync.admin``: `App.admin`'s methods, blocking."""

    _async = Admin

    jobs = _blocking(Admin.jobs)
    search = _blocking(Admin.search)
    events = _blocking(Admin.events)
    job = _blocking(Admin.job)
    waitpoints = _blocking(Admin.waitpoints)
    find_events = _blocking(Admin.find_events)
    workers = _blocking(Admin.workers)
    summary = _blocking(Admin.summary)
    database_time = _blocking(Admin.database_time)
    search_page = _blocking(Admin.search_page)
    held_leases = _blocking(Admin.held_leases)
    open_waitpoints = _blocking(Admin.open_waitpoints)
    notable_events = _blocking(Admin.notable_events)
    outcomes = _blocking(Admin.outcomes)
    pipeline_runs = _blocking(Admin.pipeline_runs)
    pipeline_run = _blocking(Admin.pipeline_run)
    steps = _blocking(Admin.steps)
    children = _blocking(Admin.children)
    queue_flow = _blocking(Admin.queue_flow)
    queue_arrivals = _blocking(Admin.queue_arrivals)
    queue_depth = _blocking(Admin.queue_depth)
    running_summary = _blocking(Admin.running_summary)
    retry = _blocking(Admin.retry)
    cancel_many = _blocking(Admin.cancel_many)
    retry_many = _blocking(Admin.retry_many)
    verify_schema = _blocking(Admin.verify_schema)
    doctor = _blocking(Admin.doctor)
    prune_journal = _blocking(Admin.prune_journal)
    migrate = _blocking(Admin.migrate)


class SyncApp(_Blocking):
    """``app.sync``: the App's client methods, blocking (``app.sync.enqueue(...)``), and
    its admin's as ``app.sync.admin``. The async iterators (`App.watch`, `App.as_completed`,
    `App.watch_run`) have no blocking form."""

    _async = Client

    def __init__(self, of: Client, admin: Admin, connection: Connection) -> None:
        super().__init__(of, connection)
        self.admin = SyncAdmin(admin, connection)

    enqueue = _blocking(Client.enqueue)
    enqueue_many = _blocking(Client.enqueue_many)
    get = _blocking(Client.get)
    # App.wait's overloads (the result typed by result_type) collapse to one signature.
    wait = _blocking(cast("Callable[..., Coroutine[Any, Any, Any]]", Client.wait))
    wait_many = _blocking(Client.wait_many)
    cancel = _blocking(Client.cancel)
    answer_waitpoint = _blocking(Client.answer_waitpoint)
    derived_key = _blocking(Client.derived_key)
    start_run = _blocking(Client.start_run)
    get_run = _blocking(Client.get_run)
    wait_run = _blocking(Client.wait_run)
    record_verdict = _blocking(Client.record_verdict)
    dispatch_plan = _blocking(Client.dispatch_plan)
