"""Ready-made guarded tools for agents: `tavily_tool(router)`, a typed `tavily_search`
in Tavily's words, and `web_tool(router)`, a provider-neutral `web_search` served over
the router's whole chain.

Built on the guard, above it (it knows Tavily's parameters); `searchfuse.guard` re-exports it.

`@guard(router=router)` over a function of your own works too, but a type
checker wants that function to have a body; the factory gives a tool whose
call signature and result type are spelled out, so `mypy --strict` is
happy with the code that uses it.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any, Literal, Protocol, TypeVar, overload

from searchfuse import _clock
from searchfuse.guard.cache import CacheKey, search_key
from searchfuse.guard.checklist import Lookup
from searchfuse.guard.core import DEFAULT_MIN_INTERVAL, GuardState
from searchfuse.guard.decorator import guard
from searchfuse.guard.delegation import RouterLike
from searchfuse.guard.fuse import DEFAULT_COOLDOWN, Fuse
from searchfuse.guard.turns import TurnBudget
from searchfuse.providers.tavily import Depth, TimeRange, Topic

__all__ = ["TavilyTool", "WebTool", "tavily_tool", "web_tool"]

#: The topics every provider can express (a news search, or any page).
WebTopic = Literal["general", "news"]

R_co = TypeVar("R_co", covariant=True)


class TavilyTool(Protocol[R_co]):
    """A guarded `tavily_search(query, max_results=5, ...)` made by
    [`tavily_tool`][searchfuse.guard.tavily_tool]."""

    __name__: str

    def __call__(
        self,
        query: str,
        max_results: int = 5,
        *,
        search_depth: Depth | None = None,
        topic: Topic | None = None,
        time_range: TimeRange | None = None,
        include_domains: list[str] | None = None,
        exclude_domains: list[str] | None = None,
    ) -> R_co: ...

    def guard_state(self) -> GuardState:
        """What the guard knows now: turn count, fuse, cooldown left, cache size, counters."""
        ...


class WebTool(Protocol[R_co]):
    """A guarded `web_search(query, max_results=5, ...)` made by
    [`web_tool`][searchfuse.guard.web_tool]."""

    __name__: str

    def __call__(
        self,
        query: str,
        max_results: int = 5,
        *,
        topic: WebTopic | None = None,
        time_range: TimeRange | None = None,
        include_domains: list[str] | None = None,
        exclude_domains: list[str] | None = None,
    ) -> R_co: ...

    def guard_state(self) -> GuardState:
        """What the guard knows now: turn count, fuse, cooldown left, cache size, counters."""
        ...


@overload
def tavily_tool(
    router: RouterLike,
    *,
    on_refusal: Literal["raise"] = ...,
    per_turn: int | None = ...,
    min_interval: float = ...,
    checklist: Iterable[Lookup] = ...,
    cache: bool | str | MutableMapping[Any, Any] = ...,
    cache_key: CacheKey = ...,
    cooldown: float = ...,
    budget: TurnBudget | None = ...,
    fuse: Fuse | None = ...,
    clock: _clock.Clock | None = ...,
) -> TavilyTool[dict[str, Any]]: ...


@overload
def tavily_tool(
    router: RouterLike,
    *,
    on_refusal: Literal["return"],
    per_turn: int | None = ...,
    min_interval: float = ...,
    checklist: Iterable[Lookup] = ...,
    cache: bool | str | MutableMapping[Any, Any] = ...,
    cache_key: CacheKey = ...,
    cooldown: float = ...,
    budget: TurnBudget | None = ...,
    fuse: Fuse | None = ...,
    clock: _clock.Clock | None = ...,
) -> TavilyTool[dict[str, Any] | str]: ...


def tavily_tool(
    router: RouterLike,
    *,
    on_refusal: Literal["raise", "return"] = "raise",
    per_turn: int | None = 1,
    min_interval: float = DEFAULT_MIN_INTERVAL,
    checklist: Iterable[Lookup] = (),
    cache: bool | str | MutableMapping[Any, Any] = True,
    cache_key: CacheKey = search_key,
    cooldown: float = DEFAULT_COOLDOWN,
    budget: TurnBudget | None = None,
    fuse: Fuse | None = None,
    clock: _clock.Clock | None = None,
) -> TavilyTool[Any]:
    """A guarded `tavily_search` tool served by `router`.

    ```python
    from searchfuse import Router
    from searchfuse.guard import tavily_tool

    tavily_search = tavily_tool(Router.from_env(), on_refusal="return")
    result = tavily_search("what is a circuit breaker", max_results=3)
    if isinstance(result, str):      # a refusal, for the model
        print(result)
    else:                            # Tavily's JSON
        print(result["results"][0]["url"])
    ```

    The tool's name (`tavily_search`), signature and docstring are what an
    agent framework shows the model. Every call passes the guard (see
    [`guard`][searchfuse.guard]; the options are the same) and is searched by
    `router`. `on_refusal="return"` types the result as Tavily's JSON or
    the refusal's message (`dict[str, Any] | str`).
    """

    def tavily_search(
        query: str,
        max_results: int = 5,
        *,
        search_depth: Depth | None = None,
        topic: Topic | None = None,
        time_range: TimeRange | None = None,
        include_domains: list[str] | None = None,
        exclude_domains: list[str] | None = None,
    ) -> dict[str, Any]:
        """Search the web with Tavily for current facts; returns the results as JSON."""
        # The guard maps these same arguments onto router.search itself; the
        # body says what a call means, and serves when called unguarded.
        params = {
            "search_depth": search_depth,
            "topic": topic,
            "time_range": time_range,
            "include_domains": include_domains,
            "exclude_domains": exclude_domains,
        }
        set_params = {k: v for k, v in params.items() if v is not None}
        return router.search(query, max_results=max_results, **set_params)

    return _guarded(tavily_search, router, on_refusal, _options_of(locals()))  # type: ignore[no-any-return]


def _options_of(names: dict[str, Any]) -> dict[str, Any]:
    """The guard options among a factory's arguments."""
    return {k: names[k] for k in _OPTIONS}


