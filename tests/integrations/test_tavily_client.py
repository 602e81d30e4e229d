"""searchfuse.tavily: tavily-python's clients routed over all keys, on the simulated Tavily."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import tavily
import tavily.errors

import searchfuse.tavily as facade
from searchfuse import (
    BadRequest,
    ConfigError,
    CooldownActive,
    NoKeyAvailable,
    RateLimited,
    Router,
    Throttled,
)
from searchfuse.router import KeyEntry
from searchfuse.tavily import AsyncTavilyClient, TavilyClient
from searchfuse.testing import TEST_KEYS, FakeClock, FakeTavily

K1, K2, K3, K4 = TEST_KEYS
METHODS = ("search", "extract", "crawl", "map")

#: One call of each method, with the first argument a real program would pass.
CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "search": (("python 3.13 release date",), {"max_results": 3}),
    "extract": ((["https://docs.example.com/a", "https://docs.example.com/b"],), {}),
    "crawl": (("https://docs.example.com",), {"max_depth": 1, "limit": 3}),
    "map": (("https://docs.example.com",), {"max_depth": 2, "limit": 8}),
}


def router_on(fake: FakeTavily, clock: FakeClock, **options: Any) -> Router:
    return Router(
        list(TEST_KEYS),
        clock=clock,
        transport=fake.transport(),
        async_transport=fake.transport(),
        **options,
    )


@pytest.fixture
def router(fake_tavily: FakeTavily, fake_clock: FakeClock) -> Router:
    return router_on(fake_tavily, fake_clock)


def call_sync(client: TavilyClient, method: str) -> dict[str, Any]:
    args, kwargs = CALLS[method]
    result: dict[str, Any] = getattr(client, method)(*args, **kwargs)
    return result


async def call_async(client: AsyncTavilyClient, method: str) -> dict[str, Any]:
    args, kwargs = CALLS[method]
    result: dict[str, Any] = await getattr(client, method)(*args, **kwargs)
    return result


Caller = Callable[[Router, str], Awaitable[dict[str, Any]]]


async def through_sync(router: Router, method: str) -> dict[str, Any]:
    return call_sync(TavilyClient(router=router), method)


async def through_async(router: Router, method: str) -> dict[str, Any]:
    return await call_async(AsyncTavilyClient(router=router), method)


both = pytest.mark.parametrize("through", [through_sync, through_async], ids=["sync", "async"])
every_method = pytest.mark.parametrize("method", METHODS)


def posts(fake: FakeTavily, method: str) -> list[tuple[str | None, int | None]]:
    """(key fingerprint, status) of each request to the method's endpoint."""
    return [(r.key_fingerprint, r.status) for r in fake.requests if r.path == f"/{method}"]


# -- the same surface as tavily-python ---------------------------------------------


def _parameters(function: Any) -> list[tuple[str, Any, Any]]:
    signature = inspect.signature(function)
    return [(p.name, p.kind, p.default) for p in signature.parameters.values() if p.name != "self"]


@pytest.mark.parametrize("method", [*METHODS, "qna_search"])
@pytest.mark.parametrize(
    ("ours", "theirs"),
    [(TavilyClient, tavily.TavilyClient), (AsyncTavilyClient, tavily.AsyncTavilyClient)],
    ids=["TavilyClient", "AsyncTavilyClient"],
)
def test_methods_take_tavily_pythons_parameters(method: str, ours: type, theirs: type) -> None:
    # A tavily-python release that adds, renames or re-defaults a parameter fails here.
    assert _parameters(getattr(ours, method)) == _parameters(getattr(theirs, method))
    assert inspect.iscoroutinefunction(getattr(ours, method)) == inspect.iscoroutinefunction(
        getattr(theirs, method)
    )


# -- every method, routed ---------------------------------------------------------


@both
@every_method
async def test_each_method_reaches_its_endpoint_with_one_key_and_keeps_the_shape(
    through: Caller, method: str, router: Router, fake_tavily: FakeTavily
) -> None:
    result = await through(router, method)
    ((key, status),) = posts(fake_tavily, method)
    assert (key, status) == (fake_tavily.fingerprint(K1), 200)
    assert result["searchfuse"] == {
        "served_by": "tavily",
        "key": "tvly-dev-…0001",
        "degraded": None,
    }
    # Usage was asked for the router's accounting, not by the caller: not handed back.
    assert "usage" not in result
    assert result["results"]
    if method == "extract":
        assert result["failed_results"] == []
    if method in ("crawl", "map"):
        assert result["base_url"] == "https://docs.example.com"


