"""Brave's X-RateLimit-* headers, on every answer, correct the key's pace and its month."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from searchfuse import NoKeyAvailable, Router, Throttled
from searchfuse.testing import BRAVE_TEST_KEYS, FakeBrave, FakeClock, FakeExa

KEY = BRAVE_TEST_KEYS[0]
EXA_KEY = "00000000-0000-4000-8000-0000000e0001"


@pytest.fixture
def brave(fake_clock: FakeClock) -> Iterator[tuple[FakeBrave, str]]:
    fake = FakeBrave(clock=fake_clock)
    fake.add_key(KEY, rate=20, balance=3)  # a plan of 20 a second, 3 left this month
    with fake.serve() as url:
        yield fake, url


def test_the_headers_set_the_pace_above_the_free_plans_default(
    brave: tuple[FakeBrave, str], fake_clock: FakeClock
) -> None:
    fake, url = brave
    fake.set_balance(KEY, 1000)
    router = Router({"brave": [KEY]}, base_urls={"brave": url}, clock=fake_clock, max_wait=0.0)
    # Unknown plan: one a second (the free plan). The first answer says 20.
    served = [router.search(f"q{i}")["searchfuse"]["served_by"] for i in range(20)]
    assert served == ["brave"] * 20
    with pytest.raises(Throttled):  # the 21st in the same second: nothing is sent
        router.search("one too many")
    assert len(fake.searches) == 20 and all(r.status == 200 for r in fake.searches)


def test_a_configured_slower_pace_is_kept(
    brave: tuple[FakeBrave, str], fake_clock: FakeClock
) -> None:
    fake, url = brave
    fake.set_balance(KEY, 1000)
    keys = {"brave": [{"key": KEY, "rate": "2/s"}]}
    router = Router(keys, base_urls={"brave": url}, clock=fake_clock, max_wait=0.0)
    router.search("a")
    router.search("b")
    with pytest.raises(Throttled):
        router.search("c")
    assert len(fake.searches) == 2


def test_a_month_at_zero_is_exhausted_without_another_request(
    brave: tuple[FakeBrave, str], fake_clock: FakeClock, tmp_path: Path
) -> None:
    fake, url = brave
    exa = FakeExa(keys=[EXA_KEY], clock=fake_clock)
    state = tmp_path / "searchfuse.db"
    with exa.serve() as exa_url:
        alone = Router({"brave": [KEY]}, base_urls={"brave": url}, clock=fake_clock, state=state)
        for i in range(3):
            alone.search(f"q{i}")
            fake_clock.advance(1)
        (status,) = alone.status()
        assert status.state == "exhausted"
        with pytest.raises(NoKeyAvailable) as raised:
            alone.search("the month is spent")
        assert raised.value.diagnosis is not None
        assert raised.value.diagnosis.verdict == "exhausted"
        # In a chain sharing the store, Exa serves; Brave hears nothing more this month.
        chain = Router(
            {"brave": [KEY], "exa": [EXA_KEY]},
            base_urls={"brave": url, "exa": exa_url},
            clock=fake_clock,
            state=state,
        )
        result = chain.search("next")
    assert result["searchfuse"]["served_by"] == "exa"
    assert result["searchfuse"]["degraded"]["reason"] == "exhausted"
    assert len(fake.searches) == 3 and [r.status for r in fake.searches] == [200] * 3
