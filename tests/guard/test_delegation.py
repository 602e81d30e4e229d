"""Delegation: guard(router=...) hands the search to a router; inject= runs the tool with its key.

The router here is the real :class:`searchfuse.Router` talking to the simulated
Tavily of :mod:`searchfuse.testing`, so these tests show what actually reaches
Tavily. The ``router`` fixture is the only place that builds one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from searchfuse.errors import CooldownActive, NoKeyAvailable, RateLimited, TurnLimitReached
from searchfuse.guard import guard, turn
from searchfuse.router.router import Router
from searchfuse.testing import FakeClock, FakeTavily
from tests.guard.helpers import http_error

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]


@pytest.fixture
def tavily(clock: FakeClock) -> FakeTavily:
    """The simulated Tavily, accepting the made-up test keys."""
    return FakeTavily(keys=KEYS, clock=clock)


@pytest.fixture
def router(tavily: FakeTavily, clock: FakeClock) -> Router:
    """A router over the test keys, served by the simulated Tavily, on the test clock."""
    return Router(
        KEYS, clock=clock, transport=tavily.transport(), async_transport=tavily.transport()
    )


def search_bodies(tavily: FakeTavily) -> list[dict[str, Any]]:
    """What Tavily received in /search bodies, without the router's own additions."""
    return [
        {k: v for k, v in (r.body or {}).items() if k != "include_usage"} for r in tavily.searches
    ]


# -- router.search ------------------------------------------------------------------------


def test_the_call_is_delegated_and_the_body_never_runs(router, tavily, clock):
    ran = []

    @guard(router=router, clock=clock)
    def web_search(query: str, max_results: int = 5) -> dict:
        ran.append(query)
        return {}

    result = web_search("python 3.13 release date", max_results=3)

    assert result["query"] == "python 3.13 release date"
    assert len(result["results"]) == 3
    assert ran == []
    assert search_bodies(tavily) == [{"query": "python 3.13 release date", "max_results": 3}]


@pytest.mark.parametrize("limit_name", ["max_results", "count", "limit", "num_results"])
def test_result_count_parameters_map_to_max_results(router, tavily, clock, limit_name):
    def tool(q: str, **kwargs: Any) -> dict:
        return {}

    web_search = guard(tool, router=router, clock=clock)
    web_search(q="rust 2024 edition", **{limit_name: 2})

    assert search_bodies(tavily) == [{"query": "rust 2024 edition", "max_results": 2}]


def test_tavily_parameters_pass_through_and_others_stay_behind(router, tavily, clock):
    @guard(router=router, clock=clock)
    def web_search(
        query: str,
        count: int = 4,
        topic: str = "news",
        include_domains: list[str] | None = None,
        time_range: str | None = None,
        task_id: str | None = None,
    ) -> dict:
        return {}

    web_search("tavily pricing", include_domains=["tavily.com"], task_id="t-1")

    assert search_bodies(tavily) == [
        {
            "query": "tavily pricing",
            "max_results": 4,
            "topic": "news",
            "include_domains": ["tavily.com"],
        }
    ]


def test_without_a_count_parameter_the_router_default_applies(router, tavily, clock):
    @guard(router=router, clock=clock)
    def web_search(query: str) -> dict:
        return {}

    web_search("q")

    assert search_bodies(tavily)[0]["max_results"] == 5


def test_adapt_gives_hermes_its_json_string(router, tavily, clock):
    @guard(router=router, adapt=json.dumps, clock=clock)
    def web_search_tool(query: str, limit: int = 5) -> str:
        return ""

    with turn():
        first = web_search_tool("hermes agent plugins", limit=2)
        again = web_search_tool("Hermes agent  plugins", limit=2)  # cache hit

    assert isinstance(first, str)
    assert json.loads(first)["query"] == "hermes agent plugins"
    assert again == first
    assert len(tavily.searches) == 1


def test_the_turn_budget_applies_before_the_router(router, tavily, clock):
    @guard(router=router, clock=clock)
    def web_search(query: str) -> dict:
        return {}

    with turn():
        web_search("a")
        with pytest.raises(TurnLimitReached):
            web_search("b")

    assert [r.query for r in tavily.searches] == ["a"]


def test_a_429_through_the_router_stops_and_cools_down(router, tavily, clock):
    @guard(router=router, clock=clock, per_turn=None)
    def web_search(query: str) -> dict:
        return {}

    tavily.fail_next(429, retry_after=7, path="/search")
    with pytest.raises(RateLimited) as stopped:
        web_search("a")
    assert stopped.value.retry_after == 7

    clock.advance(5)
    with pytest.raises(CooldownActive) as refused:
        web_search("b")
    assert refused.value.retry_after == 2

    clock.advance(2)
    web_search("c")
    assert [r.query for r in tavily.searches] == ["a", "c"]  # one key tried, no retry


def test_no_key_available_is_refused_without_a_request(tavily, clock):
    single = Router(KEYS[:1], clock=clock, transport=tavily.transport())

    @guard(router=single, clock=clock, per_turn=None, cooldown=0)
    def web_search(query: str) -> dict:
        return {}

    tavily.revoke(KEYS[0])
    with pytest.raises(NoKeyAvailable):
        web_search("a")  # 401: the key is parked for an hour
    searched = len(tavily.searches)

    with pytest.raises(NoKeyAvailable) as refused:
        web_search("b")

    assert len(tavily.searches) == searched  # refused before any request
    assert refused.value.message
    assert not web_search.guard_state().fuse_tripped  # the router's state is the truth