async def test_search_sends_tavily_pythons_body_and_returns_usage_when_asked(
    router: Router, fake_tavily: FakeTavily
) -> None:
    result = AsyncTavilyClient(router=router)
    answer = await result.search(
        "rust 2024 edition", search_depth="advanced", include_domains=["example.org"], timeout=300
    )
    (request,) = fake_tavily.searches
    assert request.body is not None
    assert request.body["search_depth"] == "advanced"
    assert request.body["include_domains"] == ["example.org"]
    # tavily-python sends the search timeout to nobody: it bounds the HTTP call only.
    assert "timeout" not in request.body and "topic" not in request.body
    assert all(r["url"].startswith("https://example.org/") for r in answer["results"])
    with_usage = TavilyClient(router=router).search("rust 2024", include_usage=True)
    assert with_usage["usage"] == {"credits": 1}


@pytest.mark.filterwarnings("ignore:qna_search is deprecated:DeprecationWarning")
@both
async def test_qna_search_is_one_advanced_search_that_returns_tavilys_answer(
    router: Router, fake_tavily: FakeTavily, through: Caller
) -> None:
    async def qna(router: Router, query: str) -> Any:
        if through is through_sync:
            return TavilyClient(router=router).qna_search(query, max_results=2)
        return await AsyncTavilyClient(router=router).qna_search(query, max_results=2)

    answer = await qna(router, "python 3.13 release date")
    (request,) = fake_tavily.searches
    assert request.body is not None
    assert request.body["search_depth"] == "advanced"
    assert request.body["include_answer"] is True
    assert request.body["max_results"] == 2 and request.body["days"] == 7
    assert request.body["include_raw_content"] is False
    assert isinstance(answer, str) and answer.startswith("Simulated answer to")
    assert sum(s.local_credits for s in router.status()) == 2  # advanced: 2 credits


def test_qna_search_warns_as_tavily_python_does(router: Router) -> None:
    with pytest.warns(DeprecationWarning, match="qna_search is deprecated") as warned:
        TavilyClient(router=router).qna_search("q")
    assert warned[0].filename == __file__  # points at the caller's line


@pytest.mark.parametrize("client", [TavilyClient, AsyncTavilyClient])
@pytest.mark.parametrize("name", ["research", "get_research", "get_search_context", "feedback"])
def test_tavily_pythons_other_methods_say_they_are_not_routed(
    router: Router, fake_tavily: FakeTavily, client: type, name: str
) -> None:
    with pytest.raises(AttributeError, match=f"{name} is tavily-python's and is not routed"):
        getattr(client(router=router), name)
    assert hasattr(getattr(tavily, client.__name__), name)  # tavily-python has it
    with pytest.raises(AttributeError, match="has no attribute 'serach'"):
        client(router=router).serach  # noqa: B018
    assert fake_tavily.requests == []


def test_extract_crawl_and_map_send_their_timeout_and_count_credits(
    router: Router, fake_tavily: FakeTavily
) -> None:
    client = TavilyClient(router=router)
    client.extract("https://docs.example.com/one", extract_depth="advanced")
    client.crawl("https://docs.example.com", limit=12, max_depth=2)
    client.map("docs.example.com", instructions="only docs", limit=10, max_depth=2)
    extract, crawl, map_ = (r for r in fake_tavily.requests if r.path != "/usage")
    assert (extract.body or {})["timeout"] == 30
    assert (crawl.body or {})["timeout"] == 150 and (map_.body or {})["timeout"] == 150
    # advanced extract of 1 URL: 2; crawl of 12 pages: map 2 + extract 3; map with instructions: 2.
    assert [extract.credits, crawl.credits, map_.credits] == [2, 5, 2]
    (served,) = {r.key_fingerprint for r in (extract, crawl, map_)}
    usage = fake_tavily.usage_of(next(k for k in TEST_KEYS if fake_tavily.fingerprint(k) == served))
    assert usage["key"]["extract_usage"] == 2 and usage["key"]["crawl_usage"] == 5
    assert usage["key"]["map_usage"] == 2


