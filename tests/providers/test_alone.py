"""Every provider alone, over real HTTP on loopback against its simulator: what was sent,
with which key in which header, what the caller got back, and what each failure does."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from searchfuse import CooldownActive, NoKeyAvailable, RateLimited, Router
from searchfuse._secrets import fingerprint
from searchfuse.errors import ConfigError
from searchfuse.testing import (
    BRAVE_TEST_KEYS,
    EXA_TEST_KEYS,
    SERPER_TEST_KEYS,
    FakeBrave,
    FakeClock,
    FakeExa,
    FakeSearXNG,
    FakeSerper,
)
from searchfuse.testing._simulator import Simulator


@dataclass
class Setup:
    name: str
    fake: Simulator
    url: str
    keys: tuple[str, ...]

    def router(self, clock: FakeClock, **kw: Any) -> Router:
        if self.name == "searxng":
            return Router({"searxng": [self.url]}, clock=clock, sleep=clock.advance, **kw)
        return Router(
            {self.name: list(self.keys)},
            base_urls={self.name: self.url},
            clock=clock,
            sleep=clock.advance,
            **kw,
        )


def _fake(name: str, clock: FakeClock) -> tuple[Simulator, tuple[str, ...]]:
    if name == "exa":
        return FakeExa(EXA_TEST_KEYS, clock=clock), EXA_TEST_KEYS
    if name == "brave":
        return FakeBrave(BRAVE_TEST_KEYS, clock=clock), BRAVE_TEST_KEYS
    if name == "serper":
        return FakeSerper(SERPER_TEST_KEYS, clock=clock), SERPER_TEST_KEYS
    return FakeSearXNG(clock=clock), ()


PROVIDERS = ["exa", "brave", "serper", "searxng"]


@pytest.fixture(params=PROVIDERS)
def alone(request: pytest.FixtureRequest, fake_clock: FakeClock) -> Iterator[Setup]:
    fake, keys = _fake(request.param, fake_clock)
    with fake.serve() as url:
        yield Setup(request.param, fake, url, keys)


#: What each provider's request looks like for `search("rust async", max_results=3,
#: time_range="month", topic="news")` (Brave and Serper take no news topic: without it).
SENT = {
    "exa": ("POST", "/search", "body", {"query": "rust async", "numResults": 3}),
    "brave": ("GET", "/res/v1/web/search", "params", {"q": "rust async", "count": "3"}),
    "serper": ("POST", "/search", "body", {"q": "rust async", "num": 3}),
    "searxng": ("GET", "/search", "params", {"q": "rust async", "format": "json"}),
}
TIME = {
    "exa": ("body", "startPublishedDate", "2025-12-15T12:00:00.000Z"),
    "brave": ("params", "freshness", "pm"),
    "serper": ("body", "tbs", "qdr:m"),
    "searxng": ("params", "time_range", "month"),
}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_search_reaches_its_provider_with_the_key_in_its_header(
    alone: Setup, fake_clock: FakeClock, mode: str
) -> None:
    router = alone.router(fake_clock)
    kw: dict[str, Any] = {"max_results": 3, "time_range": "month"}
    if mode == "sync":
        result = router.search("rust async", **kw)
    else:
        result = asyncio.run(router.asearch("rust async", **kw))
    (seen,) = alone.fake.searches
    # Only SearXNG has a free probe: its /healthz is asked first, once.
    others = [r.path for r in alone.fake.requests if r is not seen]
    assert others == (["/healthz"] if alone.name == "searxng" else [])
    method, path, where, expected = SENT[alone.name]
    sent = seen.body if where == "body" else seen.params
    assert (seen.method, seen.path, seen.status) == (method, path, 200)
    assert sent is not None and expected.items() <= sent.items()
    place, field, value = TIME[alone.name]
    assert (seen.body if place == "body" else seen.params or {})[field] == value
    # The simulator reads the key from the provider's own header only, and nothing else
    # of the request carries it.
    if alone.keys:
        assert seen.key_fingerprint == fingerprint(alone.keys[0])
        assert alone.keys[0] not in repr(seen.body) + repr(seen.params)
    else:
        assert seen.key_fingerprint is None
    # Tavily's shape, the provider's own JSON under "raw", who served.
    assert set(result) >= {"query", "answer", "results", "raw", "searchfuse"}
    assert result["query"] == "rust async" and result["answer"] is None
    assert len(result["results"]) == 3
    for item in result["results"]:
        assert item["url"].startswith("https://") and "rust async" in item["title"]
        assert isinstance(item["content"], str) and "<strong>" not in item["content"]
        assert item["content"]
    assert result["searchfuse"]["served_by"] == alone.name
    assert result["searchfuse"]["degraded"] is None


def test_a_rate_limit_stops_the_call_and_holds_the_provider(
    alone: Setup, fake_clock: FakeClock
) -> None:
    router = alone.router(fake_clock)
    alone.fake.fail_next(429, retry_after=20, path=alone.fake.search_path)
    with pytest.raises(RateLimited) as raised:
        router.search("q")
    assert raised.value.retry_after == 20
    with pytest.raises(CooldownActive):  # the hold: refused without a request
        router.search("q")
    assert len(alone.fake.searches) == 1
    fake_clock.advance(21)
    assert router.search("q")["searchfuse"]["served_by"] == alone.name


@pytest.mark.parametrize("name", ["exa", "brave", "serper"])
def test_a_rejected_key_is_passed_for_the_next_one(name: str, fake_clock: FakeClock) -> None:
    fake, keys = _fake(name, fake_clock)
    assert isinstance(fake, FakeExa | FakeBrave | FakeSerper)
    fake.revoke(keys[0])
    with fake.serve() as url:
        router = Setup(name, fake, url, keys).router(fake_clock)
        result = router.search("q")
        assert result["searchfuse"]["key"] == router.status()[1].key
        fake.revoke(keys[1])
        fake_clock.advance(3600 * 2)  # the first key's auth cooldown is over: both fail now
        with pytest.raises(NoKeyAvailable) as raised:
            router.search("q")
    assert raised.value.diagnosis is not None and raised.value.diagnosis.verdict == "auth"
    assert [r.key_fingerprint for r in fake.requests if r.status == 200] == [fingerprint(keys[1])]


@pytest.mark.parametrize("name", ["exa", "brave"])
def test_a_spent_balance_makes_the_key_exhausted(name: str, fake_clock: FakeClock) -> None:
    fake, keys = _fake(name, fake_clock)
    assert isinstance(fake, FakeExa | FakeBrave)
    for key in keys:
        if isinstance(fake, FakeBrave):
            fake.set_spent(key, 2000)  # the free plan's month, all used
        else:
            fake.set_balance(key, 0)
    with fake.serve() as url:
        router = Setup(name, fake, url, keys).router(fake_clock)
        with pytest.raises(NoKeyAvailable) as raised:
            router.search("q")
    assert raised.value.diagnosis is not None
    assert raised.value.diagnosis.verdict == "exhausted"
    assert [s.state for s in router.status()] == ["exhausted", "exhausted"]


def test_searxng_silent_empty_is_a_failure_and_a_true_empty_is_not(
    fake_searxng: FakeSearXNG, searxng_server: str, fake_clock: FakeClock
) -> None:
    router = Router.from_env(clock=fake_clock)  # SEARXNG_URL points at the simulator
    fake_searxng.nothing_for("nothing at all")
    assert router.search("nothing at all")["results"] == []
    fake_searxng.fail_engines()
    with pytest.raises(NoKeyAvailable) as raised:
        router.search("something")
    assert raised.value.diagnosis is not None and raised.value.diagnosis.verdict == "upstream"
    assert "did not answer" in str(raised.value.diagnosis)


def test_searxng_without_json_output_says_how_to_fix_the_instance(
    fake_clock: FakeClock,
) -> None:
    fake = FakeSearXNG(clock=fake_clock, json_enabled=False)
    with fake.serve() as url, pytest.raises(ConfigError) as raised:
        Router({"searxng": [url]}, clock=fake_clock).search("q")
    assert "search.formats" in str(raised.value) and "settings.yml" in str(raised.value)
    assert "it is not SearXNG's API" not in str(raised.value)


@pytest.mark.parametrize("name", ["exa", "brave", "serper"])  # SearXNG refuses domains
def test_a_result_echoes_the_callers_query_not_the_providers_form_of_it(
    name: str, fake_clock: FakeClock
) -> None:
    fake, keys = _fake(name, fake_clock)
    with fake.serve() as url:
        router = Setup(name, fake, url, keys).router(fake_clock)
        result = router.search(
            "rust async", include_domains=["docs.rs"], exclude_domains=["example.com"]
        )
    (seen,) = fake.searches
    sent = {**(seen.params or {}), **(seen.body or {})}
    if "q" in sent:  # the domains went as search operators in the provider's query
        assert "site:docs.rs" in sent["q"]
    assert result["query"] == "rust async"
