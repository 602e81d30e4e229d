"""Exa's provider module on its own: what it sends, how it reads every answer, what it costs."""

from __future__ import annotations

import json

import httpx
import pytest

from searchfuse._answers import Outcome
from searchfuse.errors import BadRequest, Unsupported
from searchfuse.providers import NAMES, Provider, lookup
from searchfuse.providers.exa import EXA, Exa
from searchfuse.testing import FakeClock, testing_mode

NOW = 1_768_478_400.0  # 2026-01-15T12:00:00Z


def answer(
    status: int, body: object = None, headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.Response(status, json=body if body is not None else {}, headers=headers)


def test_the_registry_finds_every_provider_by_name() -> None:
    assert lookup("exa") is EXA
    assert all(isinstance(lookup(name), Provider) for name in NAMES)
    with pytest.raises(KeyError, match="unknown provider 'bing': use one of tavily, exa"):
        lookup("bing")


def test_the_key_travels_in_x_api_key_only() -> None:
    body = EXA.check("/search", {"query": "rust async", "max_results": 3})
    request = EXA.build("/search", body)
    assert (request.method, request.path, request.params) == ("POST", "/search", None)
    assert EXA.headers("exa-test0001") == {
        "x-api-key": "exa-test0001",
        "Content-Type": "application/json",
    }
    assert "exa-test0001" not in json.dumps(dict(request.body or {}))


def test_tavily_parameters_in_exas_words() -> None:
    with testing_mode(FakeClock(NOW)):
        body = EXA.check(
            "/search",
            {
                "query": "llm evals",
                "max_results": 7,
                "include_domains": ["arxiv.org"],
                "exclude_domains": ["example.com"],
                "time_range": "week",
                "topic": "news",
                "search_depth": "fast",
                "include_usage": True,
            },
        )
    assert dict(body) == {
        "query": "llm evals",
        "numResults": 7,
        "includeDomains": ["arxiv.org"],
        "excludeDomains": ["example.com"],
        "startPublishedDate": "2026-01-08T12:00:00.000Z",
        "category": "news",
        "type": "fast",
        "contents": {"text": {"maxCharacters": 1000}},
    }


def test_dates_become_published_dates() -> None:
    body = EXA.check(
        "/search", {"query": "q", "start_date": "2025-03-01", "end_date": "2025-04-01"}
    )
    assert body["startPublishedDate"] == "2025-03-01T00:00:00.000Z"
    assert body["endPublishedDate"] == "2025-04-01T00:00:00.000Z"
    with pytest.raises(BadRequest, match="start_date must be a date"):
        EXA.check("/search", {"query": "q", "start_date": "March"})


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("search_depth", "advanced"),
        ("topic", "finance"),
        ("include_answer", True),
        ("include_images", True),
        ("country", "germany"),
        ("chunks_per_source", 3),
    ],
)
def test_what_exa_cannot_express_is_refused_not_dropped(param: str, value: object) -> None:
    with pytest.raises(Unsupported) as caught:
        EXA.check("/search", {"query": "q", param: value})
    assert caught.value.provider == "Exa"
    assert caught.value.parameter == f"{param}={value!r}"
    assert caught.value.sent is False


def test_only_search_is_an_exa_endpoint() -> None:
    with pytest.raises(Unsupported, match="Exa only searches"):
        EXA.check("/extract", {"urls": ["https://example.com"]})


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.OK),
        (400, Outcome.BAD_REQUEST),
        (401, Outcome.AUTH),
        (402, Outcome.EXHAUSTED),
        (429, Outcome.RATE_LIMITED),
        (500, Outcome.UPSTREAM),
        (503, Outcome.UPSTREAM),
        (404, Outcome.MISCONFIGURED),
    ],
)
def test_reaction_table(status: int, outcome: Outcome) -> None:
    body = {"requestId": "r1", "error": "No more credits", "tag": "NO_MORE_CREDITS"}
    classified = EXA.classify(answer(status, body if status != 200 else {}), NOW)
    assert classified.outcome is outcome
    assert classified.status == status
    assert classified.detail == ("" if status == 200 else "No more credits")


def test_a_429_carries_retry_after_when_exa_sends_one() -> None:
    sent = EXA.classify(answer(429, {"error": "slow down"}, {"Retry-After": "7"}), NOW)
    assert sent.retry_after == 7.0
    assert EXA.classify(answer(429, {"error": "slow down"}), NOW).retry_after is None


def test_results_in_tavilys_shape_with_exas_json_under_raw() -> None:
    data = {
        "requestId": "r1",
        "results": [
            {
                "title": "A",
                "url": "https://a.example",
                "text": "x" * 1500,
                "publishedDate": "2025-01-02T00:00:00.000Z",
                "score": 0.5,
            },
            {"title": "no url"},
            {"title": "B", "url": "https://b.example"},
        ],
        "costDollars": {"total": 0.007},
    }
    body = EXA.check("/search", {"query": "q"})
    result = EXA.normalize("/search", data, body)
    assert result["query"] == "q" and result["answer"] is None and result["raw"] is data
    first, second = result["results"]
    assert first["content"] == "x" * 1000 and first["raw_content"] is None
    assert (first["score"], first["published_date"]) == (0.5, "2025-01-02T00:00:00.000Z")
    assert second == {
        "title": "B",
        "url": "https://b.example",
        "content": "",
        "score": None,
        "raw_content": None,
    }
    full = EXA.normalize(
        "/search", data, EXA.check("/search", {"query": "q", "include_raw_content": True})
    )
    assert full["results"][0]["raw_content"] == "x" * 1500


def test_cost_in_dollars_from_the_answer_else_the_list_price() -> None:
    body = EXA.check("/search", {"query": "q", "max_results": 25})
    assert EXA.cost("/search", body, {"costDollars": {"total": 0.012}}) == 0.012
    assert EXA.cost("/search", body, {"costDollars": {"total": 1e9}}) == pytest.approx(0.022)
    assert EXA.cost("/search", EXA.check("/search", {"query": "q"}), None) == 0.007
    cheaper = Exa(search_price=0.005, extra_result_price=0.0)
    assert cheaper.cost("/search", body, None) == 0.005


def test_defaults_rate_and_no_free_probe() -> None:
    assert (EXA.rate("exa-test0001").requests, EXA.rate("exa-test0001").window) == (10, 1.0)
    assert EXA.probe() is None and EXA.probe_rate is None
    assert EXA.unit == "usd" and EXA.key_is_url is False
