"""``guard()``: put the agent-facing rules in front of any web-search tool.

The wrapper is a :class:`wrapt.FunctionWrapper`, so the guarded tool keeps
its signature, name, docstring, ``__wrapped__`` and coroutine-ness, and works
on functions, methods, classmethods and static methods alike. Coroutine
functions get their own small code path (:meth:`_Guard.arun`); the rules and
their order are the same on both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import math
import threading
from collections.abc import Callable, Hashable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar, cast, overload

import wrapt

from searchfuse import _clock
from searchfuse.errors import RateLimited, SearchRefused
from searchfuse.guard.cache import CACHE_LOCK, CacheKey, cache_size, make_cache, search_key
from searchfuse.guard.calls import Binder, Call
from searchfuse.guard.checklist import Lookup, aconsult, consult
from searchfuse.guard.delegation import RouterLike, router_arguments
from searchfuse.guard.fuse import DEFAULT_COOLDOWN, Fuse, cooldown_after, is_rate_limit
from searchfuse.guard.turns import TurnBudget, current_turn_id

__all__ = ["GuardState", "GuardedFunction", "OnRefusal", "guard", "guard_state"]

logger = logging.getLogger("searchfuse.guard")

F = TypeVar("F", bound=Callable[..., Any])

#: What a guarded tool does with a refusal: raise it, return its message, or
#: return what the callable makes of it.
OnRefusal: TypeAlias = Literal["raise", "return"] | Callable[[SearchRefused], Any]

#: Seconds within which calls outside any explicit turn count as one burst.
DEFAULT_MIN_INTERVAL = 2.0

_MISS: Any = object()


@dataclass(frozen=True, slots=True)
class GuardState:
    """A snapshot of one guarded tool, for status lines and tests.

    Returned by ``tool.guard_state()`` and :func:`guard_state`. The turn
    figures are for the caller's turn: the innermost :func:`~searchfuse.turn`
    around the call, or outside any, the implicit burst (``0`` searches when
    the next call would start a new one).
    """

    #: The explicit turn the caller is in, or ``None`` outside any ``turn()``.
    turn_id: str | None
    #: Searches the caller's turn has spent on this guard's budget.
    turn_searches: int
    #: The guard's limit per turn (``None``: unlimited).
    per_turn: int | None
    #: Whether the fuse is tripped (a cooldown runs).
    fuse_tripped: bool
    #: Seconds of cooldown left (``0.0`` when the fuse is not tripped).
    cooldown_left: float
    #: Entries in the cache now (``0`` without a cache).
    cache_size: int
    #: The cache's capacity, when it has one.
    cache_maxsize: int | None
    #: Calls that reached the backend since the guard was made.
    searches: int
    #: Calls answered from the cache, or by sharing an identical call in flight.
    cache_hits: int
    #: Calls answered by a checklist hook.
    checklist_answers: int
    #: Refusals handed out (turn limit, cooldown, 429, no key).
    refusals: int

    @property
    def turn_searches_left(self) -> int | None:
        """Searches the caller's turn may still make (``None``: unlimited)."""
        if self.per_turn is None:
            return None
        return max(0, self.per_turn - self.turn_searches)

    def __str__(self) -> str:
        limit = "unlimited" if self.per_turn is None else str(self.per_turn)
        if self.fuse_tripped:
            fuse = f"cooling down, {math.ceil(self.cooldown_left)} s left"
        else:
            fuse = "ready"
        capacity = f"/{self.cache_maxsize}" if self.cache_maxsize is not None else ""
        return (
            f"searches this turn: {self.turn_searches}/{limit} · fuse: {fuse} · "
            f"cache: {self.cache_size}{capacity}"
        )


class _Stats:
    """Counters behind :class:`GuardState`; a lock because ``+=`` is not atomic across threads."""

    __slots__ = ("_lock", "cache_hits", "checklist_answers", "refusals", "searches")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.searches = 0
        self.cache_hits = 0
        self.checklist_answers = 0
        self.refusals = 0

    def searched(self) -> None:
        with self._lock:
            self.searches += 1

    def hit(self) -> None:
        with self._lock:
            self.cache_hits += 1

    def answered(self) -> None:
        with self._lock:
            self.checklist_answers += 1

    def refused(self) -> None:
        with self._lock:
            self.refusals += 1


