"""`test_keys(spend=True)` checks a key without a free probe with a one-result search:
a key that serves it is a key the router serves with again, and the search counts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from searchfuse import NoKeyAvailable, Router
from searchfuse.testing import BRAVE_TEST_KEYS, EXA_TEST_KEYS, FakeBrave, FakeClock, FakeExa

EXA_KEY = EXA_TEST_KEYS[0]
BRAVE_KEY = BRAVE_TEST_KEYS[0]


@pytest.fixture
def exa(fake_clock: FakeClock) -> Iterator[tuple[FakeExa, str]]:
    fake = FakeExa(keys=[EXA_KEY], clock=fake_clock)
    with fake.serve() as url:
        yield fake, url


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("fault", [402, 401])
def test_a_key_that_serves_the_check_serves_searches_again(
    exa: tuple[FakeExa, str], fake_clock: FakeClock, fault: int, mode: str
) -> None:
    fake, url = exa
    router = Router({"exa": [EXA_KEY]}, base_urls={"exa": url}, clock=fake_clock)
    fake.fail_next(fault)  # credits ran out, or the key was refused, and then fixed
    with pytest.raises(NoKeyAvailable):
        router.search("before")
    (before,) = router.status()
    assert before.state in ("exhausted", "cooling")
    checked = (
        router.test_keys(spend=True)
        if mode == "sync"
        else asyncio.run(router.atest_keys(spend=True))
    )
    assert [(r.provider, r.status_code) for r in checked] == [("exa", 200)]
    (after,) = router.status()
    assert after.state == "available" and after.searches == 1
    assert router.search("after")["searchfuse"]["served_by"] == "exa"
    assert [r.status for r in fake.searches] == [fault, 200, 200]


def test_the_check_reads_brave_s_headers_like_any_answer(fake_clock: FakeClock) -> None:
    fake = FakeBrave(keys=[BRAVE_KEY], clock=fake_clock)
    fake.set_spent(BRAVE_KEY, 1999)
    with fake.serve() as url:
        router = Router({"brave": [BRAVE_KEY]}, base_urls={"brave": url}, clock=fake_clock)
        (checked,) = router.test_keys(spend=True)
        assert checked.status_code == 200
        (status,) = router.status()
        # The check was the month's last search: nothing more is sent this month.
        assert status.state == "exhausted" and status.key_limit == 2000
        with pytest.raises(NoKeyAvailable):
            router.search("next")
    assert len(fake.searches) == 1
