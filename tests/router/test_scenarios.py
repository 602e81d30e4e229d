"""Router scenarios against the simulated Tavily (the project's own pytest fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from searchfuse import CooldownActive, NoKeyAvailable, RateLimited, Router
from searchfuse.testing import TEST_KEYS, FakeClock, FakeTavily

K1, K2, K3, K4 = TEST_KEYS


def router_on(fake: FakeTavily, clock: FakeClock, state: Path, **options: object) -> Router:
    return Router(
        list(TEST_KEYS),
        state=state,
        clock=clock,
        transport=fake.transport(),
        async_transport=fake.transport(),
        **options,  # type: ignore[arg-type]
    )


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state" / "quota.json"


def test_one_search_over_four_keys_asks_usage_once_for_the_key_it_used(
    fake_tavily: FakeTavily, fake_clock: FakeClock, state: Path
) -> None:
    router = router_on(fake_tavily, fake_clock, state)
    router.search("q")
    (search,) = fake_tavily.searches
    usage = fake_tavily.usage_requests
    assert len(usage) == 1
    assert usage[0].key_fingerprint == search.key_fingerprint


def test_revoked_key_fails_over_and_is_parked_for_an_hour(
    fake_tavily: FakeTavily, fake_clock: FakeClock, state: Path
) -> None:
    fake_tavily.revoke(K1)
    router = router_on(fake_tavily, fake_clock, state)
    result = router.search("q")
    assert result["searchfuse"]["key"] == "tvly-dev-…0002"
    first = router.status()[0]
    assert first.cooldown_reason == "auth"
    assert first.cooldown_left == pytest.approx(3600)


def test_key_at_its_limit_is_exhausted_and_the_next_key_serves(
    fake_tavily: FakeTavily, fake_clock: FakeClock, state: Path
) -> None:
    fake_tavily.set_limit(K1, 100)
    fake_tavily.set_usage(K1, usage=99)
    router = router_on(fake_tavily, fake_clock, state)
    # 99 of 100 used: not exhausted yet, but an advanced search needs 2 credits.
    result = router.search("q", search_depth="advanced")
    assert result["searchfuse"]["key"] == "tvly-dev-…0002"
    assert [r.status for r in fake_tavily.searches] == [432, 200]
    assert router.status()[0].state == "exhausted"


def test_a_real_rate_limit_under_the_default_policy_touches_one_key(
    fake_tavily: FakeTavily, fake_clock: FakeClock, state: Path
) -> None:
    for key in TEST_KEYS:
        fake_tavily.set_rpm(key, 3)
    router = router_on(fake_tavily, fake_clock, state)
    outcomes = []
    for i in range(10):  # an agent in a loop, a second apart
        try:
            router.search(f"q{i}")
            outcomes.append("ok")
        except (RateLimited, CooldownActive) as exc:
            outcomes.append(type(exc).__name__)
        fake_clock.advance(1)
    assert outcomes[:4] == ["ok", "ok", "ok", "RateLimited"]
    assert set(outcomes[4:]) == {"CooldownActive"}
    assert len({r.key_fingerprint for r in fake_tavily.searches}) == 1
    assert len(fake_tavily.searches) == 4


def test_stale_cooldowns_serve_after_they_expire_without_any_command(
    fake_tavily: FakeTavily, fake_clock: FakeClock, state: Path
) -> None:
    fake_tavily.fail_next(503, times=4, path="/search")
    router = router_on(fake_tavily, fake_clock, state)
    with pytest.raises(NoKeyAvailable) as info:
        router.search("q")
    assert info.value.diagnosis is not None
    assert info.value.diagnosis.verdict == "upstream"
    fake_clock.advance(28 * 60)
    again = router_on(fake_tavily, fake_clock, state)  # a later process, same state file
    assert again.diagnose().verdict == "stale"
    assert again.search("q")["searchfuse"]["served_by"] == "tavily"


async def test_async_search_and_probe_against_the_simulator(
    fake_tavily: FakeTavily, fake_clock: FakeClock, state: Path
) -> None:
    router = router_on(fake_tavily, fake_clock, state)
    result = await router.asearch("async query", max_results=2)
    assert len(result["results"]) == 2
    probes = await router.atest_keys()
    assert [p.ok for p in probes] == [True] * 4
    assert [r.path for r in fake_tavily.requests[-4:]] == ["/usage"] * 4
    await router.aclose()
