"""Drop-ins for tavily-python's `TavilyClient` and `AsyncTavilyClient`, routed over all keys.

Change one import and existing tavily-python code spreads its requests over
every configured key, with the router's quota-aware selection, reactions and
fail-over:

```python
# from tavily import TavilyClient
from searchfuse.tavily import TavilyClient

client = TavilyClient()            # keys from TAVILY_API_KEYS / TAVILY_API_KEY...
client.search("python 3.13 release date", max_results=3)
client.extract(["https://docs.python.org/3.13/whatsnew/3.13.html"])
```

`search`, `extract`, `crawl` and `map` take the same parameters and
return the same dicts as tavily-python's (`qna_search` too, returning Tavily's
answer) (plus a `"searchfuse"` entry saying
which key served). `api_key=` is accepted and ignored: the router's keys are
used (`router=`, else [`searchfuse.Router.from_env`][searchfuse.Router.from_env]).

Errors are what tavily-python code already catches: when tavily-python is
installed, a searchfuse error raised here is *also* an instance of the
matching `tavily.errors` class (a 429 is a `UsageLimitExceededError` and a
[`RateLimited`][searchfuse.errors.RateLimited]; keys that all failed authentication are an
`InvalidAPIKeyError` and a [`NoKeyAvailable`][searchfuse.errors.NoKeyAvailable]...).
tavily-python is imported here only, never by `import searchfuse`.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import os
import threading
import warnings
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, TypeVar

from searchfuse.errors import (
    BadRequest,
    BudgetExhausted,
    NoKeyAvailable,
    SearchFailed,
    SearchFuseError,
    SearchRefused,
)
from searchfuse.router import Router
from searchfuse.router._env import keys_in_env

__all__ = ["AsyncTavilyClient", "TavilyClient", "tavily_error"]

log = logging.getLogger("searchfuse.tavily")

P = ParamSpec("P")
R = TypeVar("R")
Result = dict[str, Any]

#: tavily-python's constructor options that mean nothing to a router; accepted
#: so constructor calls keep working, and ignored.
_IGNORED_OPTIONS = frozenset(
    {
        "proxies",
        "client_source",
        "project_id",
        "org_id",
        "session_id",
        "human_id",
        "client_name",
        "session",
        "client",
        "company_info_tags",
    }
)
#: Per-request options tavily-python sends as headers; a router sends none.
_HEADER_OPTIONS = ("project_id", "session_id", "human_id", "client_name")
#: tavily-python caps a search's HTTP timeout at two minutes.
MAX_SEARCH_TIMEOUT = 120.0

_noted = threading.Event()


_noted_given = threading.Event()


def _note_given_key() -> None:
    if not _noted_given.is_set():
        _noted_given.set()
        log.warning(
            "searchfuse.tavily: no key is set in the environment, so requests go over "
            "the api_key= given, alone; set TAVILY_API_KEYS to route over several keys"
        )


def _note_ignored_key() -> None:
    if not _noted.is_set():
        _noted.set()
        log.warning(
            "searchfuse.tavily: api_key= is ignored; requests are routed over the "
            "router's keys (TAVILY_API_KEYS, or router=...)"
        )


# -- errors ------------------------------------------------------------------------

#: tavily-python's error class for each HTTP status it distinguishes.
_BY_STATUS = {
    400: "BadRequestError",
    401: "InvalidAPIKeyError",
    403: "ForbiddenError",
    429: "UsageLimitExceededError",
    432: "ForbiddenError",
    433: "ForbiddenError",
}
#: For [`NoKeyAvailable`][searchfuse.errors.NoKeyAvailable]: its diagnosis verdict says which
#: status tavily-python would have seen from the one key it knows.
_BY_VERDICT = {
    "auth": "InvalidAPIKeyError",
    "exhausted": "ForbiddenError",
    "cooling": "UsageLimitExceededError",
    "burst": "UsageLimitExceededError",
}
_MIXED: dict[tuple[type[BaseException], type[BaseException]], type[BaseException]] = {}
_MIXED_LOCK = threading.Lock()


def _tavily_class(name: str) -> type[BaseException] | None:
    try:
        errors = importlib.import_module("tavily.errors")
    except ImportError:
        return None
    found = getattr(errors, name, None)
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


def _tavily_name(exc: SearchFuseError) -> str | None:
    if isinstance(exc, NoKeyAvailable):
        if exc.timed_out:
            # What tavily-python raises when its one key does not answer in time.
            return "TimeoutError"
        verdict = exc.diagnosis.verdict if exc.diagnosis is not None else None
        return _BY_VERDICT.get(verdict or "")
    if isinstance(exc, BudgetExhausted):
        # A spend budget is used up: Tavily's 432 "limit exceeded", as the gateway answers it.
        return _BY_STATUS[432]
    if isinstance(exc, SearchRefused):
        # Refused for a rate limit, a cooldown or pacing: what a 429 means.
        return "UsageLimitExceededError"
    if isinstance(exc, BadRequest):
        # Answered 400, or refused before sending for what Tavily would answer 400 to.
        return _BY_STATUS[400]
    if isinstance(exc, SearchFailed) and exc.status_code is not None:
        return _BY_STATUS.get(exc.status_code)
    return None


def tavily_error(exc: SearchFuseError) -> SearchFuseError:
    """`exc` as an instance of both its searchfuse class and tavily-python's matching one.

    Returns `exc` itself when there is no matching class or tavily-python is
    not installed. The copy has the same attributes (`retry_after`,
    `message`, `diagnosis`...), and `str()` is the same message.
    """
    name = _tavily_name(exc)
    base = _tavily_class(name) if name else None
    if base is None or isinstance(exc, base):
        return exc
    own = type(exc)
    with _MIXED_LOCK:
        mixed = _MIXED.get((own, base))
        if mixed is None:
            doc = f"{own.__doc__ or own.__name__}\n\nAlso a ``tavily.errors.{base.__name__}``."
            mixed = type(own.__name__, (own, base), {"__module__": __name__, "__doc__": doc})
            _MIXED[(own, base)] = mixed
    copy = mixed.__new__(mixed, *exc.args)
    copy.__dict__.update(exc.__dict__)
    assert isinstance(copy, SearchFuseError)
    return copy


# -- requests ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Request:
    """One tavily-python method call, as the router request it becomes."""

    endpoint: str
    body: dict[str, Any]
    timeout: float | None
    wants_usage: bool

    @classmethod
    def of(cls, method: str, arguments: dict[str, Any]) -> _Request:
        """The request for `method` called with `arguments` (its bound parameters)."""
        params = {k: v for k, v in arguments.items() if k not in ("self", "kwargs")}
        extra = dict(arguments.get("kwargs") or {})
        for name in _HEADER_OPTIONS:
            extra.pop(name, None)
        timeout = params.get("timeout")
        if method == "search":
            # A search's timeout bounds the HTTP call only; the other endpoints
            # also hand it to Tavily, which stops working on the request then.
            params.pop("timeout", None)
            if timeout is not None:
                timeout = min(float(timeout), MAX_SEARCH_TIMEOUT)
        body = {k: v for k, v in params.items() if v is not None}
        body.update(extra)
        return cls(
            f"/{method}",
            body,
            float(timeout) if timeout is not None else None,
            bool(body.get("include_usage")),
        )

    def finish(self, result: Result) -> Result:
        """Give the answer tavily-python's shape."""
        if not self.wants_usage:
            # The router asks for usage to count credits; the caller did not.
            result.pop("usage", None)
        if self.endpoint in ("/search", "/extract"):
            result.setdefault("results", [])
        if self.endpoint == "/extract":
            result.setdefault("failed_results", [])
        return result