def test_no_key_refusal_can_be_returned_to_the_model(clock):
    class ParkedRouter:
        """A router whose only key cools down for 30 s more."""

        requests = 0

        def ensure_available(self) -> None:
            raise NoKeyAvailable({"tvly-dev-…0001": "rate limited"}, retry_after=30.0)

        def search(self, query: str, *, max_results: int = 5, **params: Any) -> dict:
            self.requests += 1
            return {}

    parked = ParkedRouter()

    @guard(router=parked, clock=clock, on_refusal="return")  # type: ignore[arg-type]
    def web_search(query: str) -> dict:
        return {}

    message = web_search("a")

    assert parked.requests == 0
    assert "no API key can serve right now" in message
    assert "30 seconds" in message
    assert "ask whether to wait" in message
    assert web_search.guard_state().turn_searches == 0  # no budget spent


async def test_async_tools_use_asearch(router, tavily, clock):
    @guard(router=router, clock=clock)
    async def web_search(query: str, max_results: int = 5) -> dict:
        return {}

    async with turn():
        result = await web_search("async search", max_results=1)
        with pytest.raises(TurnLimitReached):
            await web_search("another")

    assert result["query"] == "async search"
    assert search_bodies(tavily) == [{"query": "async search", "max_results": 1}]


# -- inject="api_key" -------------------------------------------------------------------


def test_inject_moves_to_the_next_key_after_a_401_from_the_tool(router, tavily, clock):
    tried: list[str] = []

    @guard(router=router, inject="api_key", clock=clock, per_turn=None, cache=False)
    def web_search(query: str, max_results: int = 5, *, api_key: str) -> dict:
        tried.append(api_key)
        if len(tried) == 1:
            raise http_error(401)  # this key was revoked
        return {"query": query, "served_with": api_key}

    result = web_search("q")

    assert len(tried) == 2
    assert tried[0] != tried[1]
    assert result == {"query": "q", "served_with": tried[1]}

    web_search("r")  # the revoked key is parked: straight to the good one
    assert tried[2] == tried[1]
    assert web_search.guard_state().searches == 2  # one search each, whatever the router tried


def test_inject_moves_on_after_an_exhausted_key(router, clock):
    tried: list[str] = []

    @guard(router=router, inject="api_key", clock=clock)
    def web_search(query: str, *, api_key: str) -> str:
        tried.append(api_key)
        if len(tried) == 1:
            raise http_error(432)  # plan limit exceeded
        return f"results for {query}"

    assert web_search("q") == "results for q"
    assert len(set(tried)) == 2


def test_inject_429_trips_the_fuse_and_tries_no_other_key(router, clock):
    tried: list[str] = []

    @guard(router=router, inject="api_key", clock=clock, per_turn=None)
    def web_search(query: str, *, api_key: str) -> str:
        tried.append(api_key)
        raise http_error(429, "9")

    with pytest.raises(RateLimited) as stopped:
        web_search("a")
    with pytest.raises(CooldownActive):
        web_search("b")

    assert len(tried) == 1
    assert stopped.value.retry_after == 9


def test_inject_errors_the_router_does_not_own_propagate(router, clock):
    @guard(router=router, inject="api_key", clock=clock)
    def web_search(query: str, *, api_key: str) -> str:
        raise http_error(400)

    with pytest.raises(Exception, match="400"):
        web_search("a")


def test_inject_keeps_the_key_out_of_the_cache_key_and_the_checklist(router, clock):
    seen = []

    @guard(
        router=router,
        inject="api_key",
        clock=clock,
        checklist=[lambda query, call: seen.append(dict(call.params))],
    )
    def web_search(query: str, max_results: int = 5, *, api_key: str) -> str:
        return query

    web_search("q")

    assert seen == [{"max_results": 5}]


async def test_inject_in_an_async_tool(router, clock):
    tried: list[str] = []

    @guard(router=router, inject="api_key", clock=clock)
    async def web_search(query: str, *, api_key: str) -> str:
        tried.append(api_key)
        if len(tried) == 1:
            raise http_error(401)
        return f"results for {query}"

    assert await web_search("q") == "results for q"
    assert len(set(tried)) == 2


def test_inject_needs_a_parameter_to_receive_the_key(router):
    with pytest.raises(TypeError, match="api_key"):

        @guard(router=router, inject="api_key")
        def web_search(query: str) -> str:
            return query


def test_a_function_says_how_its_callers_expect_refusals() -> None:
    # The guard knows no module by name: a function carrying REFUSAL_MAP (as the
    # tavily-python drop-in's methods do) has its refusals mapped, any other not.
    from searchfuse import SearchRefused, TurnLimitReached, guard, turn
    from searchfuse.guard.decorator import REFUSAL_MAP

    class ToolRefused(TurnLimitReached):
        pass

    mapped: list[str] = []

    def to_tool_error(refusal: SearchRefused) -> SearchRefused:
        mapped.append(type(refusal).__name__)
        return ToolRefused(refusal.message)

    def search(query: str) -> str:
        return query

    def plain(query: str) -> str:
        return query

    setattr(search, REFUSAL_MAP, to_tool_error)
    guarded, other = guard(search), guard(plain)
    with turn():
        assert guarded("a") == "a"
        with pytest.raises(ToolRefused):
            guarded("b")
    with turn():
        assert other("a") == "a"
        with pytest.raises(TurnLimitReached) as refused:
            other("b")
    assert not isinstance(refused.value, ToolRefused)
    assert mapped == ["TurnLimitReached"]
