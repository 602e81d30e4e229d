"""Serper answers 429 both for a rate limit and for credits run out: the diagnosis says
so, and a 429 that a pause did not cure parks the key longer each time, within the hour."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from searchfuse import CooldownActive, NoKeyAvailable, RateLimited, Router
from searchfuse.testing import SERPER_TEST_KEYS, FakeClock, FakeSerper

KEY = SERPER_TEST_KEYS[0]
SAYS = "a rate limit or credits run out (Serper answers 429 for both)"


@pytest.fixture
def serper(fake_clock: FakeClock) -> Iterator[tuple[FakeSerper, Router]]:
    fake = FakeSerper([KEY], clock=fake_clock)
    with fake.serve() as url:
        yield fake, Router({"serper": [KEY]}, base_urls={"serper": url}, clock=fake_clock)


def _parks(router: Router, clock: FakeClock, times: int) -> list[float]:
    waits = []
    for i in range(times):
        # The first 429 is a rate limit (the router is held); one a pause did not cure
        # may be credits run out: the key is parked, and the call refused as no key can serve.
        with pytest.raises(RateLimited if i == 0 else NoKeyAvailable) as raised:
            router.search("q")
        wait = raised.value.retry_after or 0.0
        waits.append(wait)
        with pytest.raises(CooldownActive if i == 0 else NoKeyAvailable):  # nothing is sent
            router.search("q")
        clock.advance(wait + 1)
    return waits


def test_spent_credits_park_the_key_longer_after_each_429_within_the_hour(
    serper: tuple[FakeSerper, Router], fake_clock: FakeClock
) -> None:
    fake, router = serper
    fake.set_balance(KEY, 0)
    assert _parks(router, fake_clock, 8) == [60, 120, 240, 480, 960, 1920, 3600, 3600]
    # One request per park reached Serper: 8 in 2 h 8 min, not one a minute.
    assert len(fake.searches) == 8


def test_a_rate_limit_that_a_pause_cures_parks_as_usual(
    serper: tuple[FakeSerper, Router], fake_clock: FakeClock
) -> None:
    fake, router = serper
    for _ in range(2):
        fake.fail_next(429, retry_after=30, detail="Too many requests.")
        assert _parks(router, fake_clock, 1) == [30]
        assert router.search("q")["searchfuse"]["served_by"] == "serper"
    assert [r.status for r in fake.searches] == [429, 200, 429, 200]


def test_the_diagnosis_and_the_status_say_what_a_serper_429_may_mean(
    serper: tuple[FakeSerper, Router],
) -> None:
    fake, router = serper
    fake.set_balance(KEY, 0)
    with pytest.raises(RateLimited):
        router.search("q")
    (status,) = router.status()
    assert status.provider == "serper" and SAYS in (status.last_error or "")
    diagnosis = router.diagnose()
    assert SAYS in str(diagnosis)
    assert diagnosis.by_provider == {"serper": "cooling"}
    assert KEY not in str(diagnosis) + repr(diagnosis.to_dict())
