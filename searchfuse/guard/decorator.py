"""`guard()`: put the agent-facing rules in front of any web-search tool.

The rules and their state are a [`Guard`][searchfuse.Guard]; `guard()`
wraps the tool in a `wrapt.FunctionWrapper` that hands each call to
it. The guarded tool keeps its signature, name, docstring, `__wrapped__`
and coroutine-ness, and works on functions, methods, classmethods and static
methods alike.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Hashable, Iterable, MutableMapping
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Literal,
    ParamSpec,
    Protocol,
    TypeAlias,
    TypedDict,
    TypeVar,
    Unpack,
    overload,
)

from searchfuse import _clock
from searchfuse.errors import SearchRefused
from searchfuse.guard.cache import _PLAIN_TYPES, CACHE_LOCK, CacheKey, CacheMatch, search_key
from searchfuse.guard.calls import Binder
from searchfuse.guard.checklist import Lookup
from searchfuse.guard.core import (
    _CHAIN,
    _MISS,
    _UNREAD,
    DEFAULT_MIN_INTERVAL,
    Guard,
    GuardState,
    _Flow,
    cache_read_failed,
)
from searchfuse.guard.delegation import RouterLike
from searchfuse.guard.fuse import DEFAULT_COOLDOWN, Fuse
from searchfuse.guard.turns import TurnBudget

if TYPE_CHECKING:
    from searchfuse.guard._wrapper import GuardedFunction

__all__ = [
    "DEFAULT_MIN_INTERVAL",
    "GuardOptions",
    "GuardState",
    "Guarded",
    "GuardedFunction",
    "OnRefusal",
    "guard",
    "guard_state",
]

P = ParamSpec("P")
Q = ParamSpec("Q")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

#: What a guarded tool does with a refusal: raise it, return its message, or
#: return what the callable makes of it.
OnRefusal: TypeAlias = Literal["raise", "return"] | Callable[[SearchRefused], Any]


class Guarded(Protocol[P, R_co]):
    """What type checkers see of a guarded tool: the tool's own call, plus
    [`guard_state`][searchfuse.guard.Guarded.guard_state].

    With `on_refusal="return"` the result type is the tool's or `str`
    (the refusal's message); with a handler, the tool's or the handler's.
    """

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    def guard_state(self) -> GuardState:
        """What the guard knows now: turn count, fuse, cooldown left, cache size, counters."""
        ...

    @property
    def guard(self) -> Guard:
        """The [`Guard`][searchfuse.Guard] behind this tool: its rules and state."""
        ...

    @overload
    def __get__(self, instance: None, owner: type[Any], /) -> Guarded[P, R_co]: ...

    @overload
    def __get__(
        self: Guarded[Concatenate[Any, Q], R_co], instance: object, owner: type[Any], /
    ) -> Guarded[Q, R_co]: ...


class _Decorate(Protocol):
    def __call__(self, func: Callable[P, R], /) -> Guarded[P, R]: ...


class _DecorateReturning(Protocol[T_co]):
    @overload
    def __call__(
        self, func: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Guarded[P, Coroutine[Any, Any, R | T_co]]: ...

    @overload
    def __call__(self, func: Callable[P, R], /) -> Guarded[P, R | T_co]: ...


#: The attribute a guarded function may carry: a callable turning a refusal into the
#: exception (a `SearchRefused` too) that the function's own callers catch.
REFUSAL_MAP = "__searchfuse_refusal__"


def _unwrap_descriptor(func: Any) -> Any:
    """The function inside a `classmethod`/`staticmethod` object or a `functools.partial`."""
    if isinstance(func, classmethod | staticmethod):
        return func.__func__
    while isinstance(func, functools.partial):
        func = func.func
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


def guard_state(tool: Callable[..., Any]) -> GuardState:
    """The [`GuardState`][searchfuse.GuardState] of a guarded tool (or of a method bound from one).

    The same as `tool.guard_state()`. Raises `TypeError` for a tool
    that is not guarded.
    """
    core = getattr(tool, "_self_guard", None)
    if not isinstance(core, Guard):
        raise TypeError(f"{tool!r} is not guarded by searchfuse.guard")
    return core.state()


class _Shell:
    """Hands each call of one guarded tool to its [`Guard`][searchfuse.Guard], then applies
    `on_refusal`."""

    __slots__ = (
        "_binders",
        "_bound",
        "_known",
        "_plain",
        "core",
        "looks_up_first",
        "on_refusal",
        "reads_call",
        "refusal_map",
        "routed",
    )

    def __init__(
        self,
        core: Guard,
        on_refusal: OnRefusal,
        *,
        refusal_map: Callable[[SearchRefused], Any] | None = None,
    ) -> None:
        self.core = core
        self.on_refusal = on_refusal
        # A guarded function that says how its callers expect refusals (the
        # tavily-python drop-in: tavily-python's errors) gets them that way.
        self.refusal_map = refusal_map
        # Reading the call (binding it to the signature) is only needed by
        # the rules that look at arguments; a bare pass-through skips it.
        self.routed = core.router is not None and core.inject is None
        self.reads_call = bool(core.checklist) or core.cache is not None or self.routed
        # A cache hit is answered before any flow starts (the checklist, when
        # there is one, must be asked first, so then the flow does it all).
        self.looks_up_first = core.cache is not None and not core.checklist
        self._binders: dict[bool, Binder] = {}
        self._plain: Binder | None = None
        self._bound: Binder | None = None
        self._known: dict[Hashable, tuple[str, dict[str, Any], Hashable]] = {}

    def binder(self, wrapped: Callable[..., Any], instance: Any) -> Binder:
        # wrapt hands over a bound callable whenever there is an instance
        # (method, classmethod, or `Class.method(obj, ...)`), else the plain
        # one; one guard wraps one callable, so two binders cover it.
        bound = instance is not None
        binder = self._binders.get(bound)
        if binder is not None:
            return binder
        try:
            signature: inspect.Signature | None = inspect.signature(wrapped)
        except (TypeError, ValueError):
            signature = None
        inject = self.core.inject
        if signature is not None and inject is not None:
            # The caller never passes the injected key: the router supplies it.
            parameters = [p for p in signature.parameters.values() if p.name != inject]
            signature = signature.replace(parameters=parameters)
        binder = self._binders[bound] = Binder(signature, tool=self.core.name)
        if bound:
            self._bound = binder
        else:
            self._plain = binder
        return binder

    def backend(
        self, wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Callable[..., Any] | None:
        if self.routed:
            return None  # the router searches; the function body never runs
        inject = self.core.inject
        if inject is not None:
            return lambda key: wrapped(*args, **{**kwargs, inject: key})
        return functools.partial(wrapped, *args, **kwargs)  # called in C: no extra frame

    def refused(self, refusal: SearchRefused) -> Any:
        if self.refusal_map is not None:
            mixed = self.refusal_map(refusal)
            assert isinstance(mixed, SearchRefused)
            refusal = mixed
        on_refusal = self.on_refusal
        if on_refusal == "raise":
            raise refusal
        if on_refusal == "return":
            return refusal.message
        return on_refusal(refusal)

    def start(
        self,
        wrapped: Callable[..., Any],
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[Any, _Flow | None, str | None, dict[str, Any] | None]:
        """`(hit, None, ...)` for a cache hit, else `(_MISS, flow, query, params)`."""
        core = self.core
        if not self.reads_call:
            # A bare pass-through: its arguments as they came mark its search,
            # so a retry inside the tool continues it.
            raw = (args, tuple(kwargs.items())) if kwargs else args
            again = bool(_CHAIN.get()) and core.in_chain(raw)  # no chain: no call to make
            return _MISS, core.search_flow(raw, again=again), None, None
        looks_up_first = self.looks_up_first
        seen: Hashable = None
        if looks_up_first and instance is None:
            # The same arguments read the same way: their reading is remembered
            # (bounded), so a repeated call skips binding and normalising.
            seen = (args, tuple(kwargs.items())) if kwargs else args
            try:
                known = self._known.get(seen)
            except TypeError:  # an unhashable argument: read it every time
                known = seen = None
            if known is not None:
                query, remembered, key = known
                hit = self.cached(core, key)
                if hit is not _MISS:
                    return hit, None, None, None
                return _MISS, core.flow(query, dict(remembered), key), query, dict(remembered)
        binder = self._bound if instance is not None else self._plain
        if binder is None:
            binder = self.binder(wrapped, instance)
        query, params = binder.read(args, kwargs)
        key = _UNREAD  # read by the flow, after the checklist
        if looks_up_first:
            key = core.key_or_none(query, params)
            if seen is not None and _plain_values(params) and _textual(args, kwargs):
                if len(self._known) >= REMEMBERED_CALLS:
                    self._known.clear()
                self._known[seen] = (query, dict(params), key)
            hit = self.cached(core, key)
            if hit is not _MISS:
                return hit, None, None, None
        return _MISS, core.flow(query, params, key), query, params

    @staticmethod
    def cached(core: Guard, key: Hashable) -> Any:
        """The cached answer for `key` (counted as a hit), or `_MISS`: before any flow."""
        cache = core.cache
        if cache is None or key is None:
            return _MISS
        with CACHE_LOCK:
            try:
                hit = cache[key]
            except KeyError:
                return _MISS
            except Exception as exc:
                cache_read_failed(exc)  # a miss: the flow searches
                return _MISS
        core.count_cache_hit()
        return hit

    def __call__(
        self,
        wrapped: Callable[..., Any],
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        try:
            if not self.reads_call:
                # A bare pass-through: its arguments as they came mark its search,
                # so a retry inside the tool continues it.
                raw = (args, tuple(kwargs.items())) if kwargs else args
                core = self.core
                again = bool(_CHAIN.get()) and core.in_chain(raw)
                if core.inject is None:  # the function itself searches, called as it came
                    return core.pass_through(raw, again, wrapped, args, kwargs)
                backend = self.backend(wrapped, args, kwargs)
                assert backend is not None  # not routed: the function itself searches
                return core.pass_through(raw, again, backend, (), {})
            hit, flow, query, params = self.start(wrapped, instance, args, kwargs)
            if flow is None:
                return hit
            return self.core.drive(flow, query, params, self.backend(wrapped, args, kwargs))
        except SearchRefused as refusal:
            return self.refused(refusal)

    async def acall(
        self,
        wrapped: Callable[..., Any],
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        try:
            hit, flow, query, params = self.start(wrapped, instance, args, kwargs)
            if flow is None:
                return hit
            backend = self.backend(wrapped, args, kwargs)
            return await self.core.adrive(flow, query, params, backend)
        except SearchRefused as refusal:
            answer = self.refused(refusal)
            return await answer if inspect.isawaitable(answer) else answer


def _check_callable(func: Any) -> None:
    target = _unwrap_descriptor(func)
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        kind = "an async generator" if inspect.isasyncgenfunction(target) else "a generator"
        raise TypeError(
            f"guard() cannot guard {_tool_name(func)}(): it is {kind} function, so its "
            "results would be produced after the guard returned (a 429 while producing "
            "them would escape the fuse, and the cache would hold a spent generator). "
            "Return a list instead, e.g. `return list(results)`."
        )
    if not callable(target):
        raise TypeError(f"guard() needs a callable search tool, got {func!r}")


_RefusalHandler = Callable[[SearchRefused], Any]

#: Distinct argument tuples a guarded tool remembers the reading of.
REMEMBERED_CALLS = 256


def _plain_values(params: dict[str, Any]) -> bool:
    # Only immutable plain values: a remembered reading can never go stale.
    return all(type(value) in _PLAIN_TYPES for value in params.values())


def _textual(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    # Readings are remembered by the arguments as given, compared by `==`: only
    # strings and None, never `1`, which would find the reading of `True` or `1.0`.
    return all(type(value) is str or value is None for value in (*args, *kwargs.values()))


class GuardOptions(TypedDict, total=False):
    """The options of [`guard`][searchfuse.guard] (and of [`Guard`][searchfuse.Guard]) but
    `on_refusal`, typed once: `guard(func, **options)` is checked against them."""

    per_turn: int | None
    min_interval: float
    checklist: Iterable[Lookup]
    cache: bool | str | MutableMapping[Any, Any]
    cache_key: CacheKey
    cache_match: CacheMatch
    cooldown: float
    router: RouterLike | None
    inject: str | None
    adapt: Callable[[Any], Any] | None
    budget: TurnBudget | None
    fuse: Fuse | None
    clock: _clock.Clock | None


@overload
def guard(
    func: Callable[P, R],
    /,
    *,
    on_refusal: Literal["raise"] = ...,
    **options: Unpack[GuardOptions],
) -> Guarded[P, R]: ...


@overload
def guard(
    func: None = None,
    /,
    *,
    on_refusal: Literal["raise"] = ...,
    **options: Unpack[GuardOptions],
) -> _Decorate: ...


@overload
def guard(
    func: None = None,
    /,
    *,
    on_refusal: Literal["return"],
    **options: Unpack[GuardOptions],
) -> _DecorateReturning[str]: ...


@overload
def guard(
    func: None = None,
    /,
    *,
    on_refusal: Callable[[SearchRefused], T],
    **options: Unpack[GuardOptions],
) -> _DecorateReturning[T]: ...


@overload
def guard(
    func: Callable[P, Coroutine[Any, Any, R]],
    /,
    *,
    on_refusal: Literal["return"],
    **options: Unpack[GuardOptions],
) -> Guarded[P, Coroutine[Any, Any, R | str]]: ...


@overload
def guard(
    func: Callable[P, R],
    /,
    *,
    on_refusal: Literal["return"],
    **options: Unpack[GuardOptions],
) -> Guarded[P, R | str]: ...


@overload
def guard(
    func: Callable[P, Coroutine[Any, Any, R]],
    /,
    *,
    on_refusal: Callable[[SearchRefused], T],
    **options: Unpack[GuardOptions],
) -> Guarded[P, Coroutine[Any, Any, R | T]]: ...


@overload
def guard(
    func: Callable[P, R],
    /,
    *,
    on_refusal: Callable[[SearchRefused], T],
    **options: Unpack[GuardOptions],
) -> Guarded[P, R | T]: ...


def guard(
    func: Callable[..., Any] | None = None,
    /,
    *,
    per_turn: int | None = 1,
    min_interval: float = DEFAULT_MIN_INTERVAL,
    checklist: Iterable[Lookup] = (),
    cache: bool | str | MutableMapping[Any, Any] = True,
    cache_key: CacheKey = search_key,
    cache_match: CacheMatch = "exact",
    cooldown: float = DEFAULT_COOLDOWN,
    router: RouterLike | None = None,
    inject: str | None = None,
    adapt: Callable[[Any], Any] | None = None,
    on_refusal: OnRefusal = "raise",
    budget: TurnBudget | None = None,
    fuse: Fuse | None = None,
    clock: _clock.Clock | None = None,
) -> Any:
    """Guard a web-search tool so an agent cannot burn its search budget.

    Use it bare (`@guard`), with options (`@guard(per_turn=2)`), or on an
    existing callable (`guard(search_fn, cache=False)`), on plain or async
    functions, methods, classmethods and static methods. Every call passes,
    in this order:

    1. the `checklist` hooks: the first answer ends the call, no search;
    2. the cache: a hit is free (no turn budget) and served even during a
       cooldown; identical concurrent calls share one backend call;
    3. the fuse: while a cooldown runs, refuse with
       [`CooldownActive`][searchfuse.errors.CooldownActive] and send nothing; with a
       `router`, also refuse ([`NoKeyAvailable`][searchfuse.errors.NoKeyAvailable]) when no
       key can serve right now;
    4. the turn budget: reserve one of `per_turn` searches atomically, or
       refuse with [`TurnLimitReached`][searchfuse.errors.TurnLimitReached];
    5. the backend: the wrapped function, or the `router`;
    6. on a 429: trip the fuse for Retry-After (else `cooldown`) and raise
       [`RateLimited`][searchfuse.errors.RateLimited]; no retry, no other key, no other
       tool;
    7. on success: fill the cache.

    Other errors from the backend propagate unchanged and are never cached.

    Example:
        ```python
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
        ```

    Every refusal's `message` tells the model what happened and what to do
    next; `on_refusal="return"` hands it back as the tool's result, which
    is what agent frameworks that crash on tool exceptions need.

    Args:
        per_turn: Searches that may reach the backend per turn (see
            [`turn`][searchfuse.turn]). `None`: unlimited; `0`: never (only
            checklist and cache answer).
        min_interval: Outside any explicit turn, calls that overlap a search
            in flight or start within this many seconds of the burst's first
            call form one implicit turn (a burst); a refused call never
            extends it.
        checklist: Hooks `(query, call) -> answer | None` asked first. A
            hook that raises is logged and skipped.
        cache: `True`: a TTL cache of 256 entries for 15 minutes (timed by
            `clock`); `False`: none (and no sharing of concurrent calls);
            or any `cachetools` cache (or mapping) to use, possibly shared.
        cache_key: `(query, **params) -> key`; defaults to
            [`search_key`][searchfuse.guard.search_key].
        cache_match: `"exact"` (the default key: case and spaces aside, the
            same query) or `"near"`: a query that differs from an answered one
            only in case, punctuation, word order, stop words or plural
            endings is a hit, while one whose numbers, names, negations or
            quoted phrases differ never is
            ([`near_key`][searchfuse.guard.near_key]). Give `cache_key` or
            `cache_match="near"`, not both.
        cooldown: Seconds to refuse after a 429 without a usable Retry-After.
        router: Delegate searches to this router instead of running the
            wrapped function's body: `query`/`q` become the query,
            `max_results`/`count`/`limit`/`num_results` become
            `max_results`, Tavily parameters pass through.
        inject: With `router`, run the wrapped function with the key the
            router chooses passed as this argument, once per key it tries;
            the router sees each outcome (401, 432, 429...) and fails over.
        adapt: Turn the backend's result into what the tool returns (for
            example `json.dumps` for a tool that returns a JSON string);
            applied before caching.
        on_refusal: `"raise"` the refusal, `"return"` its message as the
            result, or a callable `(refusal) -> result`. It applies to the
            guard's own refusals and to `RateLimited`/`NoKeyAvailable`
            coming from the backend.
        budget: A [`TurnBudget`][searchfuse.TurnBudget] to share with other
            guarded tools (one budget for all of an agent's search tools).
        fuse: A [`Fuse`][searchfuse.Fuse] to share with other guarded
            tools (a 429 seen by one stops all).
        clock: Zero-argument callable returning epoch seconds, used for
            every time decision; defaults to searchfuse's clock, which
            `searchfuse.testing` can replace.
    """
    if on_refusal not in ("raise", "return") and not callable(on_refusal):
        raise ValueError(f"on_refusal must be 'raise', 'return' or a callable, got {on_refusal!r}")
    options: dict[str, Any] = {
        "per_turn": per_turn,
        "min_interval": min_interval,
        "checklist": tuple(checklist),
        "cache": cache,
        "cache_key": cache_key,
        "cache_match": cache_match,
        "cooldown": cooldown,
        "router": router,
        "inject": inject,
        "adapt": adapt,
        "budget": budget,
        "fuse": fuse,
        "clock": clock,
    }
    # Bad options fail here, at decoration, not at the first search.
    Guard(**{**options, "cache": False})

    def decorate(func: Callable[..., Any]) -> Any:
        _check_callable(func)
        if inject is not None:
            _check_inject(func, inject)
        from searchfuse.guard._wrapper import GuardedFunction  # wrapt, on first use

        # A function may carry REFUSAL_MAP: how its callers expect a refusal
        # (the tavily-python drop-in's methods carry tavily-python's errors).
        refusal_map = getattr(_unwrap_descriptor(func), REFUSAL_MAP, None)
        shell = _Shell(Guard(name=_tool_name(func), **options), on_refusal, refusal_map=refusal_map)
        wrapper = shell.acall if _is_async(func) else shell
        guarded = GuardedFunction(func, wrapper)
        guarded.__self_setattr__("_self_guard", shell.core)  # kept on the proxy, not the function
        # A plain function (not a bound method, not a descriptor) is called
        # with no instance: GuardedFunction.__call__ takes a shortcut then.
        direct = wrapper if inspect.isfunction(func) else None
        guarded.__self_setattr__("_self_direct", direct)
        return guarded

    if func is None:
        return decorate
    return decorate(func)


def __getattr__(name: str) -> Any:
    # GuardedFunction is a wrapt proxy; wrapt loads when it is first needed (PEP 562).
    if name == "GuardedFunction":
        from searchfuse.guard._wrapper import GuardedFunction

        return GuardedFunction
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
