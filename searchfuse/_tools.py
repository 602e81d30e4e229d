"""Ready-made guarded tools: `tavily_tool(router)`, a typed `tavily_search` for agents.

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

__all__ = ["TavilyTool", "tavily_tool"]

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

    handler: Any = on_refusal
    if on_refusal not in ("raise", "return"):
        raise ValueError(f"on_refusal must be 'raise' or 'return', got {on_refusal!r}")
    tool: Any = guard(
        tavily_search,
        router=router,
        on_refusal=handler,
        per_turn=per_turn,
        min_interval=min_interval,
        checklist=checklist,
        cache=cache,
        cache_key=cache_key,
        cooldown=cooldown,
        budget=budget,
        fuse=fuse,
        clock=clock,
    )
    return tool  # type: ignore[no-any-return]
