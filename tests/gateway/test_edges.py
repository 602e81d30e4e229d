"""The edges a public server meets, in raw HTTP: bad bodies, wrong paths, load, deadlines, logs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from searchfuse.gateway import _identity
from searchfuse.testing import TEST_KEYS

from .conftest import ALICE, BOB, Gateway

MakeGateway = Callable[..., Gateway]
AUTH = {"Authorization": f"Bearer {ALICE}"}


def tavily_error(response: httpx.Response) -> str:
    """The message of Tavily's error shape; fails on any other shape."""
    body = response.json()
    assert set(body) == {"detail"} and set(body["detail"]) == {"error"}, body
    message = body["detail"]["error"]
    assert isinstance(message, str) and message
    return message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"", "not valid JSON"),
        (b'["a list"]', "must be a JSON object"),
        (b'"query"', "must be a JSON object"),
        (b"[" * 100_000, "not valid JSON"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_a_400(
    make_gateway: MakeGateway, content: bytes, message: str
) -> None:
    gw = make_gateway()
    answer = httpx.post(f"{gw.url}/search", content=content, headers=AUTH)
    assert answer.status_code == 400
    assert message in tavily_error(answer)
    assert gw.fake.requests == []


def test_bad_json_without_a_token_is_a_401_when_tokens_are_configured(
    make_gateway: MakeGateway,
) -> None:
    gw = make_gateway()
    answer = httpx.post(f"{gw.url}/search", content=b"{not json")
    assert answer.status_code == 401
    assert tavily_error(answer) == "Unauthorized: missing or invalid API key."


def test_a_body_over_one_megabyte_is_a_413_declared_or_streamed(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    big = b'{"query": "x", "pad": "' + b"a" * 1_000_000 + b'"}'
    declared = httpx.post(f"{gw.url}/search", content=big, headers=AUTH)
    assert declared.status_code == 413
    assert "at most 1000000 bytes" in tavily_error(declared)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the body is counted as it comes
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]

    streamed = httpx.post(f"{gw.url}/search", content=chunks(), headers=AUTH)
    assert streamed.status_code == 413
    # Just under the bound is read (and then refused by Tavily's rules, not the size).
    fits = b'{"query": "x", "pad": "' + b"a" * 999_000 + b'"}'
    assert httpx.post(f"{gw.url}/search", content=fits, headers=AUTH).status_code == 200
    assert gw.searches == 1


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/nowhere", 404),
        ("POST", "/search/extra", 404),
        ("POST", "/research", 404),
        ("GET", "/search", 405),
        ("PUT", "/extract", 405),
        ("DELETE", "/crawl", 405),
        ("POST", "/usage", 405),
        ("POST", "/healthz", 405),
    ],
)
def test_unknown_paths_and_methods_answer_in_tavilys_shape(
    make_gateway: MakeGateway, method: str, path: str, status: int
) -> None:
    gw = make_gateway()
    answer = httpx.request(method, f"{gw.url}{path}", headers=AUTH, json={"query": "q"})
    assert answer.status_code == status
    assert tavily_error(answer) == {404: "Not Found", 405: "Method Not Allowed"}[status]
    if status == 405:
        assert answer.headers["Allow"]
    assert gw.fake.requests == []


def test_healthz_is_open_and_usage_needs_a_token(make_gateway: MakeGateway) -> None:
    gw = make_gateway()
    assert httpx.get(f"{gw.url}/healthz").json() == {"status": "ok"}
    refused = httpx.get(f"{gw.url}/usage", headers={"Authorization": "Bearer nope"})
    assert refused.status_code == 401