def test_extract_reports_urls_it_could_not_fetch(router: Router) -> None:
    result = TavilyClient(router=router).extract(["https://example.com/ok", "not a url"])
    assert [r["url"] for r in result["results"]] == ["https://example.com/ok"]
    assert result["failed_results"] == [{"url": "not a url", "error": "Failed to fetch url"}]


# -- fail-over and the hard stop ------------------------------------------------------


@both
@every_method
async def test_a_401_fails_over_to_the_next_key(
    through: Caller, method: str, router: Router, fake_tavily: FakeTavily
) -> None:
    # The key passes its /usage check, then the endpoint refuses it.
    fake_tavily.fail_next(401, key=K1, path=f"/{method}")
    result = await through(router, method)
    assert posts(fake_tavily, method) == [
        (fake_tavily.fingerprint(K1), 401),
        (fake_tavily.fingerprint(K2), 200),
    ]
    assert result["searchfuse"]["key"] == "tvly-dev-…0002"
    assert router.status()[0].cooldown_reason == "auth"


@both
@every_method
async def test_a_429_stops_at_once_and_the_next_call_sends_nothing(
    through: Caller, method: str, router: Router, fake_tavily: FakeTavily
) -> None:
    fake_tavily.fail_next(429, retry_after=30, path=f"/{method}")
    with pytest.raises(tavily.UsageLimitExceededError) as stopped:
        await through(router, method)
    assert isinstance(stopped.value, RateLimited)
    assert stopped.value.retry_after == 30
    assert posts(fake_tavily, method) == [(fake_tavily.fingerprint(K1), 429)]

    with pytest.raises(tavily.UsageLimitExceededError) as refused:
        await through(router, method)
    assert isinstance(refused.value, CooldownActive)
    assert len(posts(fake_tavily, method)) == 1  # refused locally: no request


@both
async def test_every_key_revoked_is_an_invalid_api_key_error(
    through: Caller, router: Router, fake_tavily: FakeTavily
) -> None:
    for key in TEST_KEYS:
        fake_tavily.revoke(key)
    with pytest.raises(tavily.InvalidAPIKeyError) as failed:
        await through(router, "extract")
    assert isinstance(failed.value, NoKeyAvailable)
    assert "tvly-dev-test" not in str(failed.value)  # masked keys only


def test_every_key_spent_is_a_forbidden_error(router: Router, fake_tavily: FakeTavily) -> None:
    for key in TEST_KEYS:
        fake_tavily.set_limit(key, 10)
        fake_tavily.set_usage(key, usage=10)
    with pytest.raises(tavily.errors.ForbiddenError) as failed:
        TavilyClient(router=router).search("q")
    assert isinstance(failed.value, NoKeyAvailable)


def test_a_400_is_a_bad_request_error_and_no_key_is_penalised(
    router: Router, fake_tavily: FakeTavily
) -> None:
    too_many = [f"https://example.com/{i}" for i in range(25)]
    with pytest.raises(tavily.BadRequestError) as failed:
        TavilyClient(router=router).extract(too_many)
    assert isinstance(failed.value, BadRequest)
    assert "at most 20" in str(failed.value)
    assert posts(fake_tavily, "extract") == [(fake_tavily.fingerprint(K1), 400)]
    assert all(s.cooldown_reason is None for s in router.status())


def test_a_query_refused_before_sending_is_a_bad_request_error_too(
    router: Router, fake_tavily: FakeTavily
) -> None:
    # tavily-python's code catches BadRequestError for a bad query; searchfuse
    # refuses it without a request, and the same handler still catches it.
    with pytest.raises(tavily.BadRequestError) as failed:
        TavilyClient(router=router).search("   ")
    assert isinstance(failed.value, BadRequest) and failed.value.sent is False
    assert "not sent" in str(failed.value)
    assert fake_tavily.requests == []


