"""`Guard`: the guard's rules and state, as one public object.

`@guard` is a [`Guard`][searchfuse.Guard] plus a wrapt shell; the LangChain, Hermes,
MCP and OpenAI Agents integrations use the same object. Each operation is
written once, as a generator that yields the I/O it needs (ask the
checklist, run the backend, wait for an identical search in flight) and is
driven by a synchronous and an asynchronous driver, in the manner of the
router's flows: the sync and async paths cannot drift apart.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import inspect
import itertools
import logging
import math
import threading
import weakref
from collections.abc import (
    Awaitable,
    Callable,
    Generator,
    Hashable,
    Iterable,
    Mapping,
    MutableMapping,
    Sequence,
)
from dataclasses import dataclass
from types import GeneratorType
from typing import TYPE_CHECKING, Any, Final, NoReturn

from searchfuse import _answers, _clock, _telemetry
from searchfuse._sansio import AsyncHandlers, Step, arun, carried, run
from searchfuse.errors import (
    CooldownActive,
    RateLimited,
    SearchRefused,
    StoreUnavailable,
    Throttled,
    TurnLimitReached,
)
from searchfuse.guard.cache import (
    CACHE_LOCK,
    CacheKey,
    CacheMatch,
    cache_size,
    key_for_match,
    make_cache,
    search_key,
    search_key_of,
)
from searchfuse.guard.calls import Call
from searchfuse.guard.checklist import Lookup, aconsult, consult
from searchfuse.guard.delegation import RouterLike, router_arguments
from searchfuse.guard.fuse import DEFAULT_COOLDOWN, Fuse, cooldown_after, rate_limit_in
from searchfuse.guard.near import near_key, near_key_of
from searchfuse.guard.turns import Reservation, TurnBudget, current_turn_id, turn

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "DEFAULT_MIN_INTERVAL",
    "FLIGHT_WAIT",
    "Guard",
    "GuardState",
    "reset_all",
]

logger = logging.getLogger("searchfuse.guard")

#: Seconds within which calls outside any explicit turn count as one burst.
DEFAULT_MIN_INTERVAL = 2.0

#: The longest a call waits for an identical search in flight before it
#: searches on its own (real seconds: the leader's backend runs in real time).
FLIGHT_WAIT = 120.0

_MISS: Any = object()
# `_flow`'s key argument when the caller has not computed the key.
_UNREAD: Any = object()


@dataclass(frozen=True, slots=True)
class GuardState:
    """A snapshot of one guard, for status lines and tests.

    Returned by [`Guard.state`][searchfuse.Guard.state], `tool.guard_state()` and
    [`guard_state`][searchfuse.guard_state]. The turn figures are for the caller's
    turn: the innermost [`turn`][searchfuse.turn] around the call, or outside
    any, the implicit burst (`0` searches when the next call would start a
    new one).
    """

    #: The explicit turn the caller is in, or `None` outside any `turn()`.
    turn_id: str | None
    #: Searches the caller's turn has spent on this guard's budget.
    turn_searches: int
    #: The guard's limit per turn (`None`: unlimited).
    per_turn: int | None
    #: Whether the fuse is tripped (a cooldown runs).
    fuse_tripped: bool
    #: Seconds of cooldown left (`0.0` when the fuse is not tripped).
    cooldown_left: float
    #: Entries in the cache now (`0` without a cache).
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
        """Searches the caller's turn may still make (`None`: unlimited)."""
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
    """Counters behind [`GuardState`][searchfuse.GuardState].

    `itertools.count`: `next()` on it is atomic across threads (one C
    call) and costs a fraction of a lock; the value is read from its repr.
    """

    __slots__ = ("cache_hits", "checklist_answers", "refusals", "searches")

    def __init__(self) -> None:
        self.searches = itertools.count()
        self.cache_hits = itertools.count()
        self.checklist_answers = itertools.count()
        self.refusals = itertools.count()


def _value(counter: itertools.count[int]) -> int:
    return int(repr(counter)[6:-1])  # "count(5)" -> 5


# -- single flight -----------------------------------------------------------------

# What a call waiting for an identical search in flight is told when it ends.
_SERVED: Final = "served"  # the result: use it
_FAILED: Final = "failed"  # the backend's error (not a refusal): the same call would fail alike
_RETRY: Final = "retry"  # no result (cancelled, or the leader's own refusal): decide again


