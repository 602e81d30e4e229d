"""Brave's X-RateLimit-* figures beyond any real window or month, from a raw loopback
server: the key is paced and parked within Brave's own windows (a second, a month), and
every later call is answered, never a crash of the router's bookkeeping."""

from __future__ import annotations

import asyncio

import pytest

from searchfuse import NoKeyAvailable, Router, Throttled
from searchfuse.testing import FakeClock
from tests.providers.test_brave_headers_review import KEY, RawBrave, raw  # noqa: F401

#: Seconds in Brave's longest window (its month) and a little more.
A_MONTH_AND_A_BIT = 32 * 86400.0


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    "headers",
    [
        # The month spent, with a reset far beyond any month.
        {
            "X-RateLimit-Limit": "1, 15000",
            "X-RateLimit-Remaining": "1, 0",
            "X-RateLimit-Reset": "1, 99999999999999999999999999999",
        },
        # ... and a month window (the policy) beyond any month.
        {
            "X-RateLimit-Limit": "1, 15000",
            "X-RateLimit-Remaining": "1, 0",
            "X-RateLimit-Policy": "1;w=1, 15000;w=99999999999999999999999",
        },
    ],
)
def test_a_month_reset_beyond_any_month_parks_the_key_for_a_month_at_most(
    raw: RawBrave,  # noqa: F811
    fake_clock: FakeClock,
    headers: dict[str, str],
    mode: str,
) -> None:
    raw.headers, raw.searches = headers, 0
    router = Router({"brave": [KEY]}, base_urls={"brave": raw.url}, clock=fake_clock)
    ask = router.search if mode == "sync" else lambda q: asyncio.run(router.asearch(q))
    assert ask("the month's last")["searchfuse"]["served_by"] == "brave"
    with pytest.raises(NoKeyAvailable) as refused:
        ask("after it")
    assert refused.value.diagnosis is not None and refused.value.diagnosis.verdict == "exhausted"
    (status,) = router.status()
    assert status.state == "exhausted"
    assert status.cooldown_until is not None
    assert status.cooldown_until - fake_clock() <= A_MONTH_AND_A_BIT
    assert raw.searches == 1


@pytest.mark.parametrize(
    "limit",
    [
        "9" * 400 + ", 15000",  # a figure beyond any float
        "\u00b2, 15000",  # a digit that is not an ASCII one
    ],
)
def test_a_figure_that_is_no_number_keeps_one_a_second(
    raw: RawBrave,  # noqa: F811
    fake_clock: FakeClock,
    limit: str,
) -> None:
    raw.headers = {"X-RateLimit-Limit": limit, "X-RateLimit-Remaining": "1, 9000"}
    raw.searches = 0
    router = Router({"brave": [KEY]}, base_urls={"brave": raw.url}, clock=fake_clock, max_wait=0)
    assert router.search("first")["searchfuse"]["served_by"] == "brave"
    with pytest.raises(Throttled):
        router.search("second")
    fake_clock.advance(2)
    assert router.search("third")["searchfuse"]["served_by"] == "brave"
    assert raw.searches == 2


def test_a_pace_window_beyond_a_month_is_not_believed(
    raw: RawBrave,  # noqa: F811
    fake_clock: FakeClock,
) -> None:
    raw.headers = {
        "X-RateLimit-Limit": "1, 15000",
        "X-RateLimit-Remaining": "1, 9000",
        "X-RateLimit-Policy": "1;w=99999999999999, 15000;w=2592000",
    }
    raw.searches = 0
    router = Router({"brave": [KEY]}, base_urls={"brave": raw.url}, clock=fake_clock, max_wait=0)
    assert router.search("first")["searchfuse"]["served_by"] == "brave"
    fake_clock.advance(2)
    assert router.search("second")["searchfuse"]["served_by"] == "brave"
    assert raw.searches == 2
