"""Parameters of the wrong type, given to each provider beside Tavily over real HTTP on
loopback (and through the gateway): a clear `BadRequest` naming the parameter, nothing
sent, never a raw `TypeError` (a gateway's 500), and never a value read as another one
(an object's keys taken for domains)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from searchfuse import BadRequest, Router
from searchfuse._serving import running
from searchfuse.gateway import build_app
from searchfuse.testing import BRAVE_TEST_KEYS, FakeBrave, FakeClock
from tests.providers.test_alone import Setup, alone  # noqa: F401

WRONG: list[tuple[str, Any]] = [
    ("include_domains", 5),
    ("include_domains", {"a.example": 1}),
    ("exclude_domains", {"a.example": 1}),
    ("exclude_domains", 3.5),
    ("search_depth", ["basic"]),
    ("search_depth", {"basic": 1}),
    ("topic", ["news"]),
    ("time_range", ["day"]),
]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(("name", "value"), WRONG)
def test_a_parameter_of_the_wrong_type_is_a_bad_request_and_nothing_is_sent(
    alone: Setup,  # noqa: F811
    fake_clock: FakeClock,
    mode: str,
    name: str,
    value: Any,
) -> None:
    router = alone.router(fake_clock)
    with pytest.raises(BadRequest) as refused:
        if mode == "sync":
            router.search("q", **{name: value})
        else:
            asyncio.run(router.asearch("q", **{name: value}))
    assert refused.value.sent is False
    assert name in str(refused.value)
    assert alone.fake.searches == []


@pytest.mark.parametrize(
    ("start", "end"), [("2025-02-30", "2025-03-01"), ("2025-03-02", "2025-03-01")]
)
def test_brave_is_sent_no_date_range_that_is_not_one(
    fake_clock: FakeClock, start: str, end: str
) -> None:
    brave = FakeBrave(BRAVE_TEST_KEYS, clock=fake_clock)
    with brave.serve() as url:
        router = Router({"brave": list(BRAVE_TEST_KEYS)}, base_urls={"brave": url})
        with pytest.raises(BadRequest) as refused:
            router.search("q", start_date=start, end_date=end)
    assert refused.value.sent is False
    assert brave.searches == []


@pytest.mark.parametrize(("name", "value"), WRONG[:5])
def test_the_gateway_answers_a_wrong_type_with_tavily_s_400(
    alone: Setup,  # noqa: F811
    fake_clock: FakeClock,
    name: str,
    value: Any,
) -> None:
    router = alone.router(fake_clock)
    with running(build_app(router, cache="off")) as url:
        answer = httpx.post(f"{url}/search", json={"query": "q", name: value})
    assert answer.status_code == 400
    assert name in answer.json()["detail"]["error"]
    assert alone.fake.searches == []