def test_tavily_python_style_handlers_catch_the_routed_errors(
    router: Router, fake_tavily: FakeTavily
) -> None:
    # What existing code looks like: it knows tavily-python's errors only.
    fake_tavily.fail_next(429, path="/search")
    client = TavilyClient(router=router)
    told = ""
    try:
        client.search("q")
    except tavily.UsageLimitExceededError as exc:
        told = str(exc)
    assert "429" in told and "Do not retry" in told


# -- construction ---------------------------------------------------------------------


def test_api_key_is_ignored_with_one_note(
    router: Router, fake_tavily: FakeTavily, caplog: pytest.LogCaptureFixture, monkeypatch: Any
) -> None:
    monkeypatch.setattr(facade, "_noted", type(facade._noted)())
    with caplog.at_level(logging.WARNING, logger="searchfuse.tavily"):
        TavilyClient("tvly-dev-test0009", router=router).search("q")
        AsyncTavilyClient(api_key="tvly-dev-test0009", router=router, project_id="p1")
    notes = [r for r in caplog.records if "api_key= is ignored" in r.getMessage()]
    assert len(notes) == 1
    (request,) = fake_tavily.searches
    assert request.key_fingerprint == fake_tavily.fingerprint(K1)  # a router key, not the given one


def _no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("TAVILY_", "EXA_", "BRAVE_", "SERPER_", "SEARXNG_", "SEARCHFUSE_")):
            monkeypatch.delenv(name)


