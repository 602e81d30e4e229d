"""Handing a guarded call to a router: the router protocol and the argument mapping.

`guard(router=router)` never runs the wrapped function's body: its
signature is the tool's contract with the model, and the call's arguments
are mapped onto `router.search`. `guard(router=router, inject="api_key")`
runs the wrapped function itself, once per key the router tries, with the
key passed as that argument, so the router sees (and reacts to) how each
key fared.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from searchfuse.guard.calls import Call

__all__ = ["MAX_RESULTS_NAMES", "TAVILY_PARAMS", "RouterLike", "router_arguments"]

T = TypeVar("T")

#: Parameter names read as the number of results, in order of preference.
MAX_RESULTS_NAMES = ("max_results", "count", "limit", "num_results")

#: Tavily `/search` body fields passed through to `router.search` when the
#: tool has a parameter of that name (`query` and `max_results` are
#: mapped separately). Anything else (`self`, `task_id`...) stays behind.
TAVILY_PARAMS = frozenset(
    {
        "auto_parameters",
        "chunks_per_source",
        "country",
        "days",
        "end_date",
        "exclude_domains",
        "include_answer",
        "include_domains",
        "include_favicon",
        "include_image_descriptions",
        "include_images",
        "include_raw_content",
        "include_usage",
        "search_depth",
        "start_date",
        "time_range",
        "topic",
    }
)


class RouterLike(Protocol):
    """What the guard needs from a router ([`searchfuse.Router`][searchfuse.Router] is one).

    - `search`/`asearch` run one search and return Tavily's JSON as a
      dict; they raise [`RateLimited`][searchfuse.errors.RateLimited] on a 429 (with
      `retry_after`), [`NoKeyAvailable`][searchfuse.errors.NoKeyAvailable],
      [`BadRequest`][searchfuse.errors.BadRequest] or
      [`SearchFailed`][searchfuse.errors.SearchFailed].
    - `call`/`acall` pick a key, run `fn(key)`, classify its outcome
      (a return is success; an exception is classified like an HTTP answer)
      and fail over to the next key where the reaction table says so.
    - `ensure_available` raises [`NoKeyAvailable`][searchfuse.errors.NoKeyAvailable] when no
      key can serve right now, without sending any request.
    """

    def search(self, query: str, *, max_results: int = 5, **params: Any) -> dict[str, Any]:
        """Search with the best key; Tavily's JSON as a dict."""
        ...

    async def asearch(self, query: str, *, max_results: int = 5, **params: Any) -> dict[str, Any]:
        """Async twin of [`search`][searchfuse.guard.RouterLike.search]."""
        ...

    def call(self, fn: Callable[[str], T]) -> T:
        """Run `fn(key)` with the key the router chooses, failing over on key errors."""
        ...

    async def acall(self, fn: Callable[[str], Awaitable[T]]) -> T:
        """Async twin of [`call`][searchfuse.guard.RouterLike.call]."""
        ...

    def ensure_available(self) -> None:
        """Raise [`NoKeyAvailable`][searchfuse.errors.NoKeyAvailable] if no key can serve now (no
        request)."""
        ...


def router_arguments(call: Call) -> dict[str, Any]:
    """The keyword arguments for `router.search(call.query, **...)`.

    `max_results` comes from the first of `MAX_RESULTS_NAMES` the tool
    has (omitted if it has none, so the router's default applies); every
    `TAVILY_PARAMS` field the call sets to something other than
    `None` passes through.
    """
    params = call.params
    arguments: dict[str, Any] = {}
    for name in MAX_RESULTS_NAMES:
        value = params.get(name)
        if value is not None:
            arguments["max_results"] = value
            break
    for name, value in params.items():
        if name in TAVILY_PARAMS and value is not None:
            arguments[name] = value
    return arguments
