"""One supervisor per process: every background loop is a `Component` in one list.

A component has a ``name``, a ``start()`` (plain, when it only schedules a task or a
thread; awaitable, when it must wait until it is ready, as /metrics waits for its port)
and an idempotent ``async stop()``. The supervisor starts them in the order listed and
stops them in reverse, so a component may rely on everything listed before it (the
journal writer outlives the heartbeat thread whose events it writes).

Each component may also carry a ``signal``: the supervisor hands it the process's
`Signal` of that name (River's test signals), fired once per round for a component with
rounds (the maintenance services, `tenure._maintenance._service.Service`), once per
written batch for the journal writer and the completer. Tests await a signal instead of
polling on time: ``await worker.signals["rescuer"].wait()`` returns after the rescuer's
next round (``signals["rescuer"].next(3)``: a future, counting from the call).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, Self, runtime_checkable


class Signal:
    """A count of things done (rounds, batches) that a test can await, on one event loop.

    ``fire`` costs one increment when nobody waits; `wait` returns once ``n`` more have
    fired after it was called.
    """

    __slots__ = ("_waiters", "count")

    def __init__(self) -> None:
        self.count = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def fire(self) -> None:
        self.count += 1
        if self._waiters:
            due = [w for w in self._waiters if w[0] <= self.count]
            self._waiters = [w for w in self._waiters if w[0] > self.count]
            for _, future in due:
                if not future.done():
                    future.set_result(None)

    def next(self, n: int = 1) -> asyncio.Future[None]:
        """A future done once ``n`` more have fired, counted from this call (so a test may
        ask before it starts what fires it)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((self.count + n, future))
        return future

    async def wait(self, n: int = 1) -> None:
        """Until ``n`` more have fired (bound it with ``asyncio.timeout``)."""
        await self.next(n)


class Signals:
    """The process's signals by component name, created on first use (so a test may ask
    for one before the worker has started)."""

    def __init__(self) -> None:
        self._by_name: dict[str, Signal] = {}

    def __getitem__(self, name: str) -> Signal:
        signal = self._by_name.get(name)
        if signal is None:
            signal = self._by_name[name] = Signal()
        return signal


@runtime_checkable
class Component(Protocol):
    """A background loop of a process, composed by the `Supervisor`."""

    name: str

    def start(self) -> Awaitable[None] | None:
        """Start (idempotent); awaitable when it waits until the component is ready."""
        ...

    async def stop(self) -> None:
        """Stop (idempotent): cancel the loop, or finish what it holds within a bound."""
        ...


class Task:
    """A component of one coroutine run as a task: a loop with no state worth a class
    (the worker's event-loop pulse)."""

    def __init__(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self._run = run
        self._task: asyncio.Future[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class Thread:
    """A component around a context manager that runs a thread (the heartbeat thread):
    entered at start, exited at stop."""

    def __init__(self, name: str, manager: AbstractContextManager[Any]) -> None:
        self.name = name
        self._manager = manager
        self._entered = False

    def start(self) -> None:
        if not self._entered:
            self._manager.__enter__()
            self._entered = True

    async def stop(self) -> None:
        if self._entered:
            self._entered = False
            self._manager.__exit__(None, None, None)


class Supervisor:
    """Starts ``components`` in order and stops them in reverse; ``async with`` does both.

    A component that fails to start stops those already started, and the error goes
    on to the caller: a process runs with all its loops or not at all.
    """

    def __init__(self, components: Sequence[Component], signals: Signals | None = None) -> None:
        names = [c.name for c in components]
        if len(set(names)) != len(names):
            raise ValueError(f"two components share a name: {names}")
        self.components = tuple(components)
        self.signals = signals if signals is not None else Signals()
        for component in components:
            if hasattr(component, "signal"):
                component.signal = self.signals[component.name]
        self._started: list[Component] = []

    def __iter__(self) -> Iterator[Component]:
        return iter(self.components)

    def __getitem__(self, name: str) -> Component:
        for component in self.components:
            if component.name == name:
                return component
        raise KeyError(name)

    async def start(self) -> None:
        try:
            for component in self.components:
                started = component.start()
                self._started.append(component)
                if inspect.isawaitable(started):
                    await started
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop every started component, in reverse, even past one whose stop raised."""
        error: BaseException | None = None
        while self._started:
            try:
                await self._started.pop().stop()
            except Exception as exc:  # the others still stop; the first error goes on
                error = error or exc
        if error is not None:
            raise error

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