def test_the_given_api_key_serves_when_nothing_else_is_configured(
    fake_tavily: FakeTavily,
    tavily_server: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _no_keys_in_env(monkeypatch)
    monkeypatch.setattr(facade, "_noted_given", type(facade._noted_given)())
    with caplog.at_level(logging.WARNING, logger="searchfuse.tavily"):
        with TavilyClient(api_key=K3, api_base_url=tavily_server) as client:
            client.search("q")

        async def run() -> None:
            async with AsyncTavilyClient(K3, api_base_url=tavily_server) as client:
                await client.search("q2")

        asyncio.run(run())
    assert [r.key_fingerprint for r in fake_tavily.searches] == [fake_tavily.fingerprint(K3)] * 2
    notes = [r.getMessage() for r in caplog.records if "api_key= given" in r.getMessage()]
    assert len(notes) == 1 and K3 not in notes[0]


@pytest.mark.parametrize("api_key", [None, "", "   "])
def test_no_key_anywhere_is_still_a_config_error(
    api_key: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_keys_in_env(monkeypatch)
    with pytest.raises(ConfigError, match="TAVILY_API_KEYS"):
        TavilyClient(api_key=api_key)


def test_a_malformed_key_variable_is_not_covered_by_the_given_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _no_keys_in_env(monkeypatch)
    monkeypatch.setenv("TAVILY_API_KEYS", "  ")
    with pytest.raises(ConfigError, match="white space"):
        TavilyClient(api_key=K3)


def test_without_a_router_the_keys_come_from_the_environment(
    fake_tavily: FakeTavily, tavily_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAVILY_API_KEYS", f"{K3},{K4}")
    with TavilyClient(api_base_url=tavily_server) as client:
        result = client.map("https://docs.example.com", limit=2)
    assert len(result["results"]) == 2
    (request,) = [r for r in fake_tavily.requests if r.path == "/map"]
    assert request.key_fingerprint in {fake_tavily.fingerprint(K3), fake_tavily.fingerprint(K4)}


def test_unknown_options_are_a_type_error(router: Router) -> None:
    with pytest.raises(TypeError, match="api_kee"):
        TavilyClient(router=router, api_kee="x")
    with pytest.raises(ValueError, match="base_url"):
        TavilyClient(router=router, api_base_url="http://127.0.0.1:9")


def test_timeout_is_tavily_pythons_a_long_crawl_waits_and_a_slow_search_fails_over(
    router: Router, fake_tavily: FakeTavily
) -> None:
    client = TavilyClient(router=router)
    # The router's own read timeout is 30 s and its call deadline 60 s; a crawl
    # allows 150 s by default.
    fake_tavily.slow_next(90, path="/crawl")
    assert client.crawl("https://docs.example.com", limit=2)["results"]
    assert posts(fake_tavily, "crawl") == [(fake_tavily.fingerprint(K1), 200)]  # waited for it
    fake_tavily.slow_next(25, path="/search")
    result = client.search("q", timeout=20)
    slow, served = fake_tavily.searches  # the first answer came after the 20 s: next key
    assert slow.key_fingerprint != served.key_fingerprint
    reasons = {s.fingerprint: s.cooldown_reason for s in router.status()}
    assert reasons[slow.key_fingerprint] == "upstream"
    assert reasons[served.key_fingerprint] is None and result["results"]


@both
async def test_every_key_too_slow_is_a_timeout_error(
    router: Router, fake_tavily: FakeTavily, through: Caller
) -> None:
    # tavily-python raises its TimeoutError when its one key does not answer
    # within `timeout`; routed, that is when none of the keys tried does.
    fake_tavily.slow_next(25, times=None, path="/search")
    with pytest.raises(tavily.errors.TimeoutError) as failed:
        if through is through_sync:
            TavilyClient(router=router).search("q", timeout=20)
        else:
            await AsyncTavilyClient(router=router).search("q", timeout=20)
    assert isinstance(failed.value, NoKeyAvailable) and failed.value.timed_out
    assert len(posts(fake_tavily, "search")) == 3  # at most three keys a call


def test_keys_failing_in_other_ways_are_not_a_timeout_error(
    router: Router, fake_tavily: FakeTavily
) -> None:
    fake_tavily.slow_next(25, path="/search")  # the first key is slow...
    fake_tavily.fail_next(503, times=None, path="/search")  # ...the others are down
    with pytest.raises(NoKeyAvailable) as failed:
        TavilyClient(router=router).search("q", timeout=20)
    reasons = list(failed.value.reasons.values())
    assert sum(r.startswith("no answer") for r in reasons) == 1
    assert sum(r.startswith("503") for r in reasons) == 2
    assert not failed.value.timed_out
    assert not isinstance(failed.value, tavily.errors.TimeoutError)


def test_a_request_pacing_holds_back_is_a_usage_limit_error_with_nothing_sent(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    # One key at one request a minute, and no waiting for room: the second
    # request would be a 429, so searchfuse refuses it without sending it.
    router = Router(
        [KeyEntry(K1, rpm=1)],
        clock=fake_clock,
        transport=fake_tavily.transport(),
        max_wait=0,
    )
    client = TavilyClient(router=router)
    client.map("https://docs.example.com", limit=2)
    with pytest.raises(tavily.UsageLimitExceededError) as held:
        client.extract("https://docs.example.com/a")
    assert isinstance(held.value, Throttled)
    assert held.value.retry_after is not None and held.value.retry_after > 0
    assert [r.path for r in fake_tavily.requests if r.path != "/usage"] == ["/map"]


def test_the_guard_around_the_drop_in_raises_tavily_python_s_errors_too(
    fake_tavily: FakeTavily, fake_clock: FakeClock, router: Router
) -> None:
    from searchfuse import TurnLimitReached, guard, turn

    client = TavilyClient(router=router)
    search = guard(client.search, clock=fake_clock)
    fake_tavily.fail_next(429, retry_after=9, path="/search")

    caught: list[BaseException] = []
    for query in ("a", "b"):
        try:
            search(query)
        except tavily.UsageLimitExceededError as exc:  # what tavily-python callers catch
            caught.append(exc)
    assert [type(exc).__name__ for exc in caught] == ["RateLimited", "CooldownActive"]
    assert isinstance(caught[1], CooldownActive)
    assert caught[1].retry_after == 9

    fake_clock.advance(10)
    with turn():
        assert search("c")["query"] == "c"
        with pytest.raises(tavily.UsageLimitExceededError) as refused:
            search("d")
    assert isinstance(refused.value, TurnLimitReached)
    assert [r.query for r in fake_tavily.searches] == ["a", "c"]

    async_client = AsyncTavilyClient(router=router)
    asearch = guard(async_client.search, clock=fake_clock)
    fake_clock.advance(10)

    async def twice() -> None:
        async with turn():
            await asearch("e")
            await asearch("f")

    with pytest.raises(tavily.UsageLimitExceededError):
        asyncio.run(twice())
