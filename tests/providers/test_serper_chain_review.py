"""Serper at the head of a chain, out of credits: its 429 says so no more than a rate
limit does. The first is a rate limit (rule 1: the caller waits, nobody else serves); one
that a pause did not cure is read as credits run out, and the next provider serves."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from searchfuse import CooldownActive, RateLimited, Router
from searchfuse.testing import EXA_TEST_KEYS, SERPER_TEST_KEYS, FakeClock, FakeExa, FakeSerper

SERPER_KEY = SERPER_TEST_KEYS[0]
EXA_KEY = EXA_TEST_KEYS[0]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_429_a_pause_did_not_cure_lets_the_next_provider_serve(
    fake_clock: FakeClock, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    serper = FakeSerper([SERPER_KEY], clock=fake_clock)
    exa = FakeExa([EXA_KEY], clock=fake_clock)
    serper.set_balance(SERPER_KEY, 0)  # credits run out: every search is a 429
    with serper.serve() as serper_url, exa.serve() as exa_url:
        router = Router(
            {"serper": [SERPER_KEY], "exa": [EXA_KEY]},
            base_urls={"serper": serper_url, "exa": exa_url},
            clock=fake_clock,
        )

        def search(query: str) -> dict[str, Any]:
            if mode == "sync":
                return router.search(query)
            return asyncio.run(router.asearch(query))

        caplog.set_level(logging.INFO, "searchfuse")
        with pytest.raises(RateLimited) as first:
            search("one")
        with pytest.raises(CooldownActive):  # the hold: no provider serves meanwhile
            search("two")
        assert exa.searches == []
        fake_clock.advance((first.value.retry_after or 0) + 1)
        # The pause did not cure it: Serper's key is parked longer, Exa serves.
        results = [search(f"q{i}") for i in range(5)]
    assert [r["searchfuse"]["served_by"] for r in results] == ["exa"] * 5
    assert results[0]["searchfuse"]["degraded"]["from"] == "serper"
    assert [r.status for r in serper.searches] == [429, 429]
    assert len(exa.searches) == 5
    (warning,) = [r.getMessage() for r in caplog.records if "passed over" in r.getMessage()]
    assert warning.startswith("Serper is passed over") and "Exa serves instead" in warning
