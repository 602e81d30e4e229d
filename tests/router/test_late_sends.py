"""Pacing on a loaded machine: a request that leaves late after its grant widens the margin.

Tavily counts a request when it arrives; pacing counts it when it is granted.
When the process stalls between the two (it waits for a core, a commit waits
for the disk), the next grant a window later can arrive less than a window
after it, and Tavily answers 429. The router notes how late its requests
leave and keeps its margin above that, within 5% of the window.
"""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from searchfuse import RateLimited, Router
from searchfuse.router._rates import Lateness
from searchfuse.router.config import KeyEntry
from searchfuse.router.state import MemoryStore
from searchfuse.testing import FakeClock, FakeTavily

K1 = "tvly-dev-test0001"


class StallAfterGrant(MemoryStore):
    """A store whose process stalls right after granting, as a loaded machine does."""

    def __init__(self, clock: FakeClock, stalls: list[float]) -> None:
        super().__init__()
        self.clock = clock
        self.stalls = stalls

    def grant(self, now: float, fp: str, **options: Any) -> Any:
        granted = super().grant(now, fp, **options)
        if self.stalls:
            self.clock.advance(self.stalls.pop(0))
        return granted


def searches_at(stalls: list[float]) -> tuple[list[int], list[float]]:
    """Two searches on a one-a-minute key; the statuses Tavily gave and when they arrived."""
    clock = FakeClock()
    fake = FakeTavily((K1,), clock=clock)
    fake.set_rpm(K1, 1)
    router = Router(
        [KeyEntry(K1, rpm=1)],
        clock=clock,
        sleep=clock.advance,
        transport=fake.transport(),
        state=StallAfterGrant(clock, stalls),
        max_wait=120,
        deadline=120,
    )
    start = clock()
    for query in ("first", "second"):
        with contextlib.suppress(RateLimited):  # a 429 is what the test looks for
            router.search(query)
    return [r.status for r in fake.searches], [r.time - start for r in fake.searches]


def test_a_request_that_left_late_does_not_make_the_next_one_early() -> None:
    # The first request leaves 2 s after its grant; the second would be granted
    # 61 s after the first grant and arrive 59 s after the first request.
    statuses, arrived = searches_at([2.0, 0.0])

    assert statuses == [200, 200]
    assert arrived == [2.0, 63.0]


def test_on_time_requests_keep_the_margin_at_a_sixtieth() -> None:
    # Nothing late: the second search is granted 61 s after the first, not later.
    statuses, arrived = searches_at([])

    assert statuses == [200, 200]
    assert arrived == [0.0, 61.0]


def test_the_margin_never_passes_five_percent_of_the_window() -> None:
    # A 10 s stall would ask for a 20 s margin; 3 s is the most, so the key still
    # serves 95% of its rate (here Tavily refuses the second: the stall outran it).
    _, arrived = searches_at([10.0, 0.0])

    assert arrived == [10.0, 63.0]


@given(st.lists(st.floats(min_value=-1.0, max_value=10.0), max_size=60))
def test_the_record_holds_the_longest_of_the_last_delays(delays: list[float]) -> None:
    lateness = Lateness(size=8)
    for n, seconds in enumerate(delays, 1):
        lateness.note(seconds)
        assert lateness.seen == max(0.0, *delays[max(0, n - 8) : n])
