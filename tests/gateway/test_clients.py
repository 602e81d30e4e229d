"""tavily-python's own clients, pointed at the gateway: what they get back, what went upstream."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from tavily import AsyncTavilyClient, TavilyClient
from tavily.errors import (
    BadRequestError,
    ForbiddenError,
    InvalidAPIKeyError,
    UsageLimitExceededError,
)

from searchfuse.testing import TEST_KEYS, FakeTavily

from .conftest import ALICE, BOB, Gateway

MakeGateway = Callable[..., Gateway]
POOL = {TEST_KEYS[0], TEST_KEYS[1]}


def fingerprints(gw: Gateway) -> set[str | None]:
    return {r.key_fingerprint for r in gw.fake.requests}


def pool_fingerprints() -> set[str | None]:
    return {FakeTavily.fingerprint(key) for key in POOL}


def assert_only_pool_keys_upstream(gw: Gateway) -> None:
    """Every request upstream carried a pool key; no client token went anywhere upstream."""
    assert gw.fake.requests, "nothing reached the simulator"
    assert fingerprints(gw) <= pool_fingerprints()
    for text in gw.upstream.texts():
        assert ALICE not in text and BOB not in text
        assert '"api_key"' not in text


def test_search_comes_back_as_tavily_sends_it_and_only_pool_keys_go_upstream(
    make_gateway: MakeGateway,
) -> None:
    gw = make_gateway()
    client = TavilyClient(api_key=ALICE, api_base_url=gw.url)
    result = client.search("python 3.13 release date", max_results=3)
    assert len(result["results"]) == 3
    assert {"title", "url", "content", "score"} <= set(result["results"][0])
    assert result["query"] == "python 3.13 release date"
    # Nothing of searchfuse's own, and no usage the client did not ask for.
    assert "searchfuse" not in result
    assert "usage" not in result
    assert gw.searches == 1
    assert_only_pool_keys_upstream(gw)


def test_usage_is_in_the_answer_when_the_client_asks_for_it(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    client = TavilyClient(api_key=ALICE, api_base_url=gw.url)
    result = client.search("python", search_depth="advanced", include_usage=True)
    assert result["usage"] == {"credits": 2}


def test_extract_crawl_and_map_are_served_through_the_pool(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    client = TavilyClient(api_key=BOB, api_base_url=gw.url)
    extracted = client.extract(["https://example.com/a", "https://example.org/b"])
    assert [r["url"] for r in extracted["results"]] == [
        "https://example.com/a",
        "https://example.org/b",
    ]
    crawled = client.crawl("https://example.com", max_depth=1, limit=3)
    assert crawled["results"] and "searchfuse" not in crawled
    mapped = client.map("https://example.com", max_depth=1, limit=3)
    assert mapped["results"]
    paths = [r.path for r in gw.fake.requests if r.path != "/usage"]
    assert paths == ["/extract", "/crawl", "/map"]
    assert_only_pool_keys_upstream(gw)


def test_an_unknown_client_token_is_invalid_api_key_and_nothing_goes_upstream(
    make_gateway: MakeGateway,
) -> None:
    gw = make_gateway()
    for token in ("client-token-mallory", TEST_KEYS[0]):
        with pytest.raises(InvalidAPIKeyError, match="missing or invalid API key"):
            TavilyClient(api_key=token, api_base_url=gw.url).search("python")
    # tavily-python without a key sends no Authorization at all.
    with pytest.raises(InvalidAPIKeyError):
        TavilyClient(api_base_url=gw.url).search("python")
    assert gw.fake.requests == []


def test_a_429_upstream_is_usage_limit_exceeded_and_the_hold_sends_nothing_more(
    make_gateway: MakeGateway,
) -> None:
    gw = make_gateway()
    gw.fake.fail_next(429, retry_after=30, path="/search")
    client = TavilyClient(api_key=ALICE, api_base_url=gw.url)
    with pytest.raises(UsageLimitExceededError, match="answered 429"):
        client.search("first")
    with pytest.raises(UsageLimitExceededError, match="cooling down"):
        client.search("second")
    # Bob is refused too: the hold is the pool's, not alice's.
    with pytest.raises(UsageLimitExceededError):
        TavilyClient(api_key=BOB, api_base_url=gw.url).search("third")
    assert gw.searches == 1
    answer = httpx.post(
        f"{gw.url}/search", json={"query": "fourth"}, headers={"Authorization": f"Bearer {BOB}"}
    )
    assert answer.status_code == 429
    assert 1 <= int(answer.headers["Retry-After"]) <= 30
    assert gw.searches == 1


def test_bad_requests_are_bad_request_errors(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    client = TavilyClient(api_key=ALICE, api_base_url=gw.url)
    # Refused before sending: Tavily's 400-character bound.
    with pytest.raises(BadRequestError, match="at most 400"):
        client.search("q" * 401)
    assert gw.searches == 0
    # Refused before sending too: max_results beyond Tavily's 20.
    with pytest.raises(BadRequestError, match="max_results"):
        client.search("python", max_results=50)
    assert gw.searches == 0


def test_an_exhausted_pool_is_tavilys_432(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    for key in POOL:
        gw.fake.set_usage(key, plan_usage=1000)  # each account's whole plan is spent
    client = TavilyClient(api_key=ALICE, api_base_url=gw.url)
    for query in ("python", "python again"):
        with pytest.raises(ForbiddenError):
            client.search(query)
    answer = httpx.post(
        f"{gw.url}/search", json={"query": "raw"}, headers={"Authorization": f"Bearer {ALICE}"}
    )
    assert answer.status_code == 432
    assert answer.json()["detail"]["error"].startswith(
        "Search refused: every search API key is out of credits"
    )
    # One key's figures said so at once; the other said so with its 432: nothing more is sent.
    assert [(r.path, r.status) for r in gw.fake.requests] == [("/usage", 200), ("/search", 432)]
    with pytest.raises(ForbiddenError):
        client.search("once more")
    assert gw.searches == 1


async def test_async_client_gets_results_and_the_same_errors(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    client = AsyncTavilyClient(api_key=ALICE, api_base_url=gw.url)
    result = await client.search("asyncio task groups", max_results=2)
    assert len(result["results"]) == 2
    with pytest.raises(BadRequestError):
        await client.search("x" * 401)
    with pytest.raises(InvalidAPIKeyError):
        await AsyncTavilyClient(api_key="client-token-mallory", api_base_url=gw.url).search("x")
    gw.fake.fail_next(429, retry_after=5, path="/search")
    with pytest.raises(UsageLimitExceededError):
        await client.search("rate limited")
    with pytest.raises(UsageLimitExceededError):
        await client.search("held")
    assert gw.searches == 2
    assert_only_pool_keys_upstream(gw)


def test_an_api_key_in_the_body_identifies_the_client_and_stays_at_the_gateway(
    make_gateway: MakeGateway,
) -> None:
    gw = make_gateway()
    # What old tavily-python versions send: the key in the JSON body.
    ok = httpx.post(f"{gw.url}/search", json={"api_key": ALICE, "query": "old client"})
    assert ok.status_code == 200, ok.text
    bad = httpx.post(f"{gw.url}/search", json={"api_key": "client-token-mallory", "query": "x"})
    assert bad.status_code == 401
    assert bad.json() == {"detail": {"error": "Unauthorized: missing or invalid API key."}}
    assert gw.searches == 1
    assert_only_pool_keys_upstream(gw)


def test_on_loopback_without_tokens_any_bearer_is_served(make_gateway: MakeGateway) -> None:
    gw = make_gateway(tokens=None)
    assert TavilyClient(api_key="whatever", api_base_url=gw.url).search("a")["results"]
    assert TavilyClient(api_base_url=gw.url).search("b")["results"]
    assert gw.searches == 2
    for text in gw.upstream.texts():
        assert "whatever" not in text


def test_per_turn_counts_each_session_and_refuses_without_retry_after(
    make_gateway: MakeGateway,
) -> None:
    gw = make_gateway(per_turn=1, min_interval=2.0)
    s1 = TavilyClient(api_key=ALICE, api_base_url=gw.url, session_id="conversation-1")
    s2 = TavilyClient(api_key=ALICE, api_base_url=gw.url, session_id="conversation-2")
    assert s1.search("first question")["results"]
    with pytest.raises(UsageLimitExceededError, match="already used its 1 web search"):
        s1.search("second question")
    # Another session has a turn of its own.
    assert s2.search("another question")["results"]
    raw = httpx.post(
        f"{gw.url}/search",
        json={"query": "third question"},
        headers={"Authorization": f"Bearer {ALICE}", "X-Session-Id": "conversation-1"},
    )
    assert raw.status_code == 429
    assert "Retry-After" not in raw.headers
    # After min_interval of quiet the session's next call is a new turn.
    gw.clock.advance(2.5)
    assert s1.search("next turn")["results"]
    assert [r.query for r in gw.fake.searches] == [
        "first question",
        "another question",
        "next turn",
    ]


def test_without_per_turn_a_session_may_search_as_often_as_it_likes(
    make_gateway: MakeGateway,
) -> None:
    gw = make_gateway()
    client = TavilyClient(api_key=ALICE, api_base_url=gw.url, session_id="s")
    for n in range(4):
        client.search(f"question {n}")
    assert gw.searches == 4


def test_a_repeated_search_comes_from_the_cache_at_no_cost(make_gateway: MakeGateway) -> None:
    gw = make_gateway(cache="memory")
    headers = {"Authorization": f"Bearer {ALICE}"}
    body = {"query": "Python  3.13 release", "include_usage": True}
    first = httpx.post(f"{gw.url}/search", json=body, headers=headers)
    again = httpx.post(
        f"{gw.url}/search", json={**body, "query": "python 3.13 release"}, headers=headers
    )
    assert first.headers["X-Searchfuse-Served-By"] == "tavily"
    assert again.headers["X-Searchfuse-Served-By"] == "cache"
    assert again.json()["results"] == first.json()["results"]
    assert first.json()["usage"] == {"credits": 1}
    assert again.json()["usage"] == {"credits": 0}
    assert gw.searches == 1


def test_one_clients_session_id_does_not_spend_another_clients_turn(
    make_gateway: MakeGateway,
) -> None:
    gw = make_gateway(per_turn=1)
    alice = TavilyClient(api_key=ALICE, api_base_url=gw.url, session_id="shared-name")
    bob = TavilyClient(api_key=BOB, api_base_url=gw.url, session_id="shared-name")
    assert alice.search("alice asks")["results"]
    assert bob.search("bob asks")["results"]
    with pytest.raises(UsageLimitExceededError):
        alice.search("alice again")
    # Without a session id, a client's calls are one session of their own.
    anonymous = TavilyClient(api_key=ALICE, api_base_url=gw.url)
    assert anonymous.search("no session")["results"]
    with pytest.raises(UsageLimitExceededError):
        anonymous.search("no session again")
    assert gw.searches == 3
