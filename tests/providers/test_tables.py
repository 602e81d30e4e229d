"""Brave, Serper and SearXNG on their own: what each sends, how each reads every answer."""

from __future__ import annotations

import httpx
import pytest

from searchfuse._answers import Outcome
from searchfuse.errors import Unsupported
from searchfuse.providers import NAMES, lookup
from searchfuse.providers.brave import BRAVE
from searchfuse.providers.searxng import SEARXNG
from searchfuse.providers.serper import SERPER

NOW = 1_768_478_400.0


def answer(
    status: int, body: object = None, headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.Response(status, json=body if body is not None else {}, headers=headers)


def test_every_provider_is_registered_in_chain_order() -> None:
    assert NAMES == ("tavily", "exa", "brave", "serper", "searxng")
    assert [lookup(n).name for n in NAMES] == list(NAMES)


# -- Brave --------------------------------------------------------------------------


def test_brave_sends_a_get_with_the_token_in_its_header() -> None:
    body = BRAVE.check(
        "/search",
        {
            "query": "zig",
            "max_results": 4,
            "time_range": "month",
            "include_domains": ["ziglang.org"],
        },
    )
    request = BRAVE.build("/search", body)
    assert (request.method, request.path, request.body) == ("GET", "/res/v1/web/search", None)
    assert dict(request.params or {}) == {
        "q": "zig site:ziglang.org",
        "count": "4",
        "freshness": "pm",
    }
    assert BRAVE.headers("brave-test0001")["X-Subscription-Token"] == "brave-test0001"


def test_brave_date_range_and_refusals() -> None:
    body = BRAVE.check(
        "/search", {"query": "q", "start_date": "2025-01-01", "end_date": "2025-02-01"}
    )
    assert body["freshness"] == "2025-01-01to2025-02-01"
    for param, value in [
        ("topic", "news"),
        ("search_depth", "advanced"),
        ("start_date", "2025-01-01"),
    ]:
        with pytest.raises(Unsupported, match="Brave cannot honour"):
            BRAVE.check("/search", {"query": "q", param: value})


RATE_HEADERS = {
    "X-RateLimit-Limit": "20, 15000",
    "X-RateLimit-Policy": "20;w=1, 15000;w=2592000",
    "X-RateLimit-Remaining": "19, 1200",
    "X-RateLimit-Reset": "1, 86400",
}


def test_brave_headers_give_the_pace_and_the_month() -> None:
    seen = BRAVE.observe(answer(200, {}, RATE_HEADERS), NOW)
    assert seen is not None and seen.rate is not None
    assert (seen.rate.requests, seen.rate.window) == (20, 1.0)
    assert seen.figures is not None
    assert (seen.figures.key_limit, seen.figures.key_usage) == (15000, 13800)
    assert seen.exhausted_until is None


def test_brave_month_remaining_zero_is_exhaustion_without_a_402() -> None:
    spent = dict(RATE_HEADERS, **{"X-RateLimit-Remaining": "19, 0"})
    seen = BRAVE.observe(answer(200, {}, spent), NOW)
    assert seen is not None and seen.exhausted_until == NOW + 86400
    row = BRAVE.classify(answer(429, {"error": {"detail": "quota"}}, spent), NOW)
    assert (row.outcome, row.retry_after, row.detail) == (Outcome.EXHAUSTED, 86400, "quota")


def test_brave_unlimited_month_and_unreadable_headers() -> None:
    unlimited = {"X-RateLimit-Limit": "50, 0", "X-RateLimit-Remaining": "49, 0"}
    seen = BRAVE.observe(answer(200, {}, unlimited), NOW)
    assert seen is not None and seen.exhausted_until is None and seen.figures is None
    assert BRAVE.observe(answer(200, {}, {"X-RateLimit-Limit": "many"}), NOW) is None


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.OK),
        (401, Outcome.AUTH),
        (402, Outcome.EXHAUSTED),
        (422, Outcome.BAD_REQUEST),
        (429, Outcome.RATE_LIMITED),
        (503, Outcome.UPSTREAM),
    ],
)
def test_brave_reaction_table(status: int, outcome: Outcome) -> None:
    assert (
        BRAVE.classify(answer(status, {}, {"X-RateLimit-Reset": "1, 99"}), NOW).outcome is outcome
    )


def test_brave_429_waits_for_the_per_second_reset() -> None:
    row = BRAVE.classify(answer(429, {}, RATE_HEADERS), NOW)
    assert (row.outcome, row.retry_after) == (Outcome.RATE_LIMITED, 1.0)


