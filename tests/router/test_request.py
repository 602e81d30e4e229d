"""Router.request: Tavily's other POST endpoints with the same key selection and reactions."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from searchfuse import NoKeyAvailable, Router
from searchfuse.testing import TEST_KEYS, FakeClock, FakeTavily

K1, K2, K3, K4 = TEST_KEYS


def router_on(fake: FakeTavily, clock: FakeClock, **options: Any) -> Router:
    return Router(
        [K1, K2],
        clock=clock,
        transport=fake.transport(),
        async_transport=fake.transport(),
        **options,
    )


def test_request_posts_to_the_endpoint_and_counts_the_credits_tavily_reports(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    router = router_on(fake_tavily, fake_clock)
    result = router.request("/extract", {"urls": ["https://example.com/a"], "query": None})
    (extract,) = [r for r in fake_tavily.requests if r.path == "/extract"]
    assert extract.body == {"urls": ["https://example.com/a"], "include_usage": True}
    assert result["usage"] == {"credits": 1}
    assert result["searchfuse"]["key"] == "tvly-dev-…0001"


async def test_arequest_fails_over_on_a_5xx_like_a_search(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    router = router_on(fake_tavily, fake_clock)
    fake_tavily.fail_next(503, key=K1, path="/map")
    result = await router.arequest("/map", {"url": "https://example.com"})
    statuses = [r.status for r in fake_tavily.requests if r.path == "/map"]
    assert statuses == [503, 200]
    assert result["searchfuse"]["key"] == "tvly-dev-…0002"


def test_request_refuses_unknown_endpoints_and_keys_in_the_body(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    router = router_on(fake_tavily, fake_clock)
    with pytest.raises(ValueError, match="/research"):
        router.request("/research", {"input": "x"})
    with pytest.raises(ValueError, match="timeout"):
        router.request("/map", {"url": "https://example.com"}, timeout=0)
    with pytest.raises(TypeError, match="api_key"):
        router.request("/crawl", {"url": "https://example.com", "api_key": "tvly-dev-test0009"})
    assert fake_tavily.requests == []


def test_the_fallback_stands_in_for_search_only(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    router = router_on(fake_tavily, fake_clock, fallback=lambda query, **_: {"results": []})
    fake_tavily.revoke(K1)
    fake_tavily.revoke(K2)
    assert router.search("q")["searchfuse"]["served_by"] == "fallback"
    with pytest.raises(NoKeyAvailable):
        router.request("/crawl", {"url": "https://example.com"})


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("https://tavily.example", "https://tavily.example/search"),
        ("https://proxy.example/tavily", "https://proxy.example/tavily/search"),
        ("https://proxy.example/tavily/", "https://proxy.example/tavily/search"),
    ],
)
def test_each_endpoint_goes_to_the_base_url_joined_with_its_path(base: str, expected: str) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"results": []})

    router = Router(["tvly-dev-test0001"], base_url=base, transport=httpx.MockTransport(handler))
    router.search("first")
    router.search("second")
    router.request("/extract", {"urls": ["https://example.com"]})
    assert [u for u in seen if not u.endswith("/usage")] == [
        expected,
        expected,
        expected.replace("/search", "/extract"),
    ]
