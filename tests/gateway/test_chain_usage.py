"""The gateway in front of a chain (Tavily, then Exa and Brave) on loopback: what a
Tavily client is told when another provider serves, and `/usage` in Tavily's unit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from searchfuse import Router
from searchfuse._serving import running
from searchfuse.gateway import build_app
from searchfuse.testing import FakeBrave, FakeClock, FakeExa, FakeTavily

TAVILY_KEY = "tvly-dev-test0001"
EXA_KEY = "0a1b2c3d-0000-4000-8000-00000000e5a1"
BRAVE_KEY = "BSAtest00000000000000000001"


@pytest.fixture
def chain(fake_clock: FakeClock) -> Iterator[tuple[str, FakeTavily, FakeExa, FakeBrave]]:
    tavily = FakeTavily(keys=[TAVILY_KEY], clock=fake_clock)
    exa = FakeExa(keys=[EXA_KEY], clock=fake_clock)
    brave = FakeBrave(keys=[BRAVE_KEY], clock=fake_clock)
    with tavily.serve() as t, exa.serve() as e, brave.serve() as b:
        router = Router(
            {"tavily": [TAVILY_KEY], "exa": [EXA_KEY], "brave": [BRAVE_KEY]},
            base_url=t,
            base_urls={"exa": e, "brave": b},
            clock=fake_clock,
            sleep=fake_clock.advance,
        )
        with running(build_app(router, cache="off")) as url:
            yield url, tavily, exa, brave
        router.close()


def _search(url: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{url}/search", json={"query": "q", **body})


def test_usage_counts_tavily_s_credits_not_another_provider_s_dollars_or_requests(
    chain: tuple[str, FakeTavily, FakeExa, FakeBrave],
) -> None:
    url, tavily, exa, brave = chain
    assert _search(url, search_depth="advanced").status_code == 200  # 2 Tavily credits
    tavily.revoke(TAVILY_KEY)
    for n in range(3):
        served = _search(url, query=f"q{n}")
        assert served.status_code == 200
        assert served.headers["X-Searchfuse-Served-By"] == "exa"
    assert len(exa.searches) == 3
    usage = httpx.get(f"{url}/usage").json()
    # Exa's searches cost dollars, not Tavily credits: they are not added to them.
    assert usage["key"]["usage"] == 2
    assert usage["account"]["plan_usage"] == 2
    assert usage["account"]["current_plan"] == "searchfuse pool of 1 key(s)"
    assert brave.searches == []