def test_usage_answers_the_pools_totals_without_asking_upstream(make_gateway: MakeGateway) -> None:
    gw = make_gateway(keys=TEST_KEYS[:3])
    gw.fake.set_usage(TEST_KEYS[0], usage=40, plan_usage=40)
    for n in range(3):
        body = {"query": f"question {n}", "search_depth": "advanced" if n == 0 else "basic"}
        assert httpx.post(f"{gw.url}/search", json=body, headers=AUTH).status_code == 200
    upstream_before = len(gw.fake.requests)
    usage = httpx.get(f"{gw.url}/usage", headers=AUTH).json()
    assert len(gw.fake.requests) == upstream_before  # read from the router's state
    assert set(usage) == {"key", "account"}
    # 40 credits synced for the first key, then 2 + 1 + 1 credits counted locally.
    assert usage["key"]["usage"] == 44
    assert usage["key"]["limit"] is None  # the simulator's keys have no limit of their own
    assert usage["account"]["plan_usage"] == 44
    # Two accounts' plans are not known yet (never synced): the total is not either.
    assert usage["account"]["plan_limit"] is None
    # The router synced only what it needed (one key's /usage), the /usage answer none.
    assert len(gw.fake.usage_requests) == 1
    gw.router.test_keys()  # every key's figures, from Tavily
    usage = httpx.get(f"{gw.url}/usage", headers=AUTH).json()
    assert usage["account"]["plan_limit"] == 3000  # three accounts of 1000 credits each
    assert usage["account"]["plan_usage"] == 44


def test_more_requests_than_the_bound_are_503_at_once(make_gateway: MakeGateway) -> None:
    gw = make_gateway(max_concurrency=2)
    gw.fake.slow_next(0.4, times=2, path="/search")

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=10) as client:

            async def one(n: int) -> httpx.Response:
                if n >= 2:
                    # The first two are in flight (the simulator has them) before the rest start.
                    while len(gw.fake.searches) < 2:
                        await asyncio.sleep(0.005)
                return await client.post(
                    f"{gw.url}/search", json={"query": f"load {n}"}, headers=AUTH
                )

            return await asyncio.gather(*(one(n) for n in range(5)))

    answers = asyncio.run(burst())
    statuses = [a.status_code for a in answers]
    assert statuses == [200, 200, 503, 503, 503]
    for busy in answers[2:]:
        assert "serving as many requests as it can" in tavily_error(busy)
        assert busy.headers["Retry-After"] == "1"
    assert gw.searches == 2
    # Once they are answered, the next request is served.
    assert httpx.post(f"{gw.url}/search", json={"query": "after"}, headers=AUTH).status_code == 200


def test_a_request_past_the_deadline_is_a_504(make_gateway: MakeGateway) -> None:
    # The router has no deadline of its own here: only the gateway's bounds the call.
    gw = make_gateway(deadline=0.3, router_options={"deadline": None})
    gw.fake.slow_next(5.0, path="/search")
    answer = httpx.post(f"{gw.url}/search", json={"query": "slow"}, headers=AUTH, timeout=10)
    assert answer.status_code == 504
    assert "took longer than the gateway allows" in tavily_error(answer)


def test_the_routers_own_deadline_is_a_504_too(make_gateway: MakeGateway) -> None:
    gw = make_gateway(deadline=5.0, router_options={"deadline": 0.3, "max_keys_per_call": 1})
    gw.fake.slow_next(5.0, path="/search")
    answer = httpx.post(f"{gw.url}/search", json={"query": "slow"}, headers=AUTH, timeout=10)
    assert answer.status_code == 504
    assert "took longer than the gateway allows" in tavily_error(answer)


@pytest.mark.parametrize("header", ["X-Session-Id", "X-Human-Id"])
def test_an_id_header_too_long_is_a_400(make_gateway: MakeGateway, header: str) -> None:
    gw = make_gateway()
    headers = {**AUTH, header: "s" * 257}
    answer = httpx.post(f"{gw.url}/search", json={"query": "q"}, headers=headers)
    assert answer.status_code == 400
    assert header in tavily_error(answer)
    assert gw.fake.requests == []


