"""`test_keys(spend=True)` is paced like every other request, over real HTTP on loopback.

A one-result search per key is a request like a search: it takes a slot in the key's
pacing window, waits for one within `max_wait`, or is not made (and says why).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest

from searchfuse import Router
from searchfuse.testing import FakeClock, FakeExa

KEYS = [f"0a1b2c3d-0000-4000-8000-00000000e5a{i}" for i in range(3)]
MODES = pytest.mark.parametrize("mode", ["sync", "async"])


@pytest.fixture
def exa(fake_clock: FakeClock) -> Iterator[tuple[FakeExa, str]]:
    fake = FakeExa(keys=KEYS, clock=fake_clock)
    with fake.serve() as url:
        yield fake, url


def _check(router: Router, mode: str) -> list:
    if mode == "sync":
        return router.test_keys(spend=True)
    return asyncio.run(router.atest_keys(spend=True))


def _gaps(fake: FakeExa) -> list[float]:
    """The shortest time between two requests with one key, per key that had two."""
    by_key: dict[str | None, list[float]] = {}
    for request in fake.searches:
        by_key.setdefault(request.key_fingerprint, []).append(request.time)
    return [min(b - a for a, b in itertools.pairwise(t)) for t in by_key.values() if len(t) > 1]


@MODES
def test_the_spent_checks_wait_for_each_key_s_rate(
    exa: tuple[FakeExa, str], fake_clock: FakeClock, mode: str
) -> None:
    fake, url = exa
    keys = {"exa": [{"key": k, "rate": "1/min"} for k in KEYS]}
    router = Router(
        keys, base_urls={"exa": url}, clock=fake_clock, sleep=fake_clock.advance, max_wait=90
    )
    for i in range(3):  # every key has just searched: its minute is used
        router.search(f"q{i}")
    results = _check(router, mode)
    assert [r.ok for r in results] == [True, True, True]
    assert len(fake.searches) == 6
    assert min(_gaps(fake)) >= 60  # never two requests with one key in a minute


@MODES
def test_a_check_that_would_wait_too_long_is_not_made(
    exa: tuple[FakeExa, str], fake_clock: FakeClock, mode: str
) -> None:
    fake, url = exa
    keys = {"exa": [{"key": k, "rate": "1/min"} for k in KEYS]}
    router = Router(keys, base_urls={"exa": url}, clock=fake_clock, max_wait=0)
    router.search("q")
    results = _check(router, mode)
    assert len(fake.searches) == 3  # the key that searched was not checked again
    (skipped,) = [r for r in results if r.status_code is None]
    assert "rate" in skipped.note and "not probed" not in skipped.note
    assert not _gaps(fake)