class _Flight:
    """One search in flight that identical calls wait for, from threads or event loops."""

    __slots__ = ("future",)

    def __init__(self) -> None:
        self.future: concurrent.futures.Future[tuple[str, Any]] = concurrent.futures.Future()

    def end(self, kind: str, value: Any = None) -> None:
        self.future.set_result((kind, value))

    def wait(self, timeout: float) -> tuple[str, Any] | None:
        try:
            return self.future.result(timeout)
        except concurrent.futures.TimeoutError:
            return None

    async def await_(self, timeout: float) -> tuple[str, Any] | None:
        import asyncio

        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[tuple[str, Any]] = loop.create_future()

        def done(future: concurrent.futures.Future[tuple[str, Any]]) -> None:
            # The waiting loop may be gone (its call cancelled, the loop closed).
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, waiter, future.result())

        # A plain callback, not asyncio.wrap_future: a waiter that is cancelled
        # must never cancel the search it waits for.
        self.future.add_done_callback(done)
        try:
            return await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            return None


def _settle(waiter: asyncio.Future[tuple[str, Any]], outcome: tuple[str, Any]) -> None:
    if not waiter.done():
        waiter.set_result(outcome)


# The searches the current call chain is running, as (guard, key) pairs: a
# tool that calls itself again with the same arguments (a retry inside the
# tool) continues its own search instead of waiting for it.
_CHAIN: contextvars.ContextVar[tuple[tuple[Guard, Hashable], ...]] = contextvars.ContextVar(
    "searchfuse_guard_chain", default=()
)

# -- the steps a flow yields to its driver ------------------------------------------------


class _Consult(Step):
    """Ask the checklist hooks about the call."""

    __slots__ = ("call", "checklist")

    def __init__(self, call: Call, checklist: Any) -> None:
        self.call = call
        self.checklist = checklist


class _Backend(Step):
    """Run the backend once (the driver knows which: it is the call's)."""

    __slots__ = ()


class _Wait(Step):
    """Wait for an identical search in flight."""

    __slots__ = ("flight",)

    def __init__(self, flight: _Flight) -> None:
        self.flight = flight


_BACKEND: Final = _Backend()

_Flow = Generator[Step, Any, Any]


def _consult(step: _Consult) -> Any:
    return consult(step.checklist, step.call)


async def _aconsult(step: _Consult) -> Any:
    return await aconsult(step.checklist, step.call)


def _wait(step: _Wait) -> Any:
    return step.flight.wait(FLIGHT_WAIT)


async def _await(step: _Wait) -> Any:
    return await step.flight.await_(FLIGHT_WAIT)


#: Result types a backend returns that are never awaitable nor generators: the
#: sync driver hands them back without `inspect.isawaitable`'s ABC check.
_PLAIN_RESULTS: Final = frozenset({dict, list, str, tuple, type(None), int, float, bytes})

_REGISTRY: weakref.WeakSet[Guard] = weakref.WeakSet()
_REGISTRY_LOCK = threading.Lock()


def reset_all() -> None:
    """Reset every live [`Guard`][searchfuse.Guard] (and so every `@guard` tool): turns, fuse,
    cache.

    For test runners: the `searchfuse.testing` pytest plugin calls it between
    tests, so a 429 in one test never refuses the next test's searches.
    """
    with _REGISTRY_LOCK:
        guards = list(_REGISTRY)
    for each in guards:
        each.reset()


