"""A misconfigured SearXNG instance is a lasting configuration failure, over real HTTP.

Its 403 (JSON output off in `search.formats`) or a 404 from an address that is not
SearXNG parks the instance: later calls do not ask it again, the chain passes it over
and names that once, and the diagnosis calls the cause configuration, naming the fix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from searchfuse import ConfigError, Router
from searchfuse.testing import FakeClock, FakeExa, FakeSearXNG, FakeTavily

EXA_KEY = "0a1b2c3d-0000-4000-8000-00000000e5a1"
MODES = pytest.mark.parametrize("mode", ["sync", "async"])


@pytest.fixture
def servers(fake_clock: FakeClock) -> Iterator[dict[str, Any]]:
    searxng = FakeSearXNG(clock=fake_clock, json_enabled=False)
    exa = FakeExa(keys=[EXA_KEY], clock=fake_clock)
    other = FakeTavily(keys=[], clock=fake_clock)  # something that is not SearXNG
    with searxng.serve() as s_url, exa.serve() as e_url, other.serve() as o_url:
        yield {"searxng": searxng, "exa": exa, "other": other, "urls": (s_url, e_url, o_url)}


def search(router: Router, mode: str, query: str) -> dict[str, Any]:
    if mode == "sync":
        return router.search(query)
    return asyncio.run(router.asearch(query))


def _searches(fake: FakeSearXNG) -> int:
    return len([r for r in fake.requests if r.path == "/search"])


@MODES
def test_json_output_off_parks_the_instance_and_the_chain_names_it_once(
    servers: dict[str, Any], fake_clock: FakeClock, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    s_url, e_url, _ = servers["urls"]
    router = Router(
        {"searxng": [s_url], "exa": [EXA_KEY]}, base_urls={"exa": e_url}, clock=fake_clock
    )
    results = [search(router, mode, f"q{i}") for i in range(5)]
    assert [r["searchfuse"]["served_by"] for r in results] == ["exa"] * 5
    assert all(r["searchfuse"]["degraded"]["reason"] == "config" for r in results)
    # The instance was asked once: its answer is about its settings, not the moment.
    assert _searches(servers["searxng"]) == 1
    assert len(servers["exa"].searches) == 5
    moves = [r.getMessage() for r in caplog.records if "passed over" in r.getMessage()]
    assert len(moves) == 1 and "search.formats" in moves[0]
    diagnosis = router.diagnose()
    assert diagnosis.verdict == "healthy"
    assert diagnosis.by_provider == {"searxng": "config", "exa": "healthy"}
    assert "json" in diagnosis.step("verdict").finding
    assert "search.formats" in diagnosis.step("verdict").finding
    (status, _) = router.status()
    assert status.cooldown_reason == "misconfigured" and status.cooldown_left == 3600
    assert status.blocked_reason is not None and "search.formats" in status.blocked_reason
    assert status.blocked_reason.startswith("misconfigured")


@MODES
def test_alone_every_call_is_told_the_fix_and_the_instance_is_asked_once(
    servers: dict[str, Any], fake_clock: FakeClock, mode: str
) -> None:
    s_url, _, _ = servers["urls"]
    router = Router({"searxng": [s_url]}, clock=fake_clock)
    for i in range(3):
        with pytest.raises(ConfigError) as raised:
            search(router, mode, f"q{i}")
        assert "search.formats" in str(raised.value)
    assert _searches(servers["searxng"]) == 1
    diagnosis = router.diagnose()
    assert diagnosis.verdict == "config"
    assert "search.formats" in diagnosis.advice


def test_an_address_that_is_not_searxng_is_configuration_too(
    servers: dict[str, Any], fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    _, e_url, o_url = servers["urls"]
    router = Router(
        {"searxng": [o_url], "exa": [EXA_KEY]}, base_urls={"exa": e_url}, clock=fake_clock
    )
    for i in range(3):
        assert router.search(f"q{i}")["searchfuse"]["degraded"]["reason"] == "config"
    other: FakeTavily = servers["other"]
    assert len([r for r in other.requests if r.path == "/search"]) == 1
    assert router.diagnose().by_provider["searxng"] == "config"


def test_a_misconfigured_instance_lets_the_next_instance_serve(
    servers: dict[str, Any], fake_clock: FakeClock
) -> None:
    s_url, _, _ = servers["urls"]
    good = FakeSearXNG(clock=fake_clock)
    with good.serve() as good_url:
        router = Router({"searxng": [s_url, good_url]}, clock=fake_clock)
        served = [router.search(f"q{i}")["searchfuse"] for i in range(3)]
    assert {s["served_by"] for s in served} == {"searxng"}
    assert {s["degraded"] for s in served} == {None}
    assert _searches(servers["searxng"]) <= 1 and _searches(good) == 3
