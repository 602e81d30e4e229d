"""Pacing: no request that would exceed a key's rate leaves the router, in any process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from searchfuse import ConfigError, RateLimited, Router, Throttled
from searchfuse.router.config import KeyEntry, key_rpm
from searchfuse.router.state import SqliteStore
from searchfuse.testing import FakeClock, FakeTavily

K1, K2 = "tvly-dev-test0001", "tvly-dev-test0002"


def setup(
    rpm: int, keys: tuple[str, ...] = (K1,), **options: object
) -> tuple[FakeClock, FakeTavily, Router]:
    clock = FakeClock()
    fake = FakeTavily(keys, clock=clock)
    for key in keys:
        fake.set_rpm(key, rpm)
    router = Router(
        [KeyEntry(k, rpm=rpm) for k in keys],
        clock=clock,
        sleep=clock.advance,
        transport=fake.transport(),
        **options,  # type: ignore[arg-type]
    )
    return clock, fake, router


def statuses(fake: FakeTavily) -> list[int]:
    return [r.status for r in fake.searches]


def test_a_full_window_refuses_without_sending(tmp_path: Path) -> None:
    clock, fake, router = setup(3, max_wait=0.0)
    for _ in range(3):
        router.search("q")
    clock.advance(10)
    with pytest.raises(Throttled) as caught:
        router.search("q")
    assert statuses(fake) == [200, 200, 200]  # nothing sent for the fourth
    assert caught.value.reason == "paced"
    # The first request leaves Tavily's 60 s window at 60 s; pacing adds one second.
    assert caught.value.retry_after == pytest.approx(51.0)
    assert "51 seconds" in caught.value.message


def test_waits_within_max_wait_then_sends() -> None:
    clock, fake, router = setup(2, max_wait=70.0, deadline=90.0)
    start = clock()
    for _ in range(3):
        router.search("q")
    assert statuses(fake) == [200, 200, 200]
    assert clock() - start == pytest.approx(61.0)


def test_a_wait_longer_than_the_deadline_is_refused_at_once() -> None:
    clock, fake, router = setup(2, max_wait=120.0, deadline=30.0)
    router.search("q")
    router.search("q")
    start = clock()
    with pytest.raises(Throttled) as caught:
        router.search("q")
    assert statuses(fake) == [200, 200]  # nothing sent for the third
    assert clock() == start  # no wait that the deadline would cut short
    assert caught.value.retry_after == pytest.approx(61.0)


def test_another_key_with_room_serves_first() -> None:
    _, fake, router = setup(2, keys=(K1, K2), max_wait=0.0)
    for _ in range(4):
        router.search("q")
    assert sorted(fake.requests_by_key("/search").values()) == [2, 2]
    with pytest.raises(Throttled):
        router.search("q")
    assert len(fake.searches) == 4


def test_pace_false_sends_and_the_429_is_handled_as_before() -> None:
    _, fake, router = setup(2, pace=False)
    router.search("q")
    router.search("q")
    with pytest.raises(RateLimited):
        router.search("q")
    assert statuses(fake) == [200, 200, 429]


def test_two_routers_on_one_database_share_the_rate(tmp_path: Path) -> None:
    clock = FakeClock()
    fake = FakeTavily([K1], clock=clock)
    fake.set_rpm(K1, 4)
    path = tmp_path / "searchfuse.db"
    routers = [
        Router(
            [KeyEntry(K1, rpm=4)],
            state=SqliteStore(path),
            clock=clock,
            sleep=clock.advance,
            transport=fake.transport(),
            max_wait=0.0,
        )
        for _ in range(2)
    ]
    for i in range(4):
        routers[i % 2].search("q")
    for router in routers:
        with pytest.raises(Throttled):
            router.search("q")
    assert statuses(fake) == [200] * 4


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rpm=st.integers(1, 6),
    gaps=st.lists(st.floats(0.0, 30.0, allow_nan=False), min_size=1, max_size=40),
)
def test_no_sequence_of_searches_draws_a_429(rpm: int, gaps: list[float]) -> None:
    clock, fake, router = setup(rpm, keys=(K1, K2), max_wait=0.0)
    for gap in gaps:
        clock.advance(gap)
        try:
            router.search("q")
        except Throttled as exc:
            assert exc.retry_after is not None and 0 < exc.retry_after <= 61.0
    assert 429 not in statuses(fake)


def test_rates_from_the_keys_file_the_environment_and_the_kind_of_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SEARCHFUSE_RPM", raising=False)
    assert key_rpm(KeyEntry("tvly-dev-test0001")) == 100
    assert key_rpm(KeyEntry("tvly-prod-test0001")) == 1000
    assert key_rpm(KeyEntry("tvly-test0001")) == 1000
    monkeypatch.setenv("SEARCHFUSE_RPM", "40")
    assert key_rpm(KeyEntry("tvly-dev-test0001")) == 40
    assert key_rpm(KeyEntry("tvly-dev-test0001", rpm=7)) == 7
    monkeypatch.setenv("SEARCHFUSE_RPM", "fast")
    with pytest.raises(ConfigError, match="SEARCHFUSE_RPM"):
        key_rpm(KeyEntry("tvly-dev-test0001"))
    config = tmp_path / "config" / "keys.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"format_version": 2, "keys": [{"key": K1, "rpm": 0}]}))
    with pytest.raises(ConfigError, match=r"keys\[0\]\.rpm"):
        Router.from_config(config)
    config.write_text(json.dumps({"format_version": 2, "keys": [{"key": K1, "rpm": 12}]}))
    assert Router.from_config(config, state=None).keys[0].rpm == 12