def test_brave_results_in_tavilys_shape() -> None:
    data = {
        "web": {
            "results": [
                {
                    "title": "Z",
                    "url": "https://z.example",
                    "description": "<strong>Zig</strong> &amp; C",
                }
            ]
        }
    }
    result = BRAVE.normalize("/search", data, BRAVE.check("/search", {"query": "zig"}))
    assert result["results"] == [
        {
            "title": "Z",
            "url": "https://z.example",
            "content": "Zig & C",
            "score": None,
            "raw_content": None,
        }
    ]
    assert result["raw"] is data and result["query"] == "zig"


# -- Serper -------------------------------------------------------------------------


def test_serper_sends_google_operators_in_json() -> None:
    body = SERPER.check(
        "/search",
        {
            "query": "pep 703",
            "max_results": 10,
            "time_range": "day",
            "include_domains": ["python.org", "lwn.net"],
            "exclude_domains": ["reddit.com"],
        },
    )
    assert dict(body) == {
        "q": "pep 703 (site:python.org OR site:lwn.net) -site:reddit.com",
        "num": 10,
        "tbs": "qdr:d",
    }
    assert SERPER.build("/search", body).method == "POST"
    assert SERPER.headers("serper-test0001")["X-API-KEY"] == "serper-test0001"


def test_serper_429_is_ambiguous_and_says_so() -> None:
    row = SERPER.classify(answer(429, {"message": "Too many requests"}), NOW)
    assert row.outcome is Outcome.RATE_LIMITED and row.alternative is Outcome.EXHAUSTED
    assert row.detail.startswith("a rate limit or credits run out (Serper answers 429 for both)")
    assert SERPER.classify(answer(401, {"message": "bad key"}), NOW).alternative is None


def test_serper_results_and_credits() -> None:
    data = {"organic": [{"title": "T", "link": "https://t.example", "snippet": "s"}], "credits": 2}
    body = SERPER.check("/search", {"query": "q"})
    assert SERPER.normalize("/search", data, body)["results"][0]["url"] == "https://t.example"
    assert SERPER.cost("/search", body, data) == 2
    assert SERPER.cost("/search", body, None) == 1


# -- SearXNG ------------------------------------------------------------------------


def test_searxng_sends_no_credential_and_keeps_the_count_local() -> None:
    body = SEARXNG.check(
        "/search", {"query": "q", "max_results": 2, "topic": "news", "time_range": "day"}
    )
    request = SEARXNG.build("/search", body)
    assert dict(request.params or {}) == {
        "q": "q",
        "format": "json",
        "categories": "news",
        "time_range": "day",
    }
    assert SEARXNG.headers("http://127.0.0.1:8888") == {"Accept": "application/json"}
    data = {
        "results": [
            {"title": str(i), "url": f"https://{i}.example", "content": "c"} for i in range(5)
        ]
    }
    assert len(SEARXNG.normalize("/search", data, body)["results"]) == 2


def test_searxng_refuses_what_its_engines_may_ignore() -> None:
    for param, value in [
        ("include_domains", ["a.org"]),
        ("time_range", "week"),
        ("topic", "finance"),
    ]:
        with pytest.raises(Unsupported, match="SearXNG cannot honour"):
            SEARXNG.check("/search", {"query": "q", param: value})


def test_searxng_silent_empty_is_a_failure_and_a_true_empty_is_not() -> None:
    silent = {"results": [], "unresponsive_engines": [["google", "timeout"], ["bing", "CAPTCHA"]]}
    row = SEARXNG.classify(answer(200, silent), NOW)
    assert row.outcome is Outcome.UPSTREAM
    assert (
        row.detail == "no results, and its engines did not answer (google: timeout, bing: CAPTCHA)"
    )
    assert (
        SEARXNG.classify(answer(200, {"results": [], "unresponsive_engines": []}), NOW).outcome
        is Outcome.OK
    )


def test_searxng_403_is_a_misconfigured_instance() -> None:
    row = SEARXNG.classify(answer(403, {}), NOW)
    assert row.outcome is Outcome.MISCONFIGURED and "search.formats" in row.detail
    assert SEARXNG.classify(answer(429, {}), NOW).outcome is Outcome.RATE_LIMITED


def test_searxng_has_a_free_probe() -> None:
    assert SEARXNG.probe().path == "/healthz" and SEARXNG.key_is_url