def _qna(arguments: dict[str, Any]) -> dict[str, Any]:
    """tavily-python's `qna_search` arguments as the search it sends (with Tavily's answer)."""
    warnings.warn(
        "qna_search is deprecated in tavily-python; search(..., include_answer=True) "
        "and its 'answer' is the same request",
        DeprecationWarning,
        stacklevel=3,
    )
    return {
        **arguments,
        "include_answer": True,
        "include_raw_content": False,
        "include_images": False,
    }


def _answer(result: Result) -> str:
    answer = result.get("answer")
    return answer if isinstance(answer, str) else ""


#: tavily-python's methods the drop-ins do not route, and what to do instead.
_NOT_ROUTED = {
    "research": "a research task runs for minutes on Tavily's side and is polled",
    "get_research": "a research task runs for minutes on Tavily's side and is polled",
    "get_search_context": "it counts tokens with tiktoken's model files",
    "feedback": "it reports on a request, it does not search",
}


def _not_routed(client: object, name: str) -> AttributeError:
    why = _NOT_ROUTED.get(name)
    if why is None:
        return AttributeError(f"{type(client).__name__!r} object has no attribute {name!r}")
    return AttributeError(
        f"{type(client).__name__}.{name} is tavily-python's and is not routed by searchfuse "
        f"({why}); use tavily-python's own client for it"
    )


def _router_for(router: Router | None, api_key: str | None, options: dict[str, Any]) -> Router:
    unknown = sorted(set(options) - _IGNORED_OPTIONS - {"api_base_url"})
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}")
    base_url = options.get("api_base_url")
    base = {"base_url": base_url} if base_url else {}
    if router is not None:
        if base_url is not None:
            raise ValueError("api_base_url= and router= together: give base_url= to the Router")
    elif isinstance(api_key, str) and api_key.strip() and not keys_in_env(os.environ):
        # tavily-python's most common call, TavilyClient(api_key="tvly-..."), with
        # nothing else configured: the given key is the pool.
        _note_given_key()
        return Router.from_env({**os.environ, "TAVILY_API_KEY": api_key.strip()}, **base)
    if api_key is not None:
        _note_ignored_key()
    return router if router is not None else Router.from_env(**base)