def test_one_access_log_line_per_request_with_no_key_or_token(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    gw = make_gateway()
    caplog.set_level(logging.INFO, logger="searchfuse.gateway")
    httpx.post(f"{gw.url}/search", json={"query": "logged"}, headers=AUTH)
    httpx.post(f"{gw.url}/search", json={"query": "logged"}, headers={"Authorization": "Bearer x"})
    httpx.get(f"{gw.url}/{ALICE}")  # a token pasted into a path
    httpx.get(f"{gw.url}/healthz")
    lines = [r.getMessage() for r in caplog.records if r.name == "searchfuse.gateway.access"]
    assert len(lines) == 4
    served, refused, pasted, health = lines
    assert served.startswith("POST /search 200 served_by=tavily key=tvly-dev-…")
    assert "client=alice" in served and served.endswith(" ms")
    assert refused.startswith("POST /search 401 served_by=- key=-")
    assert pasted.startswith("GET /") and " 404 " in pasted
    assert health.startswith("GET /healthz 200")
    everything = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (ALICE, BOB, *TEST_KEYS):
        assert secret not in everything


def test_a_pool_key_echoed_by_upstream_reaches_the_client_masked(
    make_gateway: MakeGateway,
) -> None:
    gw = make_gateway()
    # A page that happens to quote one of the pool's keys.
    gw.fake.fail_next(400, detail=f"bad key {TEST_KEYS[0]} in query", path="/search")
    answer = httpx.post(f"{gw.url}/search", json={"query": "q"}, headers=AUTH)
    assert answer.status_code == 400
    assert TEST_KEYS[0] not in answer.text
    assert "tvly-dev-…0001" in tavily_error(answer)


@contextmanager
def recorded_spend_scopes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """A stand-in for the gateway's `spend_scope` that records each scope it is asked for."""
    scopes: list[dict[str, Any]] = []

    @contextmanager
    def spend_scope(**names: Any) -> Iterator[None]:
        scopes.append(names)
        yield

    monkeypatch.setattr(_identity, "spend_scope", spend_scope)
    yield scopes


def test_session_human_and_token_name_map_to_the_spend_scope(
    make_gateway: MakeGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = make_gateway()
    with recorded_spend_scopes(monkeypatch) as scopes:
        calls = [
            {**AUTH, "X-Session-Id": "c-42", "X-Human-Id": "dana"},
            {**AUTH, "X-Session-Id": "c-43"},
            {"Authorization": f"Bearer {BOB}"},
        ]
        for n, headers in enumerate(calls):
            r = httpx.post(f"{gw.url}/search", json={"query": f"q{n}"}, headers=headers)
            assert r.status_code == 200
    assert scopes == [
        {"user": "dana", "conversation": "alice/c-42"},  # the client's own conversation
        {"user": "alice", "conversation": "alice/c-43"},
        {"user": "bob", "conversation": None},
    ]


def test_without_tokens_or_ids_no_spend_scope_is_opened(
    make_gateway: MakeGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = make_gateway(tokens=None)
    with recorded_spend_scopes(monkeypatch) as scopes:
        httpx.post(f"{gw.url}/search", json={"query": "anonymous"})
        httpx.post(f"{gw.url}/search", json={"query": "named"}, headers={"X-Session-Id": "c-1"})
    assert scopes == [{"user": None, "conversation": "c-1"}]


def test_each_request_is_a_server_span_with_the_search_span_inside(
    make_gateway: MakeGateway,
) -> None:
    from opentelemetry.trace import SpanKind, StatusCode

    from tests.test_telemetry import _SPANS, _install_sdk

    _install_sdk()  # the suite's one SDK and exporter (the global providers are set once)
    _SPANS.clear()
    gw = make_gateway()
    assert httpx.post(f"{gw.url}/search", json={"query": "traced"}, headers=AUTH).is_success
    httpx.get(f"{gw.url}/nowhere", headers=AUTH)

    def finished() -> list[Any]:
        return [s for s in _SPANS.get_finished_spans() if s.name.startswith("searchfuse.")]

    # A server span ends in the server's thread just after the answer has gone out.
    deadline = time.monotonic() + 5
    while sum(s.name == "searchfuse.gateway" for s in finished()) < 2:
        assert time.monotonic() < deadline, finished()
        time.sleep(0.005)
    spans = finished()
    servers = [s for s in spans if s.name == "searchfuse.gateway"]
    assert [s.kind for s in servers] == [SpanKind.SERVER, SpanKind.SERVER]
    served, missing = servers
    assert served.attributes is not None and missing.attributes is not None
    assert served.attributes["http.route"] == "/search"
    assert served.attributes["http.response.status_code"] == 200
    assert served.attributes["searchfuse.served_by"] == "tavily"
    assert str(served.attributes["searchfuse.key"]).startswith("tvly-dev-…")
    assert served.attributes["searchfuse.client"] == "alice"
    assert missing.attributes["http.route"] == "unknown"
    assert missing.attributes["http.response.status_code"] == 404
    search = next(s for s in spans if s.name == "searchfuse.search")
    assert search.parent is not None and search.parent.span_id == served.context.span_id
    assert served.status.status_code is not StatusCode.ERROR
