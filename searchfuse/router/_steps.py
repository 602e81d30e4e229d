"""The I/O a router flow asks for, and the two drivers that perform it.

A flow (see `_call.py`) yields one of these steps and receives its outcome:
an answer (`Reply`) or the `httpx.HTTPError` that took its place, what the
caller's function returned (`Returned`) or raised, what the fallback served.
The drivers run on `searchfuse._sansio`, the kernel the guard runs on too.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from searchfuse import _clock, _sansio
from searchfuse.providers._base import Request
from searchfuse.router import _deadline
from searchfuse.router._options import USAGE_SHARE
from searchfuse.router.config import KeyEntry

if TYPE_CHECKING:
    from searchfuse.router._core import Core

__all__ = ["CallFn", "Fallback", "Probe", "Returned", "Send", "Sleep", "adrive", "drive"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Probe(_sansio.Step):
    """The provider's free probe of `entry` (Tavily: `GET /usage`)."""

    entry: KeyEntry


@dataclass(frozen=True, slots=True)
class Send(_sansio.Step):
    """One request with `entry`'s key."""

    entry: KeyEntry
    request: Request
    timeout: float | None = None
    #: When its pacing slot was granted (router clock), to note how late it leaves.
    granted_at: float | None = None


@dataclass(frozen=True, slots=True)
class CallFn(_sansio.Step):
    """The caller's function, run with `entry`'s key (`Router.call`)."""

    entry: KeyEntry


@dataclass(frozen=True, slots=True)
class Sleep(_sansio.Step):
    """Wait through the router's `sleep` (the testing clock in tests)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Fallback(_sansio.Step):
    """The router's fallback search function, for this body."""

    body: Mapping[str, Any]
    fn: Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Returned:
    """What the caller's function returned in a `call` flow."""

    value: Any


def _probe_deadline(core: Core, deadline: float | None) -> float | None:
    """A probe may use a share of the time left: the search must still fit."""
    if deadline is None:
        deadline = _deadline.deadline_after(core.options.deadline)
    return _deadline.share(deadline, USAGE_SHARE)


def _fallback_args(body: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    params = {k: v for k, v in body.items() if k not in ("query", "include_usage")}
    return str(body["query"]), params


def drive(
    core: Core,
    flow: _sansio.Flow[T],
    fn: Callable[[str], Any] | None = None,
    deadline: float | None = None,
) -> T:
    """Run a router flow synchronously."""

    def probe(step: Probe) -> Any:
        link = core.link(step.entry.provider)
        request = link.provider.probe()
        assert request is not None
        try:
            return link.http.send(step.entry.key, request, _probe_deadline(core, deadline))
        except httpx.HTTPError as exc:
            return exc

    def send(step: Send) -> Any:
        link = core.link(step.entry.provider)
        http = link.http
        if step.granted_at is not None:
            link.ledger.lateness.note(core.options.now() - step.granted_at)
        try:
            return http.send(step.entry.key, step.request, deadline, timeout=step.timeout)
        except httpx.HTTPError as exc:
            return exc

    def call(step: CallFn) -> Any:
        assert fn is not None
        try:
            return Returned(fn(step.entry.key))
        except Exception as exc:
            return exc

    def fallback(step: Fallback) -> Any:
        query, params = _fallback_args(step.body)
        result = step.fn(query, **params)
        if inspect.isawaitable(result):
            raise TypeError("an async fallback needs asearch(), not search()")
        return result

    def sleep(step: Sleep) -> None:
        (core.options.sleep or _clock.sleep)(step.seconds)

    handlers: _sansio.Handlers = {
        Probe: probe,
        Send: send,
        CallFn: call,
        Fallback: fallback,
        Sleep: sleep,
    }
    return _sansio.run(flow, handlers)


async def adrive(
    core: Core,
    flow: _sansio.Flow[T],
    fn: Callable[[str], Awaitable[Any]] | None = None,
    deadline: float | None = None,
) -> T:
    """Run a router flow on the running event loop.

    The flow does its store work between steps. A store that may wait for a
    lock (SQLite, a file, Redis) is driven from a worker thread, so the event
    loop never blocks on another process's transaction.
    """

    async def probe(step: Probe) -> Any:
        link = core.link(step.entry.provider)
        request = link.provider.probe()
        assert request is not None
        try:
            return await link.http.asend(step.entry.key, request, _probe_deadline(core, deadline))
        except httpx.HTTPError as exc:
            return exc

    async def send(step: Send) -> Any:
        link = core.link(step.entry.provider)
        http = link.http
        if step.granted_at is not None:
            link.ledger.lateness.note(core.options.now() - step.granted_at)
        try:
            return await http.asend(step.entry.key, step.request, deadline, timeout=step.timeout)
        except httpx.HTTPError as exc:
            return exc

    async def call(step: CallFn) -> Any:
        assert fn is not None
        try:
            return Returned(await fn(step.entry.key))
        except Exception as exc:
            return exc

    async def fallback(step: Fallback) -> Any:
        query, params = _fallback_args(step.body)
        result = step.fn(query, **params)
        return await result if inspect.isawaitable(result) else result

    async def sleep(step: Sleep) -> None:
        if core.options.sleep is not None:
            core.options.sleep(step.seconds)
        else:
            await _clock.asleep(step.seconds)

    handlers: _sansio.AsyncHandlers = {
        Probe: probe,
        Send: send,
        CallFn: call,
        Fallback: fallback,
        Sleep: sleep,
    }
    return await _sansio.arun(flow, handlers, offload=core.ledger.blocking)
