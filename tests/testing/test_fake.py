"""The simulated Tavily, checked against Tavily's documented behaviour.

Every test drives the fake through a real ``httpx.Client`` on its in-process
transport and a :class:`FakeClock`, so nothing sleeps and every figure is exact.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pytest_httpx import HTTPXMock

from searchfuse import _clock
from searchfuse._secrets import fingerprint
from searchfuse.testing import FakeClock, FakeTavily, testing_mode

KEY = "tvly-dev-test0001"
OTHER = "tvly-dev-test0002"
PROD = "tvly-test-prod0001"
BASE = "https://api.tavily.com"


def auth(key: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake(clock: FakeClock) -> FakeTavily:
    return FakeTavily(keys=[KEY, OTHER], clock=clock)


@pytest.fixture
def client(fake: FakeTavily) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=BASE, transport=fake.transport(), timeout=5.0) as c:
        yield c


def search(client: httpx.Client, key: str = KEY, **body: Any) -> httpx.Response:
    body.setdefault("query", "what is tavily")
    return client.post("/search", json=body, headers=auth(key))


def usage(client: httpx.Client, key: str = KEY) -> httpx.Response:
    return client.get("/usage", headers=auth(key))


def error_of(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"detail"} and set(body["detail"]) == {"error"}
    text = body["detail"]["error"]
    assert isinstance(text, str) and text
    return text


# --- /search: the answer ---------------------------------------------------------


def test_search_answers_tavilys_shape(client: httpx.Client) -> None:
    response = search(client, query="Capital of France")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {
        "query",
        "follow_up_questions",
        "answer",
        "images",
        "results",
        "response_time",
        "request_id",
    }
    assert body["query"] == "Capital of France"
    assert body["answer"] is None
    assert body["images"] == []
    assert isinstance(body["response_time"], float)
    assert isinstance(body["request_id"], str) and body["request_id"]
    assert len(body["results"]) == 5
    for result in body["results"]:
        assert set(result) == {"title", "url", "content", "score", "raw_content"}
        assert result["url"].startswith("https://")
        assert result["raw_content"] is None
        assert 0 < result["score"] <= 1
    scores = [r["score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    ("depth", "credits"), [("basic", 1), ("fast", 1), ("ultra-fast", 1), ("advanced", 2)]
)
def test_include_usage_reports_credits_per_depth(
    client: httpx.Client, fake: FakeTavily, depth: str, credits: int
) -> None:
    body = search(client, search_depth=depth, include_usage=True).json()

    assert body["usage"] == {"credits": credits}
    assert fake.usage_of(KEY)["key"]["usage"] == credits
    assert fake.searches[0].credits == credits


def test_usage_field_only_when_asked(client: httpx.Client) -> None:
    assert "usage" not in search(client).json()
    assert "usage" not in search(client, include_usage=False).json()


@pytest.mark.parametrize("flag", [True, "basic", "advanced"])
def test_include_answer_gives_a_deterministic_sentence(client: httpx.Client, flag: Any) -> None:
    first = search(client, include_answer=flag).json()["answer"]
    second = search(client, include_answer=flag).json()["answer"]

    assert isinstance(first, str) and first.endswith(".")
    assert first == second


@pytest.mark.parametrize("flag", [True, "markdown", "text"])
def test_include_raw_content_fills_raw_content(client: httpx.Client, flag: Any) -> None:
    results = search(client, include_raw_content=flag).json()["results"]

    assert all(isinstance(r["raw_content"], str) and r["raw_content"] for r in results)


def test_include_images(client: httpx.Client) -> None:
    images = search(client, include_images=True).json()["images"]
    described = search(client, include_images=True, include_image_descriptions=True).json()

    assert len(images) == 3 and all(isinstance(url, str) for url in images)
    assert [image["url"] for image in described["images"]] == images


@pytest.mark.parametrize("count", [0, 1, 20])
def test_max_results_is_obeyed(client: httpx.Client, count: int) -> None:
    assert len(search(client, max_results=count).json()["results"]) == count


def test_include_domains_shape_the_urls(client: httpx.Client) -> None:
    results = search(client, include_domains=["docs.python.org"]).json()["results"]

    assert all(r["url"].startswith("https://docs.python.org/") for r in results)


def test_results_are_deterministic_for_a_normalised_query(clock: FakeClock) -> None:
    one = FakeTavily(keys=[KEY], clock=clock)
    two = FakeTavily(keys=[KEY], clock=clock)
    with (
        httpx.Client(base_url=BASE, transport=one.transport()) as c1,
        httpx.Client(base_url=BASE, transport=two.transport()) as c2,
    ):
        a = search(c1, query="Python asyncio")
        b = search(c2, query="  python   ASYNCIO ")
        c = search(c1, query="Rust tokio")
        again = search(c1, query="Python asyncio")

    assert a.json()["results"] == b.json()["results"]
    assert a.json()["results"] == again.json()["results"]
    assert a.json()["results"] != c.json()["results"]
    assert a.json()["request_id"] != again.json()["request_id"]


# --- authentication ------------------------------------------------------------------

UNAUTHORIZED = {"detail": {"error": "Unauthorized: missing or invalid API key."}}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer tvly-dev-unknown1"},
        {"Authorization": "Bearer "},
        {"Authorization": f"Token {KEY}"},
        {"Authorization": KEY},
    ],
    ids=["missing", "unknown", "empty", "wrong-scheme", "no-scheme"],
)
@pytest.mark.parametrize("path", ["/search", "/usage"])
def test_missing_or_unknown_key_is_401(
    client: httpx.Client, fake: FakeTavily, headers: dict[str, str], path: str
) -> None:
    if path == "/search":
        response = client.post(path, json={"query": "q"}, headers=headers)
    else:
        response = client.get(path, headers=headers)

    assert response.status_code == 401
    assert response.json() == UNAUTHORIZED
    assert fake.usage_of(KEY)["key"]["usage"] == 0


def test_a_key_in_the_body_is_not_accepted(client: httpx.Client, fake: FakeTavily) -> None:
    response = client.post("/search", json={"query": "q", "api_key": KEY})

    assert response.status_code == 401
    assert fake.requests[0].body == {"query": "q"}


def test_revoke_and_restore(client: httpx.Client, fake: FakeTavily) -> None:
    fake.revoke(KEY)
    assert search(client).status_code == 401
    assert usage(client).status_code == 401
    assert search(client, OTHER).status_code == 200

    fake.restore(KEY)
    assert search(client).status_code == 200


# --- validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"query": ""},
        {"query": "   "},
        {"query": None},
        {"query": 42},
        {"query": "x" * 401},
        {"query": "q", "max_results": 21},
        {"query": "q", "max_results": -1},
        {"query": "q", "max_results": "5"},
        {"query": "q", "max_results": 5.5},
        {"query": "q", "max_results": True},
        {"query": "q", "search_depth": "deep"},
        {"query": "q", "topic": "sports"},
        {"query": "q", "include_domains": "example.com"},
        {"query": "q", "topic": ["news"]},
        {"query": "q", "search_depth": {"advanced": 1}},
    ],
    ids=[
        "no-query",
        "empty-query",
        "blank-query",
        "null-query",
        "number-query",
        "query-401-chars",
        "max-results-21",
        "max-results-negative",
        "max-results-string",
        "max-results-float",
        "max-results-bool",
        "unknown-depth",
        "unknown-topic",
        "domains-not-a-list",
        "topic-a-list",
        "depth-an-object",
    ],
)
def test_invalid_search_is_400_and_free(
    client: httpx.Client, fake: FakeTavily, body: dict[str, Any]
) -> None:
    response = client.post("/search", json=body, headers=auth())

    assert response.status_code == 400
    error_of(response)
    assert fake.usage_of(KEY)["key"]["usage"] == 0
    assert fake.searches[-1].status == 400


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'"query"', b""])
def test_malformed_body_is_400(client: httpx.Client, content: bytes) -> None:
    response = client.post(
        "/search", content=content, headers={**auth(), "Content-Type": "application/json"}
    )

    assert response.status_code == 400
    error_of(response)


def test_limits_of_valid_values(client: httpx.Client) -> None:
    assert search(client, query="x" * 400).status_code == 200
    assert search(client, topic="news").status_code == 200
    assert search(client, topic="finance").status_code == 200
    assert search(client, max_results=None).status_code == 200


def test_unknown_path_and_wrong_method(client: httpx.Client) -> None:
    assert client.post("/research", json={"input": "x"}, headers=auth()).status_code == 404
    assert client.get("/extract", headers=auth()).status_code == 405
    assert client.get("/search", headers=auth()).status_code == 405
    assert client.post("/usage", headers=auth()).status_code == 405


# --- the requests-per-minute window -----------------------------------------------------


def test_dev_key_allows_100_requests_a_minute(
    client: httpx.Client, fake: FakeTavily, clock: FakeClock
) -> None:
    for _ in range(100):
        assert search(client).status_code == 200

    refused = search(client)
    assert refused.status_code == 429
    error_of(refused)
    assert refused.headers["Retry-After"] == "60"

    clock.advance(59)
    assert search(client).headers["Retry-After"] == "1"

    clock.advance(1)
    assert search(client).status_code == 200
    # 429s are free: 101 searches answered, 101 credits.
    assert fake.usage_of(KEY)["key"]["usage"] == 101
    assert [r.credits for r in fake.searches if r.status == 429] == [0, 0]


def test_window_slides(client: httpx.Client, clock: FakeClock) -> None:
    for _ in range(50):
        search(client)
    clock.advance(30)
    for _ in range(50):
        search(client)
    clock.advance(15)

    refused = search(client)
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "15"  # until the first 50 leave the window

    clock.advance(15)
    for _ in range(50):
        assert search(client).status_code == 200
    assert search(client).status_code == 429


def test_retry_after_is_rounded_up(client: httpx.Client, clock: FakeClock) -> None:
    for _ in range(100):
        search(client)
    clock.advance(59.5)

    assert search(client).headers["Retry-After"] == "1"


def test_the_window_is_per_key(client: httpx.Client) -> None:
    for _ in range(100):
        search(client)

    assert search(client).status_code == 429
    assert search(client, OTHER).status_code == 200


def test_production_key_allows_1000_a_minute(clock: FakeClock) -> None:
    fake = FakeTavily(keys=[PROD], clock=clock)
    with httpx.Client(base_url=BASE, transport=fake.transport()) as client:
        statuses = [search(client, PROD).status_code for _ in range(1001)]

    assert statuses[:1000] == [200] * 1000
    assert statuses[1000] == 429


def test_rpm_can_be_overridden(fake: FakeTavily, client: httpx.Client) -> None:
    fake.add_key("tvly-dev-test0003", rpm=2)
    fake.set_rpm(OTHER, 1)

    assert [search(client, "tvly-dev-test0003").status_code for _ in range(3)] == [200, 200, 429]
    assert [search(client, OTHER).status_code for _ in range(2)] == [200, 429]


def test_fixed_retry_after(clock: FakeClock) -> None:
    fake = FakeTavily(keys=[KEY], clock=clock, retry_after=60)
    fake.set_rpm(KEY, 1)
    with httpx.Client(base_url=BASE, transport=fake.transport()) as client:
        search(client)
        clock.advance(50)
        assert search(client).headers["Retry-After"] == "60"


def test_rate_limited_and_invalid_requests_count_in_the_window(client: httpx.Client) -> None:
    for _ in range(100):
        client.post("/search", json={"query": ""}, headers=auth())

    assert search(client).status_code == 429


# --- /usage ------------------------------------------------------------------------


def test_usage_answers_tavilys_shape(client: httpx.Client, fake: FakeTavily) -> None:
    search(client, search_depth="advanced")
    search(client)

    response = usage(client)

    assert response.status_code == 200
    assert response.json() == {
        "key": {
            "usage": 3,
            "limit": None,
            "search_usage": 3,
            "extract_usage": 0,
            "crawl_usage": 0,
            "map_usage": 0,
            "research_usage": 0,
        },
        "account": {
            "current_plan": "Researcher",
            "plan_usage": 3,
            "plan_limit": 1000,
            "paygo_usage": 0,
            "paygo_limit": None,
            "search_usage": 3,
            "extract_usage": 0,
            "crawl_usage": 0,
            "map_usage": 0,
            "research_usage": 0,
        },
    }
    assert response.json() == fake.usage_of(KEY)


def test_usage_allows_10_requests_per_10_minutes(
    client: httpx.Client, fake: FakeTavily, clock: FakeClock
) -> None:
    for _ in range(10):
        assert usage(client).status_code == 200
        clock.advance(1)

    refused = usage(client)
    assert refused.status_code == 429
    error_of(refused)
    assert refused.headers["Retry-After"] == str(600 - 10)
    # Searches have their own window, and another key its own /usage window.
    assert search(client).status_code == 200
    assert usage(client, OTHER).status_code == 200

    clock.advance(590)
    assert usage(client).status_code == 200
    assert fake.usage_of(KEY)["key"]["usage"] == 1  # /usage is free


def test_searches_do_not_spend_the_usage_window(client: httpx.Client) -> None:
    for _ in range(100):
        search(client)

    assert usage(client).status_code == 200


# --- credits -----------------------------------------------------------------------


def test_key_limit_answers_432(client: httpx.Client, fake: FakeTavily) -> None:
    fake.set_limit(KEY, 3)

    assert [search(client).status_code for _ in range(3)] == [200, 200, 200]
    refused = search(client)

    assert refused.status_code == 432
    assert "key" in error_of(refused)
    assert fake.usage_of(KEY)["key"] == {**fake.usage_of(KEY)["key"], "usage": 3, "limit": 3}
    assert search(client, OTHER).status_code == 200


def test_advanced_needs_two_credits_of_headroom(client: httpx.Client, fake: FakeTavily) -> None:
    fake.add_key("tvly-dev-test0003", limit=3)
    key = "tvly-dev-test0003"

    assert search(client, key, search_depth="advanced").status_code == 200
    assert search(client, key, search_depth="advanced").status_code == 432
    assert search(client, key).status_code == 200
    assert fake.usage_of(key)["key"]["usage"] == 3


def test_keys_of_one_account_share_its_plan(clock: FakeClock) -> None:
    fake = FakeTavily(clock=clock)
    fake.add_account("team@example.com", plan_limit=5)
    fake.add_key(KEY, account="team@example.com")
    fake.add_key(OTHER, account="team@example.com")
    fake.add_key("tvly-dev-test0003")  # an account of its own
    with httpx.Client(base_url=BASE, transport=fake.transport()) as client:
        assert search(client, KEY, search_depth="advanced").status_code == 200
        assert search(client, OTHER, search_depth="advanced").status_code == 200
        assert search(client, OTHER).status_code == 200
        refused = search(client, KEY)
        assert search(client, "tvly-dev-test0003").status_code == 200

    assert refused.status_code == 432
    assert "plan" in error_of(refused)
    assert fake.usage_of(KEY)["key"]["usage"] == 2
    assert fake.usage_of(OTHER)["key"]["usage"] == 3
    assert fake.usage_of(KEY)["account"]["plan_usage"] == 5
    assert fake.usage_of(OTHER)["account"] == fake.usage_of(KEY)["account"]
    assert fake.account_of(KEY) is fake.account("team@example.com")


def test_pay_as_you_go_after_the_plan_then_433(clock: FakeClock) -> None:
    fake = FakeTavily(clock=clock)
    fake.add_account("acct", plan_limit=3, paygo_limit=3)
    fake.add_key(KEY, account="acct")
    with httpx.Client(base_url=BASE, transport=fake.transport()) as client:
        statuses = [search(client, search_depth="advanced").status_code for _ in range(3)]
        final = search(client)
        refused = search(client)

    assert statuses == [200, 200, 200]  # 2 from the plan; 1 plan + 1 paygo; 2 paygo
    assert final.status_code == 433
    assert refused.status_code == 433
    assert "pay-as-you-go" in error_of(refused)
    account = fake.usage_of(KEY)["account"]
    assert (account["plan_usage"], account["paygo_usage"]) == (3, 3)
    assert fake.usage_of(KEY)["key"]["usage"] == 6


def test_unlimited_plan(clock: FakeClock) -> None:
    fake = FakeTavily(clock=clock)
    fake.add_account("big", plan_limit=None)
    fake.add_key(PROD, account="big")
    fake.set_usage(PROD, plan_usage=10**9)
    with httpx.Client(base_url=BASE, transport=fake.transport()) as client:
        assert search(client, PROD).status_code == 200


def test_set_usage_figures_directly(client: httpx.Client, fake: FakeTavily) -> None:
    fake.set_limit(KEY, 1000)
    fake.set_usage(KEY, usage=370, plan_usage=370)

    figures = usage(client).json()

    assert figures["key"]["usage"] / figures["key"]["limit"] == 0.37
    assert figures["key"]["search_usage"] == 370
    assert figures["account"]["plan_usage"] == 370

    fake.set_usage(KEY, search_usage=12, paygo_usage=4)
    figures = fake.usage_of(KEY)
    assert (figures["key"]["usage"], figures["key"]["search_usage"]) == (370, 12)
    assert figures["account"]["paygo_usage"] == 4


def test_plan_limit_from_set_usage_answers_432(client: httpx.Client, fake: FakeTavily) -> None:
    fake.set_usage(KEY, plan_usage=1000)

    assert search(client).status_code == 432


def test_reset_usage_is_a_new_month(client: httpx.Client, fake: FakeTavily) -> None:
    fake.set_limit(KEY, 1)
    search(client)
    assert search(client).status_code == 432

    fake.reset_usage()

    assert search(client).status_code == 200
    assert fake.usage_of(KEY)["account"]["plan_usage"] == 1


# --- injected faults ---------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 401, 403, 432, 433])
def test_fail_next_answers_a_status_once(
    client: httpx.Client, fake: FakeTavily, status: int
) -> None:
    fake.fail_next(status)

    failed = search(client, include_usage=True)
    assert failed.status_code == status
    error_of(failed)
    assert "Retry-After" not in failed.headers
    assert search(client).status_code == 200
    assert fake.usage_of(KEY)["key"]["usage"] == 1  # the failure cost nothing
    assert [r.injected for r in fake.searches] == [True, False]


def test_injected_429_carries_retry_after(client: httpx.Client, fake: FakeTavily) -> None:
    fake.fail_next(429)
    fake.fail_next(429, retry_after=30)
    fake.fail_next(429, retry_after=0.5)
    fake.fail_next(429, retry_after="Wed, 21 Oct 2026 07:28:00 GMT")
    fake.fail_next(503, retry_after=120)

    values = [search(client).headers.get("Retry-After") for _ in range(5)]

    assert values == ["60", "30", "0.5", "Wed, 21 Oct 2026 07:28:00 GMT", "120"]


def test_fault_times_key_and_path(client: httpx.Client, fake: FakeTavily) -> None:
    fake.fail_next(503, times=2, key=OTHER, path="/search")

    assert search(client).status_code == 200
    assert usage(client, OTHER).status_code == 200
    assert search(client, OTHER).status_code == 503
    assert search(client, OTHER).status_code == 503
    assert search(client, OTHER).status_code == 200


def test_fault_until_cleared(client: httpx.Client, fake: FakeTavily) -> None:
    fake.fail_next(500, times=None)

    assert [search(client).status_code for _ in range(5)] == [500] * 5
    assert fake.faults

    fake.clear_faults()
    assert search(client).status_code == 200
    assert fake.faults == []


def test_faults_are_used_in_order(client: httpx.Client, fake: FakeTavily) -> None:
    fake.fail_next(503)
    fake.fail_next(429, retry_after=5)
    fake.fail_next(401, detail="Key rotated.")

    answers = [search(client) for _ in range(4)]

    assert [a.status_code for a in answers] == [503, 429, 401, 200]
    assert error_of(answers[2]) == "Key rotated."


def test_fault_needs_no_valid_key_and_does_not_fill_the_window(
    client: httpx.Client, fake: FakeTavily
) -> None:
    fake.set_rpm(KEY, 1)
    fake.fail_next(503, times=3)

    assert [search(client).status_code for _ in range(3)] == [503] * 3
    assert search(client).status_code == 200
    fake.fail_next(503)
    assert search(client, "tvly-dev-unknown1").status_code == 503


def test_timeout_fault_raises_read_timeout(
    client: httpx.Client, fake: FakeTavily, clock: FakeClock
) -> None:
    fake.fail_next("timeout")
    start = clock()

    with pytest.raises(httpx.ReadTimeout):
        search(client)

    assert clock() - start == 5.0  # the client's whole read timeout went by
    assert fake.searches[0].status is None
    assert fake.searches[0].error == "ReadTimeout"
    assert search(client).status_code == 200


def test_connect_fault_raises_connect_error(client: httpx.Client, fake: FakeTavily) -> None:
    fake.fail_next("connect", path="/usage")

    with pytest.raises(httpx.ConnectError):
        usage(client)

    assert fake.usage_requests[0].error == "ConnectError"
    assert usage(client).status_code == 200


def test_handle_raises_injected_errors(fake: FakeTavily) -> None:
    request = httpx.Request("POST", f"{BASE}/search", json={"query": "q"}, headers=auth())
    fake.fail_next("timeout")
    fake.fail_next("connect")

    with pytest.raises(httpx.ReadTimeout):
        fake.handle(request)
    with pytest.raises(httpx.ConnectError):
        fake.handle(request)
    assert fake.handle(request).status_code == 200


def test_slow_answer_advances_the_fake_clock(
    client: httpx.Client, fake: FakeTavily, clock: FakeClock
) -> None:
    fake.slow_next(2.5)
    start = clock()

    assert search(client).status_code == 200
    assert clock() - start == 2.5
    assert search(client).status_code == 200
    assert clock() - start == 2.5


def test_answer_slower_than_the_client_timeout_is_a_read_timeout(
    client: httpx.Client, fake: FakeTavily, clock: FakeClock
) -> None:
    fake.slow_next(30)
    start = clock()

    with pytest.raises(httpx.ReadTimeout):
        search(client, include_usage=True)

    assert clock() - start == 5.0
    # Tavily did the work and charged for it; only the answer was lost.
    assert fake.searches[0].status == 200
    assert fake.usage_of(KEY)["key"]["usage"] == 1


def test_handle_reports_the_delay(fake: FakeTavily) -> None:
    fake.slow_next(3)
    request = httpx.Request("GET", f"{BASE}/usage", headers=auth())

    assert fake.handle(request).extensions["delay"] == 3
    assert "delay" not in fake.handle(request).extensions


@pytest.mark.parametrize(
    ("fault", "kwargs", "error"),
    [
        (200, {}, ValueError),
        (302, {}, ValueError),
        ("slow", {}, ValueError),
        (True, {}, TypeError),
        (503, {"times": 0}, ValueError),
    ],
)
def test_bad_faults_are_refused(
    fake: FakeTavily, fault: Any, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        fake.fail_next(fault, **kwargs)


def test_bad_delays_are_refused(fake: FakeTavily) -> None:
    with pytest.raises(ValueError):
        fake.slow_next(-1)
    with pytest.raises(ValueError):
        fake.slow_next(float("nan"))


# --- records -------------------------------------------------------------------------


def test_every_request_is_recorded_without_the_key(
    client: httpx.Client, fake: FakeTavily, clock: FakeClock
) -> None:
    search(client, query="first", max_results=2)
    clock.advance(10)
    usage(client, OTHER)
    client.post("/search", json={"query": "no key"})

    first, second, third = fake.requests
    assert (first.method, first.path, first.status, first.time) == (
        "POST",
        "/search",
        200,
        clock() - 10,
    )
    assert first.key_fingerprint == fingerprint(KEY) == fake.fingerprint(KEY)
    assert first.body == {"query": "first", "max_results": 2}
    assert first.query == "first"
    assert (second.method, second.path, second.body, second.time) == (
        "GET",
        "/usage",
        None,
        clock(),
    )
    assert second.key_fingerprint == fingerprint(OTHER)
    assert second.query is None
    assert (third.key_fingerprint, third.status) == (None, 401)

    everything = repr(fake.requests) + repr(fake) + json.dumps([r.body for r in fake.requests])
    assert KEY not in everything and OTHER not in everything


def test_record_views(client: httpx.Client, fake: FakeTavily) -> None:
    search(client)
    search(client)
    search(client, OTHER)
    usage(client)

    assert len(fake.requests) == 4
    assert len(fake.searches) == 3
    assert len(fake.usage_requests) == 1
    assert fake.requests_by_key() == {fingerprint(KEY): 3, fingerprint(OTHER): 1}
    assert fake.requests_by_key("/search") == {fingerprint(KEY): 2, fingerprint(OTHER): 1}
    assert len(fake.requests_for(KEY)) == 3
    assert len(fake.requests_for(KEY, "/usage")) == 1

    fake.reset_records()

    assert fake.requests == []
    assert fake.usage_of(KEY)["key"]["usage"] == 2  # figures survive


def test_repr_masks_keys(fake: FakeTavily) -> None:
    assert repr(fake) == "FakeTavily(keys=['tvly-dev-…0001', 'tvly-dev-…0002'], requests=0)"


# --- set-up ----------------------------------------------------------------------------


def test_keys_and_accounts(fake: FakeTavily) -> None:
    assert fake.keys == [KEY, OTHER]
    assert fake.account_of(KEY) is not fake.account_of(OTHER)
    with pytest.raises(ValueError):
        fake.add_key(KEY)
    with pytest.raises(ValueError):
        fake.add_key("tvly-dev with space")
    with pytest.raises(ValueError):
        fake.add_account(fake.account_of(KEY).name)
    with pytest.raises(KeyError, match="tvly-dev-…0009") as excinfo:
        fake.revoke("tvly-dev-test0009")
    assert "tvly-dev-test0009" not in str(excinfo.value)


def test_add_key_creates_a_named_account_with_defaults(fake: FakeTavily) -> None:
    fake.add_key("tvly-dev-test0003", account="shared")
    fake.add_key("tvly-dev-test0004", account="shared")

    account = fake.account("shared")
    assert account is fake.account_of("tvly-dev-test0004")
    assert (account.current_plan, account.plan_limit, account.paygo_limit) == (
        "Researcher",
        1000,
        None,
    )


def test_default_clock_follows_searchfuse_time() -> None:
    fake = FakeTavily(keys=[KEY])
    with (
        testing_mode() as clock,
        httpx.Client(base_url=BASE, transport=fake.transport(), timeout=4) as client,
    ):
        fake.set_rpm(KEY, 1)
        search(client)
        assert search(client).headers["Retry-After"] == "60"
        fake.slow_next(2)
        clock.advance(60)
        assert search(client).status_code == 200
        assert fake.searches[-1].time == _clock.now() - 2  # slept through searchfuse's sleeper


# --- concurrency and other clients ---------------------------------------------------


def test_parallel_requests_are_counted_exactly(fake: FakeTavily) -> None:
    statuses: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        with httpx.Client(base_url=BASE, transport=fake.transport()) as client:
            for _ in range(15):
                status = search(client).status_code
                with lock:
                    statuses.append(status)

    threads = [threading.Thread(target=worker) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(statuses) == [200] * 100 + [429] * 50
    assert fake.usage_of(KEY)["key"]["usage"] == 100
    assert len(fake.searches) == 150


async def test_transport_serves_async_clients(fake: FakeTavily) -> None:
    async with httpx.AsyncClient(base_url=BASE, transport=fake.transport()) as client:
        responses = await asyncio.gather(
            *(
                client.post(
                    "/search", json={"query": f"q{i}"}, headers=auth(KEY if i % 2 else OTHER)
                )
                for i in range(20)
            )
        )
        figures = await client.get("/usage", headers=auth())

    assert [r.status_code for r in responses] == [200] * 20
    assert figures.json()["key"]["usage"] == 10
    assert fake.requests_by_key("/search") == {fingerprint(KEY): 10, fingerprint(OTHER): 10}


async def test_async_client_sees_injected_timeout(fake: FakeTavily) -> None:
    fake.fail_next("timeout")
    async with httpx.AsyncClient(base_url=BASE, transport=fake.transport()) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/search", json={"query": "q"}, headers=auth())


def test_mount_on_pytest_httpx(httpx_mock: HTTPXMock, fake: FakeTavily) -> None:
    fake.mount(httpx_mock)
    fake.fail_next(503)

    with httpx.Client() as client:
        first = client.post(f"{BASE}/search", json={"query": "q"}, headers=auth())
        second = client.post(f"{BASE}/search", json={"query": "q"}, headers=auth())
        figures = client.get(f"{BASE}/usage", headers=auth())

    assert (first.status_code, second.status_code, figures.status_code) == (503, 200, 200)
    assert len(fake.requests) == 3


def test_mount_on_another_base_url(httpx_mock: HTTPXMock, fake: FakeTavily) -> None:
    fake.mount(httpx_mock, base_url="https://tavily.internal.example/")

    response = httpx.get("https://tavily.internal.example/usage", headers=auth())

    assert response.status_code == 200


def test_mount_leaves_unused_responses_alone(httpx_mock: HTTPXMock, fake: FakeTavily) -> None:
    fake.mount(httpx_mock)  # never requested: pytest-httpx must not fail the test


# --- /extract, /crawl, /map -------------------------------------------------------------


def test_extract_charges_per_five_pages_and_reports_failed_urls(
    client: httpx.Client, fake: FakeTavily
) -> None:
    urls = [f"https://example.com/{i}" for i in range(6)] + ["ftp:nothing"]
    answer = client.post("/extract", json={"urls": urls, "include_usage": True}, headers=auth())
    assert answer.status_code == 200
    data = answer.json()
    assert len(data["results"]) == 6
    assert data["failed_results"] == [{"url": "ftp:nothing", "error": "Failed to fetch url"}]
    assert data["usage"] == {"credits": 2}  # 6 pages: two blocks of five
    assert fake.usage_of(KEY)["key"]["extract_usage"] == 2


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"urls": []},
        {"urls": [f"https://e.com/{i}" for i in range(21)]},
        {"urls": "x", "extract_depth": "deep"},
        {"urls": "x", "extract_depth": ["basic"]},
    ],
)
def test_extract_rejects_what_tavily_rejects(client: httpx.Client, body: dict[str, Any]) -> None:
    assert client.post("/extract", json=body, headers=auth()).status_code == 400


def test_crawl_and_map_walk_a_bounded_site(client: httpx.Client, fake: FakeTavily) -> None:
    site = {"url": "docs.example.com", "max_depth": 2, "limit": 7, "include_usage": True}
    mapped = client.post("/map", json=site, headers=auth()).json()
    crawled = client.post("/crawl", json=site, headers=auth()).json()
    assert mapped["base_url"] == crawled["base_url"] == "https://docs.example.com"
    assert len(mapped["results"]) == 7 and mapped["results"][0] == "https://docs.example.com"
    assert [page["url"] for page in crawled["results"]] == mapped["results"]
    assert mapped["usage"] == {"credits": 1}
    assert crawled["usage"] == {"credits": 1 + 2}  # the map, then 7 pages extracted
    # Depth 1 with three links a page: the start page and its three links.
    shallow = client.post("/map", json={"url": "https://example.org"}, headers=auth()).json()
    assert len(shallow["results"]) == 4


def test_crawl_rejects_a_missing_url_and_a_depth_beyond_five(client: httpx.Client) -> None:
    assert client.post("/crawl", json={"limit": 3}, headers=auth()).status_code == 400
    too_deep = {"url": "https://example.org", "max_depth": 6}
    assert client.post("/map", json=too_deep, headers=auth()).status_code == 400
