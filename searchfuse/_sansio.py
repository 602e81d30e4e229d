"""One sans-I/O kernel for the guard and the router: typed steps and their two drivers.

Each operation is written once, as a generator (a *flow*) that yields the
I/O it needs as a [`Step`][searchfuse._sansio.Step] and receives its outcome:
httpx's `Auth.auth_flow` idea. `run` performs the steps synchronously,
`arun` on an event loop, both by a table `{step type: handler}`, so the
sync and async twins of every operation cannot drift apart.

Two conventions, chosen per driver call:

- `throw=False` (the router): a handler reports an expected failure by
  returning it (an `httpx.HTTPError` is an outcome to classify); anything it
  raises ends the flow and propagates unchanged.
- `throw=True` (the guard): whatever a handler raises is thrown into the
  flow at its `yield`, so the flow reacts to the backend's error (a 429
  trips the fuse) and may raise it on. A `StopIteration` travels wrapped in
  [`Carried`][searchfuse._sansio.Carried] (a generator may not raise it,
  PEP 479) and comes out of the driver as it was raised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, TypeVar

__all__ = ["AsyncHandlers", "Carried", "Flow", "Handlers", "Step", "arun", "carried", "run"]

T = TypeVar("T")


class Step:
    """An I/O request a flow yields. Each kind of step is a subclass; a driver
    finds its handler by the step's type (one dict lookup, no if-chain)."""

    __slots__ = ()


Flow = Generator[Step, Any, T]
Handlers = Mapping[type[Step], Callable[[Any], Any]]
AsyncHandlers = Mapping[type[Step], Callable[[Any], Awaitable[Any]]]


class Carried(Exception):
    """An exception a flow must not see raised as it is (`StopIteration`)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


def carried(exc: BaseException) -> BaseException:
    """The exception a handler raised, unwrapped from [`Carried`][searchfuse._sansio.Carried]."""
    return exc.error if isinstance(exc, Carried) else exc


def _advance(flow: Flow[Any], value: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Resume `flow` with `value` (or `error` thrown in): `(False, next step)` or
    `(True, its return value)`."""
    try:
        if error is None:
            return False, flow.send(value)
        return False, flow.throw(error)
    except StopIteration as stop:
        return True, stop.value
    except Carried as wrapped:
        raise wrapped.error from None


def _thrown(exc: BaseException) -> BaseException:
    return Carried(exc) if isinstance(exc, StopIteration) else exc


def run(flow: Flow[T], handlers: Handlers, *, throw: bool = False) -> T:
    """Drive `flow` to its end synchronously and return what it returns."""
    # `_advance` written inline: this loop is on the guard's and the router's hot path.
    send = flow.send
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = send(value) if error is None else flow.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        except Carried as wrapped:
            raise wrapped.error from None
        handler = handlers[type(step)]
        if throw:
            value = error = None
            try:
                value = handler(step)
            except BaseException as exc:
                error = _thrown(exc)
            continue
        try:
            value = handler(step)
        except BaseException:
            flow.close()
            raise


async def arun(
    flow: Flow[T], handlers: AsyncHandlers, *, throw: bool = False, offload: bool = False
) -> T:
    """Drive `flow` to its end on the running event loop.

    `offload`: the flow's own work between steps may block (a store waiting
    for another process's lock), so each resumption runs in a worker thread
    and the event loop never waits on it.
    """
    value: Any = None
    error: BaseException | None = None
    while True:
        if offload:
            import asyncio  # only here: `import searchfuse` does not load asyncio

            done, step = await asyncio.to_thread(_advance, flow, value, error)
        else:
            done, step = _advance(flow, value, error)
        if done:
            return step  # type: ignore[no-any-return]
        handler = handlers[type(step)]
        value = error = None
        if not throw:
            try:
                value = await handler(step)
            except BaseException:
                flow.close()
                raise
            continue
        try:
            value = await handler(step)
        except BaseException as exc:
            error = _thrown(exc)