_OPTIONS = (
    "per_turn",
    "min_interval",
    "checklist",
    "cache",
    "cache_key",
    "cooldown",
    "budget",
    "fuse",
    "clock",
)


def _guarded(tool: Any, router: RouterLike, on_refusal: str, options: dict[str, Any]) -> Any:
    if on_refusal not in ("raise", "return"):
        raise ValueError(f"on_refusal must be 'raise' or 'return', got {on_refusal!r}")
    handler: Any = on_refusal
    return guard(tool, router=router, on_refusal=handler, **options)


@overload
def web_tool(
    router: RouterLike,
    *,
    on_refusal: Literal["raise"] = ...,
    per_turn: int | None = ...,
    min_interval: float = ...,
    checklist: Iterable[Lookup] = ...,
    cache: bool | str | MutableMapping[Any, Any] = ...,
    cache_key: CacheKey = ...,
    cooldown: float = ...,
    budget: TurnBudget | None = ...,
    fuse: Fuse | None = ...,
    clock: _clock.Clock | None = ...,
) -> WebTool[dict[str, Any]]: ...


@overload
def web_tool(
    router: RouterLike,
    *,
    on_refusal: Literal["return"],
    per_turn: int | None = ...,
    min_interval: float = ...,
    checklist: Iterable[Lookup] = ...,
    cache: bool | str | MutableMapping[Any, Any] = ...,
    cache_key: CacheKey = ...,
    cooldown: float = ...,
    budget: TurnBudget | None = ...,
    fuse: Fuse | None = ...,
    clock: _clock.Clock | None = ...,
) -> WebTool[dict[str, Any] | str]: ...


def web_tool(
    router: RouterLike,
    *,
    on_refusal: Literal["raise", "return"] = "raise",
    per_turn: int | None = 1,
    min_interval: float = DEFAULT_MIN_INTERVAL,
    checklist: Iterable[Lookup] = (),
    cache: bool | str | MutableMapping[Any, Any] = True,
    cache_key: CacheKey = search_key,
    cooldown: float = DEFAULT_COOLDOWN,
    budget: TurnBudget | None = None,
    fuse: Fuse | None = None,
    clock: _clock.Clock | None = None,
) -> WebTool[Any]:
    """A guarded, provider-neutral `web_search` tool served by `router`'s whole chain.

    ```python
    from searchfuse import Router
    from searchfuse.guard import web_tool

    web_search = web_tool(Router.from_env(), on_refusal="return")
    result = web_search("rust 2024 edition", max_results=3, topic="news")
    if not isinstance(result, str):
        print(result["searchfuse"]["served_by"], result["results"][0]["url"])
    ```

    Its parameters are the ones every provider can honour: `query`,
    `max_results`, `topic` (`"general"` or `"news"`), `time_range`,
    `include_domains` and `exclude_domains`. The result is in Tavily's shape
    whichever provider served it (`result["searchfuse"]["served_by"]` says
    which). The options are the guard's, as for
    [`tavily_tool`][searchfuse.guard.tavily_tool].
    """

    def web_search(
        query: str,
        max_results: int = 5,
        *,
        topic: WebTopic | None = None,
        time_range: TimeRange | None = None,
        include_domains: list[str] | None = None,
        exclude_domains: list[str] | None = None,
    ) -> dict[str, Any]:
        """Search the web for current facts; returns the results as JSON."""
        params = {
            "topic": topic,
            "time_range": time_range,
            "include_domains": include_domains,
            "exclude_domains": exclude_domains,
        }
        set_params = {k: v for k, v in params.items() if v is not None}
        return router.search(query, max_results=max_results, **set_params)

    return _guarded(web_search, router, on_refusal, _options_of(locals()))  # type: ignore[no-any-return]
