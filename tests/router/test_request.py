"""Router.request: Tavily's other POST endpoints with the same key selection and reactions."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from searchfuse import BadRequest, NoKeyAvailable, Router, SearchFailed
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


def _recording(seen: list[httpx.Request], cookie: bool = False) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        seen.append(request)
        if request.url.path == "/usage":
            return httpx.Response(404)
        headers = {"Set-Cookie": "session=abc; Path=/"} if cookie else {}
        if request.headers["Authorization"].endswith("0001"):
            return httpx.Response(503, headers=headers, json={"detail": {"error": "down"}})
        return httpx.Response(200, headers=headers, json={"results": [], "usage": {"credits": 1}})

    return httpx.MockTransport(handler)


def test_each_request_carries_its_own_key_and_the_body_checked_before_it() -> None:
    seen: list[httpx.Request] = []
    router = Router([K1, K2], transport=_recording(seen))
    result = router.search("café ☕ prices", search_depth="advanced", topic=None)
    searches = [r for r in seen if r.url.path == "/search"]
    assert [r.headers["Authorization"] for r in searches] == [f"Bearer {K1}", f"Bearer {K2}"]
    for request in searches:
        # One JSON text, UTF-8 as is, what httpx's json= would send.
        assert (
            request.content
            == (
                '{"query":"café ☕ prices","max_results":5,"search_depth":"advanced",'
                '"include_usage":true}'
            ).encode()
        )
        assert request.headers["Content-Type"] == "application/json"
        assert request.headers["Content-Length"] == str(len(request.content))
        assert request.headers["User-Agent"].startswith("python-httpx/")
    assert result["searchfuse"]["key"] == "tvly-dev-…0002"


def _nested(depth: int) -> list[Any]:
    top: list[Any] = []
    inner = top
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return top


def _cycle() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    ("query", "params", "says"),
    [
        ("", {}, "non-empty"),
        ("   ", {}, "non-empty"),
        ("q" * 401, {}, "at most 400"),
        ("half \ud83d an emoji", {}, "lone surrogate"),
        ("prices", {"include_domains": [float("nan")]}, "cannot be sent as JSON"),
        ("prices", {"include_domains": {"a"}}, "cannot be sent as JSON"),
        ("prices", {"include_domains": [object()]}, "cannot be sent as JSON"),
        ("prices", {"include_domains": _cycle()}, "cannot be sent as JSON"),
        ("prices", {"include_domains": _nested(100_000)}, "nested too deeply"),
    ],
)
def test_what_cannot_be_a_request_is_refused_as_not_sent(
    query: str, params: dict[str, Any], says: str
) -> None:
    seen: list[httpx.Request] = []
    router = Router([K1, K2], transport=_recording(seen))
    with pytest.raises(BadRequest, match=says) as info:
        router.search(query, **params)
    assert seen == []
    # Not "Tavily rejected": nothing was sent, so nothing was answered.
    assert str(info.value).startswith("the request was not sent: ")
    assert info.value.sent is False and info.value.status_code is None
    assert [s.state for s in router.status()] == ["available", "available"]


def test_no_cookie_one_answer_sets_rides_along_with_another_request() -> None:
    seen: list[httpx.Request] = []
    router = Router([K1, K2], transport=_recording(seen, cookie=True))
    router.search("first")
    router.search("second")
    searches = [r for r in seen if r.url.path == "/search"]
    assert len(searches) == 3  # 503 on the first key, then two on the second
    assert all("Cookie" not in r.headers for r in searches)
    assert len(router.http.client.cookies) == 0
    with pytest.raises(TypeError, match="no cookies"):
        router.http.client.cookies = {"session": "abc"}


async def test_no_cookie_rides_along_with_an_async_request() -> None:
    seen: list[httpx.Request] = []
    router = Router([K1, K2], async_transport=_recording(seen, cookie=True))
    await router.asearch("first")
    await router.asearch("second")
    searches = [r for r in seen if r.url.path == "/search"]
    assert len(searches) == 3
    assert all("Cookie" not in r.headers for r in searches)
    assert searches[-1].content == b'{"query":"second","max_results":5,"include_usage":true}'
    await router.aclose()


@pytest.mark.parametrize("status", [408, 425])
def test_a_4xx_about_the_moment_fails_over_like_a_5xx(status: int) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/usage":
            return httpx.Response(404)
        seen.append(request.headers["Authorization"][-4:])
        if len(seen) == 1:
            return httpx.Response(status, json={"detail": {"error": "try later"}})
        return httpx.Response(200, json={"results": [], "usage": {"credits": 1}})

    router = Router([K1, K2], transport=httpx.MockTransport(handler))
    assert router.search("q")["searchfuse"]["key"] == "tvly-dev-…0002"
    assert seen == ["0001", "0002"]


@pytest.mark.parametrize(("status", "says"), [(413, "413 Request Entity Too Large"), (402, "402")])
def test_a_4xx_about_the_request_says_which_status_tavily_gave(status: int, says: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/usage":
            return httpx.Response(404)
        return httpx.Response(status, json={"detail": {"error": "no"}})

    router = Router([K1, K2], transport=httpx.MockTransport(handler))
    with pytest.raises(BadRequest) as info:
        router.search("q")
    assert info.value.status_code == status and info.value.sent is True
    assert str(info.value).startswith(f"Tavily rejected the request ({says}")


def test_a_success_status_without_json_names_the_status() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/usage":
            return httpx.Response(404)
        return httpx.Response(204)

    router = Router([K1], transport=httpx.MockTransport(handler))
    with pytest.raises(SearchFailed, match="answered 204 with a body"):
        router.search("q")