class _Guard:
    """The rules of one guarded tool, and the state they keep."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        per_turn: int | None,
        min_interval: float,
        checklist: tuple[Lookup, ...],
        cache: bool | MutableMapping[Any, Any] | None,
        cache_key: CacheKey,
        cooldown: float,
        router: RouterLike | None,
        inject: str | None,
        adapt: Callable[[Any], Any] | None,
        on_refusal: OnRefusal,
        budget: TurnBudget | None,
        fuse: Fuse | None,
        clock: _clock.Clock | None,
    ) -> None:
        self.name = _tool_name(func)
        self.per_turn = per_turn
        self.min_interval = min_interval
        self.checklist = checklist
        self.cache_key = cache_key
        self.cooldown = cooldown
        self.router = router
        self.inject = inject
        self.adapt = adapt
        self.on_refusal = on_refusal
        self.budget = budget if budget is not None else TurnBudget()
        self.fuse = fuse if fuse is not None else Fuse()
        self.clock = clock
        self.cache = make_cache(cache, timer=self.now)
        self.stats = _Stats()
        self.flights: dict[Hashable, concurrent.futures.Future[Any]] = {}
        self.aflights: dict[Hashable, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        # Reading the call (binding it to the signature) is only needed by
        # the rules that look at arguments; a bare pass-through skips it.
        self.reads_call = (
            bool(checklist) or self.cache is not None or (router is not None and inject is None)
        )
        self._binders: dict[bool, Binder] = {}

    def now(self) -> float:
        """The guard's clock; the module default is looked up per call so tests can swap it."""
        clock = self.clock
        return clock() if clock is not None else _clock.now()

    # -- reading a call ------------------------------------------------------

    def binder(self, wrapped: Callable[..., Any], instance: Any) -> Binder:
        # wrapt hands over a bound callable whenever there is an instance
        # (method, classmethod, or ``Class.method(obj, ...)``), else the plain
        # one; one guard wraps one callable, so two binders cover it.
        bound = instance is not None
        binder = self._binders.get(bound)
        if binder is not None:
            return binder
        try:
            signature: inspect.Signature | None = inspect.signature(wrapped)
        except (TypeError, ValueError):
            signature = None
        if signature is not None and self.inject is not None:
            # The caller never passes the injected key: the router supplies it.
            parameters = [p for p in signature.parameters.values() if p.name != self.inject]
            signature = signature.replace(parameters=parameters)
        binder = self._binders[bound] = Binder(signature, tool=self.name)
        return binder

    def read(
        self,
        wrapped: Callable[..., Any],
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Call:
        return self.binder(wrapped, instance)(args, kwargs)

    # -- refusals ------------------------------------------------------------

    def refused(self, refusal: SearchRefused) -> Any:
        """What the caller gets for ``refusal``, per ``on_refusal``."""
        self.stats.refused()
        logger.info("%s: search refused (%s)", self.name, refusal.reason)
        if self.on_refusal == "raise":
            raise refusal
        if self.on_refusal == "return":
            return refusal.message
        return self.on_refusal(refusal)

    def tripped(self, exc: BaseException) -> RateLimited:
        """Trip the fuse for the 429 ``exc``; the :class:`RateLimited` to raise."""
        now = self.now()
        seconds = cooldown_after(exc, now=now, default=self.cooldown)
        left = self.fuse.trip(seconds, now=now)
        logger.warning(
            "%s: the search backend answered 429; refusing searches for %.1f s", self.name, left
        )
        if isinstance(exc, RateLimited):
            if exc.retry_after == left:
                return exc
            return RateLimited(left, key=exc.key)
        return RateLimited(left)

    # -- the synchronous path --------------------------------------------------

    def run(
        self,
        wrapped: Callable[..., Any],
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """The guarded call of a plain (synchronous) tool."""
        try:
            if not self.reads_call:
                return self.search(wrapped, None, args, kwargs)
            call = self.read(wrapped, instance, args, kwargs)
            if self.checklist:
                answer = consult(self.checklist, call)
                if answer is not None:
                    self.stats.answered()
                    return answer
            if self.cache is None:
                return self.search(wrapped, call, args, kwargs)
            return self.search_shared(self.cache, wrapped, call, args, kwargs)
        except SearchRefused as refusal:
            return self.refused(refusal)

    def search_shared(
        self,
        cache: MutableMapping[Any, Any],
        wrapped: Callable[..., Any],
        call: Call,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Serve ``call`` from the cache, from an identical call in flight, or search."""
        key = self.cache_key(call.query, **call.params)
        while True:
            with CACHE_LOCK:
                hit = _lookup(cache, key)
                if hit is _MISS:
                    mine: concurrent.futures.Future[Any] = concurrent.futures.Future()
                    flight = self.flights.setdefault(key, mine)
            if hit is not _MISS:
                self.stats.hit()
                return hit
            if flight is mine:
                break  # we lead: search below, then answer everyone waiting
            try:
                result = flight.result()
            except concurrent.futures.CancelledError:
                continue  # the leader was interrupted, not answered: try again
            self.stats.hit()
            return result

        try:
            result = self.search(wrapped, call, args, kwargs)
        except BaseException as exc:
            with CACHE_LOCK:
                self.flights.pop(key, None)
            # Errors and refusals are shared with the calls waiting now, never cached.
            if isinstance(exc, Exception):
                flight.set_exception(exc)
            else:
                flight.cancel()
            raise
        with CACHE_LOCK:
            # The cache is filled before the flight ends, so a call arriving
            # in between finds one or the other, never neither.
            _store(cache, key, result)
            self.flights.pop(key, None)
        flight.set_result(result)
        return result

    def search(
        self,
        wrapped: Callable[..., Any],
        call: Call | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Fuse, router availability, turn budget, then the backend."""
        now = self.now()
        self.fuse.check(now)
        if self.router is not None:
            self.router.ensure_available()
        reservation = self.budget.reserve(self.per_turn, min_interval=self.min_interval, now=now)
        self.stats.searched()
        try:
            result = self.backend(wrapped, call, args, kwargs)
        except Exception as exc:
            if not is_rate_limit(exc):
                raise
            stop = self.tripped(exc)
            if stop is exc:
                raise
            raise stop from exc
        finally:
            self.budget.release(reservation, now=self.now())
        return result if self.adapt is None else self.adapt(result)

    def backend(
        self,
        wrapped: Callable[..., Any],
        call: Call | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        router = self.router
        if router is None:
            return wrapped(*args, **kwargs)
        inject = self.inject
        if inject is not None:
            return router.call(lambda key: wrapped(*args, **{**kwargs, inject: key}))
        assert call is not None
        return router.search(call.query, **router_arguments(call))

    # -- the asynchronous path -------------------------------------------------

    async def arun(
        self,
        wrapped: Callable[..., Any],
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """The guarded call of a coroutine-function tool."""
        try:
            if not self.reads_call:
                return await self.asearch(wrapped, None, args, kwargs)
            call = self.read(wrapped, instance, args, kwargs)
            if self.checklist:
                answer = await aconsult(self.checklist, call)
                if answer is not None:
                    self.stats.answered()
                    return answer
            if self.cache is None:
                return await self.asearch(wrapped, call, args, kwargs)
            return await self.asearch_shared(self.cache, wrapped, call, args, kwargs)
        except SearchRefused as refusal:
            result = self.refused(refusal)
            if inspect.isawaitable(result):
                result = await result
            return result

    async def asearch_shared(
        self,
        cache: MutableMapping[Any, Any],
        wrapped: Callable[..., Any],
        call: Call,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Async twin of :meth:`search_shared`; sharing happens within one event loop."""
        key = self.cache_key(call.query, **call.params)
        loop = asyncio.get_running_loop()
        while True:
            with CACHE_LOCK:
                hit = _lookup(cache, key)
                if hit is _MISS:
                    mine = (loop, loop.create_future())
                    entry = self.aflights.setdefault(key, mine)
            if hit is not _MISS:
                self.stats.hit()
                return hit
            if entry is mine:
                break  # we lead: search below, then answer everyone waiting
            if entry[0] is not loop:
                # Another event loop (another thread) runs the same search; its
                # future cannot be awaited from here, so search on our own.
                return await self.asearch_alone(cache, key, wrapped, call, args, kwargs)
            shared = entry[1]
            try:
                # shield: a waiter being cancelled must not cancel the shared search.
                result = await asyncio.shield(shared)
            except asyncio.CancelledError:
                if shared.cancelled() and not _being_cancelled():
                    continue  # the leader was cancelled, not answered: try again
                raise
            self.stats.hit()
            return result

        flight = mine[1]
        try:
            result = await self.asearch(wrapped, call, args, kwargs)
        except BaseException as exc:
            with CACHE_LOCK:
                if self.aflights.get(key) is mine:
                    del self.aflights[key]
            if isinstance(exc, Exception):
                flight.set_exception(exc)
                flight.exception()  # retrieved: nobody waiting is not an error
            else:
                flight.cancel()
            raise
        with CACHE_LOCK:
            _store(cache, key, result)
            if self.aflights.get(key) is mine:
                del self.aflights[key]
        flight.set_result(result)
        return result

    async def asearch_alone(
        self,
        cache: MutableMapping[Any, Any],
        key: Hashable,
        wrapped: Callable[..., Any],
        call: Call,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        result = await self.asearch(wrapped, call, args, kwargs)
        with CACHE_LOCK:
            _store(cache, key, result)
        return result

    async def asearch(
        self,
        wrapped: Callable[..., Any],
        call: Call | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Async twin of :meth:`search`."""
        now = self.now()
        self.fuse.check(now)
        if self.router is not None:
            self.router.ensure_available()
        # Reserved synchronously, before any await: the lock is never held
        # across a suspension point.
        reservation = self.budget.reserve(self.per_turn, min_interval=self.min_interval, now=now)
        self.stats.searched()
        try:
            result = await self.abackend(wrapped, call, args, kwargs)
        except Exception as exc:
            if not is_rate_limit(exc):
                raise
            stop = self.tripped(exc)
            if stop is exc:
                raise
            raise stop from exc
        finally:
            self.budget.release(reservation, now=self.now())
        return result if self.adapt is None else self.adapt(result)

    async def abackend(
        self,
        wrapped: Callable[..., Any],
        call: Call | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        router = self.router
        if router is None:
            return await wrapped(*args, **kwargs)
        inject = self.inject
        if inject is not None:
            return await router.acall(lambda key: wrapped(*args, **{**kwargs, inject: key}))
        assert call is not None
        return await router.asearch(call.query, **router_arguments(call))

    # -- introspection -----------------------------------------------------------

    def state(self) -> GuardState:
        now = self.now()
        left = self.fuse.remaining(now)
        size, maxsize = 0, None
        if self.cache is not None:
            with CACHE_LOCK:
                size = cache_size(self.cache)
            maxsize = getattr(self.cache, "maxsize", None)
        stats = self.stats
        return GuardState(
            turn_id=current_turn_id(),
            turn_searches=self.budget.spent(min_interval=self.min_interval, now=now),
            per_turn=self.per_turn,
            fuse_tripped=left > 0,
            cooldown_left=left,
            cache_size=size,
            cache_maxsize=int(maxsize) if maxsize is not None else None,
            searches=stats.searches,
            cache_hits=stats.cache_hits,
            checklist_answers=stats.checklist_answers,
            refusals=stats.refusals,
        )


def _lookup(cache: MutableMapping[Any, Any], key: Hashable) -> Any:
    # One __getitem__ instead of get()'s __contains__ + __getitem__: a TTL
    # cache reads the clock in each.
    try:
        return cache[key]
    except KeyError:
        return _MISS


def _store(cache: MutableMapping[Any, Any], key: Hashable, value: Any) -> None:
    # A value larger than the whole cache (cachetools' getsizeof) is served uncached.
    with contextlib.suppress(ValueError):
        cache[key] = value


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _unwrap_descriptor(func: Any) -> Any:
    """The function inside a ``classmethod``/``staticmethod`` object."""
    if isinstance(func, classmethod | staticmethod):
        return func.__func__
    return func


def _tool_name(func: Any) -> str:
    target = _unwrap_descriptor(func)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    return str(name) if name else type(target).__qualname__


def _is_async(func: Any) -> bool:
    target = _unwrap_descriptor(func)
    if inspect.iscoroutinefunction(target):
        return True
    # An object whose __call__ is a coroutine function (a tool class instance).
    dunder_call = getattr(type(target), "__call__", None)  # noqa: B004 - the method itself
    return not inspect.isroutine(target) and inspect.iscoroutinefunction(dunder_call)


def _check_inject(func: Any, inject: str) -> None:
    try:
        signature = inspect.signature(_unwrap_descriptor(func))
    except (TypeError, ValueError):
        return
    parameters = signature.parameters.values()
    if inject in signature.parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters
    ):
        return
    raise TypeError(
        f"inject={inject!r}: {_tool_name(func)}() has no parameter {inject!r} to receive the key"
    )


class GuardedFunction(wrapt.FunctionWrapper[..., Any]):
    """A guarded tool. Call it exactly like the callable it wraps.

    It keeps the wrapped callable's signature, name, docstring,
    ``__wrapped__`` and coroutine-ness, binds as a method, classmethod or
    static method like the original, and adds :meth:`guard_state`.
    """

    # No class-level annotation for ``_self_guard``: it would give the proxy an
    # ``__annotations__`` of its own and hide the wrapped function's.

    def guard_state(self) -> GuardState:
        """What the guard knows now: turn count, fuse, cooldown left, cache size, counters."""
        core: _Guard = self._self_guard
        return core.state()


def guard_state(tool: Callable[..., Any]) -> GuardState:
    """The :class:`GuardState` of a guarded tool (or of a method bound from one).

    The same as ``tool.guard_state()``, for code that wants the type checker
    to know the tool is guarded. Raises :class:`TypeError` for a tool that
    is not.
    """
    core = getattr(tool, "_self_guard", None)
    if not isinstance(core, _Guard):
        raise TypeError(f"{tool!r} is not guarded by searchfuse.guard")
    return core.state()


@overload
def guard(
    func: F,
    /,
    *,
    per_turn: int | None = 1,
    min_interval: float = DEFAULT_MIN_INTERVAL,
    checklist: Iterable[Lookup] = (),
    cache: bool | MutableMapping[Any, Any] = True,
    cache_key: CacheKey = search_key,
    cooldown: float = DEFAULT_COOLDOWN,
    router: RouterLike | None = None,
    inject: str | None = None,
    adapt: Callable[[Any], Any] | None = None,
    on_refusal: OnRefusal = "raise",
    budget: TurnBudget | None = None,
    fuse: Fuse | None = None,
    clock: _clock.Clock | None = None,
) -> F: ...


@overload
def guard(
    func: None = None,
    /,
    *,
    per_turn: int | None = 1,
    min_interval: float = DEFAULT_MIN_INTERVAL,
    checklist: Iterable[Lookup] = (),
    cache: bool | MutableMapping[Any, Any] = True,
    cache_key: CacheKey = search_key,
    cooldown: float = DEFAULT_COOLDOWN,
    router: RouterLike | None = None,
    inject: str | None = None,
    adapt: Callable[[Any], Any] | None = None,
    on_refusal: OnRefusal = "raise",
    budget: TurnBudget | None = None,
    fuse: Fuse | None = None,
    clock: _clock.Clock | None = None,
) -> Callable[[F], F]: ...


def guard(
    func: F | None = None,
    /,
    *,
    per_turn: int | None = 1,
    min_interval: float = DEFAULT_MIN_INTERVAL,
    checklist: Iterable[Lookup] = (),
    cache: bool | MutableMapping[Any, Any] = True,
    cache_key: CacheKey = search_key,
    cooldown: float = DEFAULT_COOLDOWN,
    router: RouterLike | None = None,
    inject: str | None = None,
    adapt: Callable[[Any], Any] | None = None,
    on_refusal: OnRefusal = "raise",
    budget: TurnBudget | None = None,
    fuse: Fuse | None = None,
    clock: _clock.Clock | None = None,
) -> F | Callable[[F], F]:
    """Guard a web-search tool so an agent cannot burn its search budget.

    Use it bare (``@guard``), with options (``@guard(per_turn=2)``), or on an
    existing callable (``guard(search_fn, cache=False)``), on plain or async
    functions, methods, classmethods and static methods. Every call passes,
    in this order:

    1. the ``checklist`` hooks: the first answer ends the call, no search;
    2. the cache: a hit is free (no turn budget) and served even during a
       cooldown; identical concurrent calls share one backend call;
    3. the fuse: while a cooldown runs, refuse with
       :class:`~searchfuse.CooldownActive` and send nothing; with a
       ``router``, also refuse (:class:`~searchfuse.NoKeyAvailable`) when no
       key can serve right now;
    4. the turn budget: reserve one of ``per_turn`` searches atomically, or
       refuse with :class:`~searchfuse.TurnLimitReached`;
    5. the backend: the wrapped function, or the ``router``;
    6. on a 429: trip the fuse for Retry-After (else ``cooldown``) and raise
       :class:`~searchfuse.RateLimited`; no retry, no other key, no other
       tool;
    7. on success: fill the cache.

    Other errors from the backend propagate unchanged and are never cached.

    Example::

        from searchfuse import guard, turn, TurnLimitReached
        from searchfuse.guard import MappingLookup

        facts = MappingLookup({"tavily dev key rate limit": "100 requests per minute"})

        @guard(checklist=[facts])
        def web_search(query: str, max_results: int = 5) -> dict:
            return tavily_client.search(query, max_results=max_results)

        with turn():                                 # one assistant reply
            web_search("Tavily dev key rate limit")  # answered locally, no search
            web_search("python 3.13 release date")   # reaches Tavily
            web_search("Python 3.13  release date")  # cache hit: free
            web_search("rust 2024 edition")          # raises TurnLimitReached

        # If Tavily answers 429 (Retry-After: 30), that call raises
        # RateLimited(retry_after=30.0), and for 30 s every uncached call
        # raises CooldownActive(retry_after=<seconds left>) without a request.
        print(web_search.guard_state())
        # searches this turn: 0/1 · fuse: ready · cache: 1/256

    Every refusal's ``message`` tells the model what happened and what to do
    next; ``on_refusal="return"`` hands it back as the tool's result, which
    is what agent frameworks that crash on tool exceptions need.

    Args:
        per_turn: Searches that may reach the backend per turn (see
            :func:`~searchfuse.turn`). ``None``: unlimited; ``0``: never (only
            checklist and cache answer).
        min_interval: Outside any explicit turn, calls that overlap or start
            within this many seconds of the end of the previous call form one
            implicit turn (a burst).
        checklist: Hooks ``(query, call) -> answer | None`` asked first. A
            hook that raises is logged and skipped.
        cache: ``True``: a TTL cache of 256 entries for 15 minutes (timed by
            ``clock``); ``False``: none (and no sharing of concurrent calls);
            or any ``cachetools`` cache (or mapping) to use, possibly shared.
        cache_key: ``(query, **params) -> key``; defaults to
            :func:`~searchfuse.guard.search_key`.
        cooldown: Seconds to refuse after a 429 without a usable Retry-After.
        router: Delegate searches to this router instead of running the
            wrapped function's body: ``query``/``q`` become the query,
            ``max_results``/``count``/``limit``/``num_results`` become
            ``max_results``, Tavily parameters pass through.
        inject: With ``router``, run the wrapped function with the key the
            router chooses passed as this argument, once per key it tries;
            the router sees each outcome (401, 432, 429...) and fails over.
        adapt: Turn the backend's result into what the tool returns (for
            example ``json.dumps`` for a tool that returns a JSON string);
            applied before caching.
        on_refusal: ``"raise"`` the refusal, ``"return"`` its message as the
            result, or a callable ``(refusal) -> result``. It applies to the
            guard's own refusals and to ``RateLimited``/``NoKeyAvailable``
            coming from the backend.
        budget: A :class:`~searchfuse.guard.TurnBudget` to share with other
            guarded tools (one budget for all of an agent's search tools).
        fuse: A :class:`~searchfuse.guard.Fuse` to share with other guarded
            tools (a 429 seen by one stops all).
        clock: Zero-argument callable returning epoch seconds, used for
            every time decision; defaults to searchfuse's clock, which
            ``searchfuse.testing`` can replace.
    """
    if per_turn is not None and (
        isinstance(per_turn, bool) or not isinstance(per_turn, int) or per_turn < 0
    ):
        raise ValueError(f"per_turn must be None or an integer >= 0, got {per_turn!r}")
    for name, value in (("min_interval", min_interval), ("cooldown", cooldown)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    if on_refusal not in ("raise", "return") and not callable(on_refusal):
        raise ValueError(f"on_refusal must be 'raise', 'return' or a callable, got {on_refusal!r}")
    hooks = tuple(checklist)
    for hook in hooks:
        if not callable(hook):
            raise TypeError(f"checklist hooks must be callables (query, call), got {hook!r}")
    if inject is not None and router is None:
        raise ValueError("inject= needs router=: the router chooses the key to inject")

    def decorate(func: F) -> F:
        if inject is not None:
            _check_inject(func, inject)
        core = _Guard(
            func,
            per_turn=per_turn,
            min_interval=min_interval,
            checklist=hooks,
            cache=cache,
            cache_key=cache_key,
            cooldown=cooldown,
            router=router,
            inject=inject,
            adapt=adapt,
            on_refusal=on_refusal,
            budget=budget,
            fuse=fuse,
            clock=clock,
        )
        guarded = GuardedFunction(func, core.arun if _is_async(func) else core.run)
        guarded.__self_setattr__("_self_guard", core)  # kept on the proxy, not the function
        return cast(F, guarded)

    if func is None:
        return decorate
    return decorate(func)
