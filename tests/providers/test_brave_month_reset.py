"""Brave's month is its own cycle: `X-RateLimit-Reset` says when it ends, not the calendar.

A key whose month remainder reaches 0 is exhausted until that reset, and every surface
(the refusal, `status`, `diagnose`) names the time; once the router's clock passes it,
the key serves again, whether or not a UTC calendar month has turned meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from searchfuse import NoKeyAvailable, Router
from searchfuse.router._verdict import iso
from searchfuse.router.state._month import month_of
from searchfuse.testing import BRAVE_TEST_KEYS, FakeBrave, FakeClock
from searchfuse.testing._brave import MONTH

KEY = BRAVE_TEST_KEYS[0]
#: Brave's cycle for this key ends two hours from the test's start.
RESET_IN = 7200.0


@pytest.fixture
def brave(fake_clock: FakeClock) -> Iterator[tuple[FakeBrave, str]]:
    fake = FakeBrave(clock=fake_clock)
    fake.add_key(KEY, rate=20, balance=2)
    # The key's month began almost 30 days ago: it ends long before the calendar's.
    fake.month_started = fake_clock() - MONTH + RESET_IN
    with fake.serve() as url:
        yield fake, url


def _spend_the_month(router: Router, clock: FakeClock, mode: str) -> None:
    for i in range(2):
        search(router, mode, f"q{i}")
        clock.advance(1)


def search(router: Router, mode: str, query: str) -> dict:
    if mode == "sync":
        return router.search(query)
    return asyncio.run(router.asearch(query))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_spent_month_is_exhausted_until_brave_resets_it(
    brave: tuple[FakeBrave, str], fake_clock: FakeClock, tmp_path: Path, mode: str
) -> None:
    fake, url = brave
    start = fake_clock()
    reset_at = start + RESET_IN
    state = tmp_path / "searchfuse.db"
    router = Router({"brave": [KEY]}, base_urls={"brave": url}, clock=fake_clock, state=state)
    _spend_the_month(router, fake_clock, mode)
    assert month_of(reset_at + 60) == month_of(start)  # no calendar turn in this test

    (status,) = router.status()
    assert status.state == "exhausted"
    assert status.blocked_reason is not None and iso(reset_at) in status.blocked_reason
    with pytest.raises(NoKeyAvailable) as raised:
        search(router, mode, "the month is spent")
    diagnosis = raised.value.diagnosis
    assert diagnosis is not None and diagnosis.verdict == "exhausted"
    assert iso(reset_at) in diagnosis.advice and iso(reset_at) in str(raised.value.reasons)
    assert router.diagnose().verdict == "exhausted"
    assert router.diagnose().step("state").evidence[0]["state"] == "exhausted"
    (event,) = [e for e in router.events() if e.kind == "exhausted"]
    assert event.until == reset_at and event.key == status.key
    assert len(fake.searches) == 2  # nothing was sent for the refused search

    # Brave's cycle ends on the router's clock: the key serves again, before any calendar turn.
    fake_clock.advance(reset_at - fake_clock() + 1)
    fake.reset_month()
    assert router.status()[0].state == "available"
    assert search(router, mode, "a new cycle")["searchfuse"]["served_by"] == "brave"
    assert [r.status for r in fake.searches] == [200, 200, 200]


def test_a_spent_month_told_by_a_429_ends_at_brave_reset_too(
    brave: tuple[FakeBrave, str], fake_clock: FakeClock
) -> None:
    fake, url = brave
    reset_at = fake_clock() + RESET_IN
    # Another client spent the month: the router first hears of it from Brave's 429.
    fake.set_spent(KEY, 2)
    router = Router({"brave": [KEY]}, base_urls={"brave": url}, clock=fake_clock)
    with pytest.raises(NoKeyAvailable):
        router.search("q")
    assert [r.status for r in fake.searches] == [429]
    (status,) = router.status()
    assert status.state == "exhausted" and iso(reset_at) in (status.blocked_reason or "")
    fake_clock.advance(RESET_IN + 1)
    fake.reset_month()
    assert router.search("again")["searchfuse"]["served_by"] == "brave"