class _Client:
    """What both clients share: the router, and closing what they opened."""

    def __init__(self, api_key: str | None, router: Router | None, options: dict[str, Any]):
        self._owns_router = router is None
        self.router = _router_for(router, api_key, options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(router={self.router!r})"

    if not TYPE_CHECKING:  # type checkers keep flagging unknown names

        def __getattr__(self, name: str) -> Any:
            raise _not_routed(self, name)


class TavilyClient(_Client):
    """tavily-python's `TavilyClient`, routed over all keys of a [`Router`][searchfuse.Router].

    Args:
        api_key: used when no key is set in the environment (the router then
            routes over this key alone, noted once in the log); otherwise
            ignored for the environment's keys (noted once).
        router: the router to use; default [`Router.from_env`][searchfuse.Router.from_env] (closed
            with this client).
        **options: tavily-python's other constructor options (`proxies`,
            `project_id`...) are accepted and ignored; `api_base_url` sets
            the default router's `base_url`.
    """

    def __init__(
        self, api_key: str | None = None, *, router: Router | None = None, **options: Any
    ) -> None:
        super().__init__(api_key, router, options)

    def _send(self, method: str, arguments: dict[str, Any]) -> Result:
        request = _Request.of(method, arguments)
        try:
            result = self.router.request(request.endpoint, request.body, timeout=request.timeout)
        except SearchFuseError as exc:
            raise tavily_error(exc) from exc.__cause__
        return request.finish(result)

    def search(
        self,
        /,
        query: str,
        search_depth: Literal["basic", "advanced", "fast", "ultra-fast"] | None = None,
        topic: Literal["general", "news", "finance"] | None = None,
        time_range: Literal["day", "week", "month", "year"] | None = None,
        start_date: str | None = None,
        end_date: str | None = None,
        days: int | None = None,
        max_age_hours: int | None = None,
        max_results: int | None = None,
        include_domains: Sequence[str] | None = None,
        exclude_domains: Sequence[str] | None = None,
        include_domains_mode: Literal["restrict", "prefer"] | None = None,
        include_answer: bool | Literal["basic", "advanced"] | None = None,
        include_raw_content: bool | Literal["markdown", "text"] | None = None,
        include_images: bool | None = None,
        timeout: float = 60,
        country: str | None = None,
        auto_parameters: bool | None = None,
        include_favicon: bool | None = None,
        include_usage: bool | None = None,
        exact_match: bool | None = None,
        fetch_timeout: float | None = None,
        cache_fallback: bool | None = None,
        language: str | None = None,
        filter_by_language: bool | None = None,
        **kwargs: Any,
    ) -> Result:
        """Search the web (`POST /search`); Tavily's answer, `results` always present."""
        return self._send("search", locals())

    def extract(
        self,
        /,
        urls: list[str] | str,
        include_images: bool | None = None,
        extract_depth: Literal["basic", "advanced"] | None = None,
        format: Literal["markdown", "text"] | None = None,
        timeout: float = 30,
        include_favicon: bool | None = None,
        include_usage: bool | None = None,
        query: str | None = None,
        chunks_per_source: int | None = None,
        **kwargs: Any,
    ) -> Result:
        """Extract pages (`POST /extract`); `results` and `failed_results` always present."""
        return self._send("extract", locals())

    def crawl(
        self,
        /,
        url: str,
        max_depth: int | None = None,
        max_breadth: int | None = None,
        limit: int | None = None,
        instructions: str | None = None,
        select_paths: Sequence[str] | None = None,
        select_domains: Sequence[str] | None = None,
        exclude_paths: Sequence[str] | None = None,
        exclude_domains: Sequence[str] | None = None,
        allow_external: bool | None = None,
        include_images: bool | None = None,
        extract_depth: Literal["basic", "advanced"] | None = None,
        format: Literal["markdown", "text"] | None = None,
        timeout: float = 150,
        include_favicon: bool | None = None,
        include_usage: bool | None = None,
        chunks_per_source: int | None = None,
        **kwargs: Any,
    ) -> Result:
        """Crawl a site from `url` (`POST /crawl`): `base_url` and the pages' `results`."""
        return self._send("crawl", locals())

    def map(
        self,
        /,
        url: str,
        max_depth: int | None = None,
        max_breadth: int | None = None,
        limit: int | None = None,
        instructions: str | None = None,
        select_paths: Sequence[str] | None = None,
        select_domains: Sequence[str] | None = None,
        exclude_paths: Sequence[str] | None = None,
        exclude_domains: Sequence[str] | None = None,
        allow_external: bool | None = None,
        include_images: bool | None = None,
        timeout: float = 150,
        include_usage: bool | None = None,
        **kwargs: Any,
    ) -> Result:
        """Map a site from `url` (`POST /map`): `base_url` and the URLs found."""
        return self._send("map", locals())

    def qna_search(
        self,
        /,
        query: str,
        search_depth: Literal["basic", "advanced", "fast", "ultra-fast"] = "advanced",
        topic: Literal["general", "news", "finance"] = "general",
        days: int = 7,
        max_results: int = 5,
        include_domains: Sequence[str] | None = None,
        exclude_domains: Sequence[str] | None = None,
        timeout: float = 60,
        country: str | None = None,
        include_favicon: bool | None = None,
        **kwargs: Any,
    ) -> str:
        """tavily-python's deprecated Q&A search: one search (advanced by default)
        with Tavily's answer; returns the answer (`""` without one)."""
        return _answer(self._send("search", _qna(locals())))

    def close(self) -> None:
        """Close the router's connections if this client made the router."""
        if self._owns_router:
            self.router.close()

    def __enter__(self) -> TavilyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _async_twin(
    sync: Callable[Concatenate[TavilyClient, P], R],
    send: str | None = None,
    prepare: Callable[[dict[str, Any]], dict[str, Any]] = dict,
    finish: Callable[[Result], Any] = lambda result: result,
) -> Callable[Concatenate[AsyncTavilyClient, P], Coroutine[Any, Any, R]]:
    """The `async` method with `sync`'s name, parameters, defaults and docstring:
    it sends its arguments, made ready by `prepare`, to the endpoint `send`
    (default: the method's name) and returns `finish` of the answer."""
    signature = inspect.signature(sync)
    endpoint = send or sync.__name__

    async def method(self: AsyncTavilyClient, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        return finish(await self._send(endpoint, prepare(dict(bound.arguments))))

    functools.update_wrapper(method, sync)
    return method


class AsyncTavilyClient(_Client):
    """tavily-python's `AsyncTavilyClient`, routed over all keys of a
    [`Router`][searchfuse.Router].

    The same constructor as [`TavilyClient`][searchfuse.tavily.TavilyClient]; `search`,
    `extract`, `crawl` and `map` are coroutines with tavily-python's parameters.
    """

    def __init__(
        self, api_key: str | None = None, *, router: Router | None = None, **options: Any
    ) -> None:
        super().__init__(api_key, router, options)

    async def _send(self, method: str, arguments: dict[str, Any]) -> Result:
        request = _Request.of(method, arguments)
        try:
            result = await self.router.arequest(
                request.endpoint, request.body, timeout=request.timeout
            )
        except SearchFuseError as exc:
            raise tavily_error(exc) from exc.__cause__
        return request.finish(result)

    search = _async_twin(TavilyClient.search)
    extract = _async_twin(TavilyClient.extract)
    map = _async_twin(TavilyClient.map)
    qna_search = _async_twin(TavilyClient.qna_search, "search", _qna, _answer)

    async def crawl(
        self,
        /,
        url: str,
        max_depth: int | None = None,
        max_breadth: int | None = None,
        limit: int | None = None,
        instructions: str | None = None,
        select_paths: Sequence[str] | None = None,
        select_domains: Sequence[str] | None = None,
        exclude_paths: Sequence[str] | None = None,
        exclude_domains: Sequence[str] | None = None,
        allow_external: bool | None = None,
        # tavily-python's async crawl has these two the other way round from its sync one.
        extract_depth: Literal["basic", "advanced"] | None = None,
        include_images: bool | None = None,
        format: Literal["markdown", "text"] | None = None,
        timeout: float = 150,
        include_favicon: bool | None = None,
        include_usage: bool | None = None,
        chunks_per_source: int | None = None,
        **kwargs: Any,
    ) -> Result:
        """Crawl a site from `url` (`POST /crawl`): `base_url` and the pages' `results`."""
        return await self._send("crawl", locals())

    async def close(self) -> None:
        """Close the router's connections if this client made the router."""
        if self._owns_router:
            await self.router.aclose()

    async def __aenter__(self) -> AsyncTavilyClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _mark_refusals(*classes: type) -> None:
    """The clients' methods tell `@guard` to refuse in tavily-python's errors, which their
    callers catch (the guard does not know this module)."""
    from searchfuse.guard.decorator import REFUSAL_MAP

    for cls in classes:
        for member in vars(cls).values():
            if inspect.isfunction(member):
                setattr(member, REFUSAL_MAP, tavily_error)


_mark_refusals(_Client, TavilyClient, AsyncTavilyClient)
