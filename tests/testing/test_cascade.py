"""The cascade fixture: the burst of incident 1, with and without the guard."""

from __future__ import annotations

from typing import Any

from searchfuse import RateLimited, SearchRefused, guard
from searchfuse.testing import Cascade


def test_unguarded_failover_router_cascades_through_every_key(tavily_cascade: Cascade) -> None:
    router = tavily_cascade.router(on_429="failover")
    result = tavily_cascade.burst(router.search, calls=30)
    # Every key answered once, then 429 after 429: all four end in cooldown.
    assert result.keys_cooling == 4
    assert result.rate_limited > 0
    assert result.requests == result.rate_limited + 4
    assert result.served == 4
    assert all(s.state == "cooling" for s in router.status())


def test_default_router_touches_one_key(tavily_cascade: Cascade) -> None:
    router = tavily_cascade.router()
    result = tavily_cascade.burst(router.search, calls=30)
    assert result.keys_cooling <= 1
    assert [s.state for s in router.status()].count("cooling") <= 1
    assert result.errors(SearchRefused)


def test_guarded_tool_sends_one_request_and_refuses_the_rest(tavily_cascade: Cascade) -> None:
    router = tavily_cascade.router(on_429="failover")

    @guard(router=router)
    def web_search(query: str) -> Any:
        """Search the web."""

    result = tavily_cascade.burst(web_search, calls=30)
    assert result.requests == 1
    assert result.rate_limited == 0
    assert result.keys_cooling == 0
    assert result.served == 1
    refusals = result.errors(SearchRefused)
    assert len(refusals) == 29
    assert not result.errors(RateLimited)
    assert all("already used its 1 web search" in r.message for r in refusals)