class Guard:
    """The guard's rules and the state they keep: options once, decisions on demand.

    `@guard` wraps a function in one of these; integrations use it
    directly. Every search passes, in order: the checklist hooks, the cache
    (identical calls in flight share one search), the fuse (and, with a
    router, whether any key can serve), the turn budget, then the backend; a
    429 trips the fuse and raises [`RateLimited`][searchfuse.errors.RateLimited].

    ```python
    from searchfuse import Guard, turn
    from searchfuse.guard import Call

    rules = Guard(per_turn=1)
    with turn():
        rules.run(Call("python 3.13 release date"), lambda: tavily.search(...))
    ```

    Refusals are raised ([`SearchRefused`][searchfuse.errors.SearchRefused] and subclasses),
    never returned: what a tool hands its caller instead is the shell's
    business (`guard(on_refusal=...)`, a LangChain `ToolMessage`...).

    The options are those of [`guard`][searchfuse.guard] (see there), minus
    `on_refusal`; `name` names the guarded tool in logs and in the
    [`Call`][searchfuse.guard.Call] handed to checklist hooks.
    """

    def __init__(
        self,
        *,
        name: str = "search",
        per_turn: int | None = 1,
        min_interval: float = DEFAULT_MIN_INTERVAL,
        checklist: Iterable[Lookup] = (),
        cache: bool | str | MutableMapping[Any, Any] | None = True,
        cache_key: CacheKey = search_key,
        cache_match: CacheMatch = "exact",
        cooldown: float = DEFAULT_COOLDOWN,
        router: RouterLike | None = None,
        inject: str | None = None,
        adapt: Callable[[Any], Any] | None = None,
        budget: TurnBudget | None = None,
        fuse: Fuse | None = None,
        clock: _clock.Clock | None = None,
    ) -> None:
        if per_turn is not None and (
            isinstance(per_turn, bool) or not isinstance(per_turn, int) or per_turn < 0
        ):
            raise ValueError(f"per_turn must be None or an integer >= 0, got {per_turn!r}")
        for option, value in (("min_interval", min_interval), ("cooldown", cooldown)):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{option} must be a number of seconds, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{option} must be a finite number of seconds >= 0, got {value!r}")
        hooks = tuple(checklist)
        for hook in hooks:
            if not callable(hook):
                raise TypeError(f"checklist hooks must be callables (query, call), got {hook!r}")
        _check_options(cache_key, adapt, budget, fuse, clock, router, inject, name)
        cache_key = key_for_match(cache_match, cache_key)
        self.name = name
        self.per_turn = per_turn
        self.min_interval = float(min_interval)
        self.checklist = hooks
        self.cache_key = cache_key
        #: `(query, params) -> key`: the default key without rebuilding `**params`.
        self.key_of: Callable[[str, Mapping[str, Any]], Hashable] = (
            search_key_of
            if cache_key is search_key
            else near_key_of
            if cache_key is near_key
            else _spread(cache_key)
        )
        self.cooldown = float(cooldown)
        self.router = router
        self.inject = inject
        self.adapt = adapt
        self.budget = budget if budget is not None else TurnBudget()
        self.fuse = fuse if fuse is not None else Fuse()
        self.clock = clock
        # Without a clock of its own the cache reads searchfuse's, looked up per call.
        self.cache = make_cache(
            cache, timer=clock if clock is not None else _clock.now, router=router
        )
        self._stats = _Stats()
        self._flights: dict[Hashable, _Flight] = {}
        with _REGISTRY_LOCK:
            _REGISTRY.add(self)

    def __repr__(self) -> str:
        return f"<Guard {self.name!r} per_turn={self.per_turn!r} router={self.router!r}>"

    def now(self) -> float:
        """The guard's clock; searchfuse's default is looked up per call so tests can swap it."""
        clock = self.clock
        return clock() if clock is not None else _clock.now()

    # -- what integrations ask -------------------------------------------------------

    def key(self, call: Call) -> Hashable | None:
        """The cache key of `call` (`cache_key(call.query, **call.params)`), or `None`.

        `None`: the call cannot be cached. An argument has no faithful
        canonical form ([`search_key`][searchfuse.guard.search_key] raises
        `TypeError`), or the key function failed (logged); the call still
        runs, as a search of its own.
        """
        return self.key_or_none(call.query, call.params)

    def key_or_none(self, query: str, params: Mapping[str, Any]) -> Hashable | None:
        """[`key`][searchfuse.Guard.key] from the query and the arguments by name."""
        try:
            key = self.key_of(query, params)
            hash(key)
        except Exception as exc:
            # Keying by anything less faithful (a repr, an id) would serve one
            # call another call's result: the call goes uncached instead.
            level = logging.DEBUG if self.cache_key is search_key else logging.WARNING
            logger.log(level, "%s: call not cached, no cache key: %r", self.name, exc)
            return None
        return key

    def cached(self, call: Call) -> bool:
        """Whether `call` would be answered from the cache now (free: no budget, no request)."""
        cache = self.cache
        if cache is None:
            return False
        key = self.key(call)
        if key is None:
            return False
        with CACHE_LOCK:
            return _lookup(cache, key) is not _MISS

    def check(self) -> SearchRefused | None:
        """What refuses any uncached search right now, or `None`.

        The fuse (a cooldown runs) and, with a router, whether any key can
        serve. No request is sent and no budget is spent.
        """
        try:
            self.fuse.check(self.now())
            if self.router is not None:
                self.router.ensure_available()
        except SearchRefused as refusal:
            return refusal
        return None

    def decide(
        self, calls: Sequence[Call], *, turn_id: str | None = None
    ) -> list[SearchRefused | None]:
        """Decide a whole reply's calls at once: `None` for each that may run, else its refusal.

        Cache hits and repeats of a call that may run are free; the first
        `per_turn` other distinct searches (minus what the turn already
        spent) may run; the rest are refused with
        [`TurnLimitReached`][searchfuse.errors.TurnLimitReached], or all of them with the
        cooldown's refusal while the fuse is tripped. Nothing is reserved:
        the calls that run still pass [`run`][searchfuse.Guard.run], which counts them.
        `turn_id` names the reply's turn (default: the caller's).
        """
        decisions: list[SearchRefused | None] = []
        now = self.now()
        with turn(id=turn_id) if turn_id is not None else _no_scope():
            spent = self.budget.spent(min_interval=self.min_interval, now=now)
            failed = (
                spent > 0 and self.budget.failed(min_interval=self.min_interval, now=now) >= spent
            )
        running: set[Hashable] = set()
        blocked: SearchRefused | None = None
        checked = False
        refused = 0
        for call in calls:
            key = self.key(call)
            if key is not None and (key in running or self._hit(key)):
                decisions.append(None)  # a repeat shares the search; a cache hit is free
                continue
            if _answers.query_problem(call.query) is not None:
                # Never sent (the router refuses it before sending): it fails with its
                # own error and takes no search from the calls that can run.
                decisions.append(None)
                continue
            if not checked:
                blocked, checked = self.check(), True
            refusal = blocked
            if refusal is None and self.per_turn is not None and spent >= self.per_turn:
                refusal = TurnLimitReached(self.per_turn, failed=failed and not running)
            if refusal is None:
                spent += 1
                if key is not None:  # an uncacheable call is a search of its own
                    running.add(key)
            else:
                refused += 1
            decisions.append(refusal)
        if refused:
            for _ in range(refused):
                next(self._stats.refusals)
            logger.info(
                "%s: refused %d of %d search call(s) in one reply (%s)",
                self.name,
                refused,
                len(calls),
                blocked.reason if blocked is not None else "turn_limit",
            )
        return decisions

    def run(self, call: Call | str, backend: Callable[..., Any] | None = None) -> Any:
        """Run one call through the rules; the backend's result, or raise the refusal.

        `backend` is a zero-argument callable doing the real search (with
        `inject`: a callable taking the key the router chose). Without it,
        the guard's router searches `call.query` with the call's arguments
        mapped onto Tavily's (see `router_arguments`).
        """
        query, params = _read(call, self.name)
        return self.drive(self.flow(query, params), query, params, backend)

    async def arun(
        self, call: Call | str, backend: Callable[..., Awaitable[Any]] | None = None
    ) -> Any:
        """The same as [`run`][searchfuse.Guard.run], for a coroutine backend (or the router's
        `asearch`)."""
        query, params = _read(call, self.name)
        return await self.adrive(self.flow(query, params), query, params, backend)

    def reset(self) -> None:
        """Forget every turn's count, close the fuse and empty the cache."""
        self.budget.reset()
        self.fuse.reset()
        if self.cache is not None:
            with CACHE_LOCK:
                self.cache.clear()

    def state(self) -> GuardState:
        """What the guard knows now: turn count, fuse, cooldown left, cache size, counters."""
        now = self.now()
        left = self.fuse.remaining(now)
        size, maxsize = 0, None
        if self.cache is not None:
            with CACHE_LOCK:
                size = cache_size(self.cache)
            maxsize = getattr(self.cache, "maxsize", None)
        stats = self._stats
        return GuardState(
            turn_id=current_turn_id(),
            turn_searches=self.budget.spent(min_interval=self.min_interval, now=now),
            per_turn=self.per_turn,
            fuse_tripped=left > 0,
            cooldown_left=left,
            cache_size=size,
            cache_maxsize=int(maxsize) if maxsize is not None else None,
            searches=_value(stats.searches),
            cache_hits=_value(stats.cache_hits),
            checklist_answers=_value(stats.checklist_answers),
            refusals=_value(stats.refusals),
        )

    # -- the flow of one call, written once ------------------------------------------

    def _hit(self, key: Hashable) -> bool:
        cache = self.cache
        if cache is None:
            return False
        with CACHE_LOCK:
            return _lookup(cache, key) is not _MISS

    # -- the building blocks of a wrapper (what `@guard` is made of) ----------------------

    def count_cache_hit(self) -> None:
        """Count a call answered from the cache before any flow ran (a wrapper's own lookup)."""
        next(self._stats.cache_hits)
        _telemetry.cache_hit()

    def flow(
        self, query: str | None, params: Mapping[str, Any] | None, key: Hashable = _UNREAD
    ) -> _Flow:
        """One call's flow: checklist, cache / single flight, then
        [`search_flow`][searchfuse.Guard.search_flow]; run it with
        [`drive`][searchfuse.Guard.drive] or [`adrive`][searchfuse.Guard.adrive].

        `query is None`: the call was not read (a bare pass-through: no
        checklist, no cache, no router mapping need it). `key`: the cache
        key, when the caller has computed it already (`None`: uncacheable).
        """
        if query is None or params is None:
            return (yield from self.search_flow(None))  # the shell skips this layer
        if self.checklist:
            answer = yield _Consult(Call(query, params, self.name), self.checklist)
            if answer is not None:
                next(self._stats.checklist_answers)
                return answer
        cache = self.cache
        if key is _UNREAD:
            key = self.key_or_none(query, params)
        if self.in_chain(key):
            # The tool calling itself with the same arguments: its own search, continued.
            return (yield from self.search_flow(key, again=True))
        if cache is None or key is None:
            # No flights to wait on (no cache, or an uncacheable call): its own search.
            return (yield from self.search_flow(key))
        while True:
            with CACHE_LOCK:
                hit = _lookup(cache, key)
                if hit is _MISS:
                    joined = self._flights.get(key)
                    leader = joined is None
                    flight = self._flights[key] = _Flight() if joined is None else joined
            if hit is not _MISS:
                next(self._stats.cache_hits)
                _telemetry.cache_hit()
                return hit
            if leader:
                break
            outcome = yield _Wait(flight)
            if outcome is None:
                # The search in flight outlived FLIGHT_WAIT: search on our own.
                result = yield from self.search_flow(key)
                with CACHE_LOCK:
                    _store(cache, key, _shared(result))
                return result
            kind, value = outcome
            if kind == _SERVED:
                next(self._stats.cache_hits)
                _telemetry.cache_hit()
                return value
            if kind == _FAILED:
                raise value
            # _RETRY: the leader got no result this call can use; decide afresh.
        return (yield from self._lead(cache, key, flight))

    def in_chain(self, key: Hashable) -> bool:
        """Whether the current call chain already runs this guard's search for `key`."""
        chain = _CHAIN.get()
        if not chain or key is None:
            return False
        try:
            return (self, key) in chain
        except Exception:  # arguments that cannot be compared: not the same call
            return False

    def _refused(self, refusal: SearchRefused) -> None:
        """Count and log a refusal on its way out of a flow."""
        if _CHAIN.get():
            # Refused inside another guarded search (a tool calling itself with another
            # query, or another guarded tool): that search's body ran, and may have sent.
            refusal.__dict__[_NESTED] = True
        next(self._stats.refusals)
        _telemetry.refused(refusal)
        logger.info("%s: search refused (%s)", self.name, refusal.reason)
        diagnosis = getattr(refusal, "diagnosis", None)
        if diagnosis is not None:
            # For the operator: the model only ever gets the short refusal.
            logger.warning("%s: no key can serve; diagnosis:\n%s", self.name, diagnosis)

    def _lead(self, cache: MutableMapping[Any, Any], key: Hashable, flight: _Flight) -> _Flow:
        """Search for everyone waiting on `flight`, then tell them how it ended."""
        try:
            result = yield from self.search_flow(key)
        except Exception as exc:
            with CACHE_LOCK:
                self._flights.pop(key, None)
            # A refusal was the leader's own (its turn, its moment): the waiters
            # decide again for themselves. Any other error is the same for them.
            flight.end(_RETRY if isinstance(exc, SearchRefused) else _FAILED, exc)
            raise
        except BaseException:
            with CACHE_LOCK:
                self._flights.pop(key, None)
            flight.end(_RETRY)  # cancelled or interrupted: no result, nothing to share
            raise
        others = _shared(result)
        try:
            with CACHE_LOCK:
                # The cache is filled before the flight ends, so a call arriving
                # in between finds one or the other, never neither.
                _store(cache, key, others)
        finally:
            # Whatever the cache did, the flight ends and the result is served:
            # a flight left open would hold every identical call FLIGHT_WAIT.
            with CACHE_LOCK:
                self._flights.pop(key, None)
            flight.end(_SERVED, others)
        return result

    def search_flow(self, key: Hashable, *, again: bool = False) -> _Flow:
        """Fuse, router availability, turn budget, then the backend once.

        `again`: the call chain already runs this very search (a tool
        retrying itself): the fuse still applies, the budget was paid.
        """
        opened = self._open(key, again)
        answered = failed = False
        try:
            result = yield _BACKEND
            answered = True
        except Exception as exc:
            # The backend answered with an error, unless the error says nothing was sent.
            answered = failed = not nothing_sent(carried(exc))
            self._raise_for(exc)
        finally:
            self._settle(opened, answered, failed)
        return result if self.adapt is None else self.adapt(result)

    def pass_through(
        self,
        key: Hashable,
        again: bool,
        backend: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """[`search_flow`][searchfuse.Guard.search_flow] for a bare sync pass-through (the
        call not read: no checklist, no cache, no router mapping), run directly.

        The same parts in the same order; with nothing to wait on and
        nothing to ask, no generator and no driver are needed, which was a
        third of a guarded call's cost. `backend` is called with `args` and
        `kwargs` as they came (no partial made per call); a routed backend
        comes already bound, with empty ones.
        """
        try:
            opened = self._open(key, again)
            answered = failed = False
            try:
                if self.inject is None:
                    # `_call` without its frame (or a partial): this is every call's path.
                    result = backend(*args, **kwargs)
                    if type(result) not in _PLAIN_RESULTS:
                        result = self._checked(result)
                else:
                    result = self._call(None, None, backend)
                answered = True
            except Exception as exc:
                answered = failed = not nothing_sent(exc)
                self._raise_for(exc)
            finally:
                self._settle(opened, answered, failed)
        except SearchRefused as refusal:
            self._refused(refusal)
            raise
        return result if self.adapt is None else self.adapt(result)

    def _open(self, key: Hashable, again: bool) -> tuple[Any, Reservation | None]:
        """A search begins: the fuse and the router checked, the turn's budget reserved
        (unless `again`), the call chain extended. What `_settle` needs to end it."""
        clock = self.clock
        now = clock() if clock is not None else _clock.now()
        self.fuse.check(now)
        if self.router is not None:
            self.router.ensure_available()
        reservation: Reservation | None = None
        if not again:
            reservation = self.budget.reserve(
                self.per_turn, min_interval=self.min_interval, now=now
            )
        next(self._stats.searches)
        # A bare pass-through (call not read, no flights) cannot wait on itself.
        token = _CHAIN.set((*_CHAIN.get(), (self, key))) if key is not None else None
        return token, reservation

    def _raise_for(self, exc: Exception) -> NoReturn:
        """Raise the backend's error `exc`; a 429 trips the fuse first, and what the
        fuse says is raised, from `exc`."""
        found = rate_limit_in(exc)
        if found is None:
            raise exc
        # A RateLimited the tool wrapped is raised afresh, from the wrapper.
        stop = self._tripped(found, reuse=found is exc)
        if stop is exc:
            raise exc
        raise stop from exc

    def _settle(self, opened: tuple[Any, Reservation | None], answered: bool, failed: bool) -> None:
        """A search ends: the call chain restored; a search cancelled or refused before
        sending gives its turn's budget back, and a failed one is remembered (nobody is
        told to "use the result of that search" when none came)."""
        token, reservation = opened
        if token is not None:
            _CHAIN.reset(token)
        if reservation is not None and (reservation[1] or failed or not answered):  # [1]: implicit
            self.budget.release(reservation, now=self.now(), used=answered, failed=failed)

    def _tripped(self, exc: BaseException, *, reuse: bool = True) -> RateLimited:
        """Trip the fuse for the 429 `exc`; the [`RateLimited`][searchfuse.errors.RateLimited] to
        raise (`exc` itself when it says the same and `reuse`)."""
        now = self.now()
        seconds = cooldown_after(exc, now=now, default=self.cooldown)
        left = self.fuse.trip(seconds, now=now)
        logger.warning(
            "%s: the search backend answered 429; refusing searches for %.1f s", self.name, left
        )
        if isinstance(exc, RateLimited):
            if reuse and exc.retry_after == left:
                return exc
            return RateLimited(left, key=exc.key)
        _telemetry.rate_limited()  # the guarded function's own backend answered 429
        return RateLimited(left)

    # -- the drivers ---------------------------------------------------------------------

    def drive(
        self,
        flow: _Flow,
        query: str | None,
        params: Mapping[str, Any] | None,
        backend: Callable[..., Any] | None,
    ) -> Any:
        """Run `flow` synchronously (on the shared kernel, errors thrown into the flow)."""

        def call(_step: _Backend) -> Any:
            return self._call(query, params, backend)

        try:
            return run(flow, {_Backend: call, _Wait: _wait, _Consult: _consult}, throw=True)
        except SearchRefused as refusal:
            self._refused(refusal)
            raise

    async def adrive(
        self,
        flow: _Flow,
        query: str | None,
        params: Mapping[str, Any] | None,
        backend: Callable[..., Awaitable[Any]] | None,
    ) -> Any:
        """Run `flow` on the running event loop."""

        async def call(_step: _Backend) -> Any:
            return await self._acall(query, params, backend)

        handlers: AsyncHandlers = {_Backend: call, _Wait: _await, _Consult: _aconsult}
        try:
            return await arun(flow, handlers, throw=True)
        except SearchRefused as refusal:
            self._refused(refusal)
            raise

    def _call(
        self,
        query: str | None,
        params: Mapping[str, Any] | None,
        backend: Callable[..., Any] | None,
    ) -> Any:
        router = self.router
        if backend is None:
            if router is None or query is None or params is None:
                raise TypeError("Guard.run() needs a backend when the guard has no router")
            return router.search(query, **router_arguments(Call(query, params, self.name)))
        result = router.call(backend) if self.inject is not None and router else backend()
        if type(result) in _PLAIN_RESULTS:
            return result  # JSON-shaped: no awaitable, no generator (and no ABC check)
        return self._checked(result)

    def _checked(self, result: Any) -> Any:
        """A sync backend's result that is not JSON-shaped: never an awaitable; a
        generator consumed here, inside the guard (a 429 raised while producing
        results trips the fuse, and the cache never holds a spent generator)."""
        if inspect.isawaitable(result):
            _refuse_awaitable(result, self.name)
        if isinstance(result, GeneratorType):
            result = list(result)
        return result

    async def _acall(
        self,
        query: str | None,
        params: Mapping[str, Any] | None,
        backend: Callable[..., Awaitable[Any]] | None,
    ) -> Any:
        router = self.router
        if backend is None:
            if router is None or query is None or params is None:
                raise TypeError("Guard.arun() needs a backend when the guard has no router")
            arguments = router_arguments(Call(query, params, self.name))
            return await router.asearch(query, **arguments)
        if self.inject is not None and router is not None:
            result = await router.acall(backend)
        else:
            result = backend()
            if inspect.isawaitable(result):
                result = await result
        if inspect.isasyncgen(result):
            result = [item async for item in result]
        elif inspect.isgenerator(result):
            result = list(result)
        return result


def _read(call: Call | str, tool: str) -> tuple[str, Mapping[str, Any]]:
    """The query and the arguments of a call handed to `run` / `arun`.

    A call without a query (`None`: a model's malformed call, passed on as it
    came) is a call with an empty one, which the router refuses before sending
    ("query must be a non-empty string"), never a call the flow takes as unread.
    """
    if isinstance(call, str):
        return call, {}
    query = call.query
    return ("" if query is None else query), call.params


def _check_options(
    cache_key: object,
    adapt: object,
    budget: object,
    fuse: object,
    clock: object,
    router: object,
    inject: object,
    name: object,
) -> None:
    """Refuse options of the wrong kind when the guard is made, not at its first call."""
    for option, value, accepts in (
        ("cache_key", cache_key, "a callable (query, **params) -> key"),
        ("adapt", adapt, "None or a callable (result) -> what the tool returns"),
        ("clock", clock, "None or a zero-argument callable returning epoch seconds"),
    ):
        if not callable(value) and not (value is None and option != "cache_key"):
            raise TypeError(f"{option} must be {accepts}, got {value!r}")
    for option, value, kind in (("budget", budget, TurnBudget), ("fuse", fuse, Fuse)):
        if value is not None and not isinstance(value, kind):
            raise TypeError(
                f"{option} must be None or a searchfuse.guard.{kind.__name__}, got {value!r}"
            )
    if router is not None and not callable(getattr(router, "ensure_available", None)):
        raise TypeError(
            "router must be None or a searchfuse.Router (or an object with search, asearch, "
            f"call, acall and ensure_available: searchfuse.guard.RouterLike), got {router!r}"
        )
    if inject is not None and not isinstance(inject, str):
        raise TypeError(f"inject must be None or the name of an argument, got {inject!r}")
    if inject is not None and router is None:
        raise ValueError("inject= needs router=: the router chooses the key to inject")
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {name!r}")


def nothing_sent(exc: BaseException) -> bool:
    """Whether the error `exc` says the search never reached the backend.

    searchfuse's own: a request refused before sending
    ([`BadRequest`][searchfuse.errors.BadRequest] with `sent=False`), the router's state
    store unavailable, pacing and cooldown refusals, an inner turn limit;
    and any error with `sent = False`. Such a search spends no turn budget.
    A refusal another guarded call raised inside this search's backend (a tool
    retrying itself with another query) is not one: the backend ran and may
    have sent before it.
    """
    if getattr(exc, "__dict__", {}).get(_NESTED):
        return False  # a nested call's refusal says nothing of what the caller sent
    if isinstance(exc, CooldownActive | Throttled | TurnLimitReached | StoreUnavailable):
        return True
    return _answers.attribute(exc, "sent") is False


#: Set on a refusal raised inside another guarded search (see `Guard._refused`).
_NESTED = "_searchfuse_nested"


def _refuse_awaitable(result: Any, name: str) -> None:
    """A sync tool returned an awaitable: never await it here, never cache it."""
    error = TypeError(
        f"guard() guarded {name}() as a sync function, but it returned "
        f"{type(result).__name__!s} (an awaitable): the search would run after the guard "
        "returned, outside its budget, fuse and cache. Guard an `async def` instead, e.g. "
        "`async def web_search(query): return await backend(query)`."
    )
    if inspect.iscoroutine(result):
        result.close()  # never started, so no "never awaited" warning
        error.sent = False  # type: ignore[attr-defined]  # nothing was sent: no budget spent
    raise error


def _spread(cache_key: CacheKey) -> Callable[[str, Mapping[str, Any]], Hashable]:
    def key_of(query: str, params: Mapping[str, Any]) -> Hashable:
        return cache_key(query, **params)

    return key_of


class _no_scope:
    """A context manager that does nothing (cheaper than contextlib.nullcontext here)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _lookup(cache: MutableMapping[Any, Any], key: Hashable) -> Any:
    """The cached value for `key`, or `_MISS`; a cache that fails reads as a miss (logged)."""
    # One __getitem__ instead of get()'s __contains__ + __getitem__: a TTL
    # cache reads the clock in each.
    try:
        return cache[key]
    except KeyError:
        return _MISS
    except Exception as exc:
        cache_read_failed(exc)
        return _MISS


def cache_read_failed(exc: Exception) -> None:
    """Log a cache that failed to read: the call searches instead."""
    logger.warning("cache read failed, searching instead: %r", exc)


def _shared(result: Any) -> Any:
    """`result` as another caller gets it from the cache or a shared flight: without
    the spend budgets its search counted (`result["searchfuse"]["budgets"]`), which
    are the searcher's own (its conversation's use) and which a free answer did not
    change."""
    meta = result.get("searchfuse") if isinstance(result, dict) else None
    if not isinstance(meta, dict) or "budgets" not in meta:
        return result
    return {**result, "searchfuse": {k: v for k, v in meta.items() if k != "budgets"}}


def _store(cache: MutableMapping[Any, Any], key: Hashable, value: Any) -> None:
    """Cache `value`; a value the cache cannot hold is served uncached."""
    try:
        cache[key] = value
    except ValueError:
        pass  # larger than the whole cache (cachetools' getsizeof): expected, not logged
    except Exception as exc:
        logger.warning("result served but not cached: the cache refused it: %r", exc)
