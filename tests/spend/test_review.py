"""Spend control under attack: clocks that disagree at a period's end, answers whose
stated cost is garbage, and the figures people and models read."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from searchfuse import (
    BadRequest,
    Budget,
    BudgetExhausted,
    ConfigError,
    NoKeyAvailable,
    Router,
    guard,
    spend_scope,
)
from searchfuse.router.state import MemoryStore, Store
from searchfuse.testing import FakeClock, FakeExa, FakeTavily

from .conftest import K1

#: 2026-12-04 00:00:00 UTC, a UTC midnight; 2027-01-01 00:00:00 UTC, a month's start.
MIDNIGHT = 1796342400.0
NEW_YEAR = 1798761600.0
EXA_KEY = "exa-test-key-0001"


def tavily(clock: FakeClock, *budgets: Budget, **options: Any) -> tuple[FakeTavily, Router]:
    """A simulated Tavily and a router with `budgets` on a store of its own."""
    fake = FakeTavily([K1], clock=clock)
    router = Router(
        [K1],
        state=MemoryStore(),
        clock=clock,
        sleep=clock.advance,
        transport=fake.transport(),
        async_transport=fake.transport(),
        budgets=list(budgets),
        **options,
    )
    return fake, router


def two_processes(
    store_factory: Callable[[], Store], budget: Budget, behind: float, ahead: float
) -> tuple[FakeTavily, Router, Router]:
    """Two routers on one store whose clocks read `behind` and `ahead` (a skew)."""
    fake = FakeTavily([K1], clock=FakeClock(ahead))

    def router(now: float) -> Router:
        clock = FakeClock(now)
        return Router(
            [K1],
            state=store_factory(),
            clock=clock,
            sleep=clock.advance,
            transport=fake.transport(),
            budgets=[budget],
            pace=False,
        )

    return fake, router(behind), router(ahead)


@pytest.mark.parametrize(
    ("period", "boundary"), [("day", MIDNIGHT), ("month", NEW_YEAR)], ids=["day", "month"]
)
def test_clocks_skewed_across_a_periods_end_never_serve_more_than_the_limit(
    store_factory: Callable[[], Store], period: str, boundary: float
) -> None:
    """One process has passed midnight, another is two seconds behind: the period the
    fleet is in is the later one, and neither process resets the other's tally."""
    fake, behind, ahead = two_processes(
        store_factory, Budget(3, per="router", period=period), boundary - 1, boundary + 1
    )  # type: ignore[arg-type]
    served = 0
    for i in range(6):
        for router in (ahead, behind):
            try:
                router.search(f"query {i} {id(router)}")
                served += 1
            except BudgetExhausted:
                pass
    assert served == 3
    assert len(fake.searches) == 3
    # The later period's tally holds all three, as both processes report it.
    assert [b.used for b in ahead.budgets()] == [3.0]


def test_a_process_behind_the_fleet_gives_back_to_the_period_it_charged(
    store_factory: Callable[[], Store],
) -> None:
    fake, behind, ahead = two_processes(
        store_factory, Budget(2, per="router", period="day"), MIDNIGHT - 1, MIDNIGHT + 1
    )
    ahead.search("the new day's first")
    fake.fail_next(400, path="/search")
    with pytest.raises(BadRequest):  # refused upstream: given back
        behind.search("refused upstream")
    behind.search("the new day's second")
    with pytest.raises(BudgetExhausted):
        ahead.search("a third")
    assert len(fake.searches) == 3  # the failed one included
    assert [b.used for b in ahead.budgets()] == [2.0]


@pytest.mark.parametrize(
    ("now", "left", "label"),
    [
        (MIDNIGHT - 0.1, 0.1, "23:59:59.9 UTC"),
        (1835395199.5, 0.5, "the end of a leap day, 2028-02-29"),
        (NEW_YEAR - 0.25, 0.25, "the end of December"),
    ],
)
def test_a_day_ends_at_the_next_utc_midnight_to_the_fraction(
    now: float, left: float, label: str
) -> None:
    clock = FakeClock(now)
    fake, router = tavily(clock, Budget(1, per="router", period="day"))
    router.search("the last search of the day")
    with pytest.raises(BudgetExhausted) as refused:
        router.search("one more")
    assert refused.value.retry_after == pytest.approx(left), label
    clock.advance(left)
    router.search("a new day")
    assert len(fake.searches) == 2


# -- the cost an answer states ---------------------------------------------------------------


def exa_saying(fake: FakeExa, total: str) -> httpx.MockTransport:
    """The simulated Exa's answers, with `costDollars.total` replaced by the JSON text `total`."""

    def handle(request: httpx.Request) -> httpx.Response:
        answer = fake.handle(request)
        if answer.status_code != 200:
            return answer
        body = json.loads(answer.content)
        body["costDollars"] = {"total": "@total@"}
        text = json.dumps(body).replace('"@total@"', total)
        return httpx.Response(200, content=text.encode(), headers=answer.headers)

    return httpx.MockTransport(handle)


@pytest.mark.parametrize(
    ("total", "settled"),
    [
        ("0.012", 0.012),  # plausible: the answer's own figure
        ("0", 0.0),  # not charged
        ("1" + "0" * 400, 0.007),  # beyond any float: the list price
        ("500", 0.007),  # no search costs 500 USD
        ("-1", 0.007),
        ("1e999", 0.007),
        ('"0.5"', 0.007),
        ("true", 0.007),
        ("null", 0.007),
    ],
)
def test_exas_stated_dollars_settle_a_usd_budget_only_when_plausible(
    total: str, settled: float
) -> None:
    clock = FakeClock(MIDNIGHT)
    fake = FakeExa([EXA_KEY], clock=clock)
    router = Router(
        {"exa": [EXA_KEY]},
        state=MemoryStore(),
        clock=clock,
        transport=exa_saying(fake, total),
        budgets=[Budget(1.0, unit="usd", per="router"), Budget(5, unit="credits", per="router")],
    )
    result = router.search("what does it cost")
    assert [row["used"] for row in result["searchfuse"]["budgets"]] == [
        pytest.approx(settled),
        1.0,
    ]
    assert [b.used for b in router.budgets()] == [pytest.approx(settled), 1.0]


# -- the figures people and models read ------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "shown", "said"),
    [
        (Budget(12_345_678, per="router"), "12345678 searches per router", "12345678 web searches"),
        (Budget(0.001, unit="usd", per="router"), "0.001 usd per router", "0.001 USD"),
        (Budget(20, unit="usd", per="router"), "20 usd per router", "20.00 USD"),
        (Budget(2.5, unit="credits", per="user"), "2.5 credits per user", "2.5 search credits"),
    ],
)
def test_limits_are_written_out_whole_for_people_and_models(
    budget: Budget, shown: str, said: str
) -> None:
    assert budget.describe() == shown
    assert Budget.parse(shown) == budget  # what status shows, SEARCHFUSE_BUDGETS reads
    refused = BudgetExhausted(budget, budget.limit)
    assert said in refused.message
    assert "e+" not in refused.message


def test_status_shows_a_large_use_whole() -> None:
    _, router = tavily(FakeClock(MIDNIGHT), Budget(10_000_000, unit="credits", per="router"))
    with spend_scope(conversation="c-1"):
        router.search("one")
    line = router.budgets()[0].summary(router.now())
    assert line == "10000000 credits per router: 1 used, 9999999 left"


# -- what a failure after the request was sent costs -----------------------------------------


def test_an_answer_that_never_came_stays_counted_and_a_connection_never_made_is_given_back(
    clock: FakeClock,
) -> None:
    """As docs/spend.md says: a read timeout may have been served and charged by the
    provider, so it stays counted; a connection that failed was never a request."""
    fake, router = tavily(clock, Budget(5, per="router"), max_keys_per_call=1)
    for fault, counted in (("connect", 0.0), ("timeout", 1.0)):
        fake.fail_next(fault, path="/search")  # type: ignore[arg-type]
        with pytest.raises(NoKeyAvailable):
            router.search(f"fails: {fault}")
        assert [b.used for b in router.budgets()] == [counted], fault
        clock.advance(3600)  # past the key's cooldown


async def test_retries_on_429_count_only_the_attempt_that_was_served(clock: FakeClock) -> None:
    budgets = Budget(2, per="router"), Budget(10, unit="credits", per="router")
    fake, router = tavily(clock, *budgets, on_429="retry")
    fake.fail_next(429, times=2, retry_after=1, path="/search")
    result = await router.asearch("served on the third attempt", search_depth="advanced")
    assert [row["used"] for row in result["searchfuse"]["budgets"]] == [1.0, 2.0]
    assert len(fake.searches) == 3  # two 429s reached Tavily, and were not charged
    await router.aclose()


# -- cache hits ----------------------------------------------------------------------------


def test_a_cache_hit_is_free_and_shows_no_other_conversations_budget(clock: FakeClock) -> None:
    fake, router = tavily(clock, Budget(3, per="conversation"))

    @guard(router=router, clock=clock, cache_match="near", per_turn=None)
    def web_search(query: str) -> dict:
        raise AssertionError("delegated to the router")

    with spend_scope(conversation="c-1"):
        web_search("python 3.13 release notes")
        first = web_search("python 3.12 release notes")
    assert first["searchfuse"]["budgets"][0]["used"] == 2.0  # c-1's own, this search included
    with spend_scope(conversation="c-2"):
        hit = web_search("Python 3.12 release notes?")
    assert len(fake.searches) == 2  # the hit sent nothing
    assert hit["results"] == first["results"]
    # Nothing was counted for c-2, and c-1's figures are not c-2's to read.
    assert "budgets" not in hit["searchfuse"]
    assert [b.used for b in router.budgets(conversation="c-2")] == [0.0]
    assert first["searchfuse"]["budgets"][0]["used"] == 2.0  # the searcher's own result kept


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1e400 searches per router", "the limit '1e400' must be a finite number of 0 or more"),
        ("nan searches per router", "the limit 'nan' must be a finite number"),
        ("-3 searches per user", "the limit '-3' must be a finite number of 0 or more"),
        ("10 tokens per user", "'10 tokens per user': Budget(unit='tokens')"),
    ],
)
def test_a_bad_budget_in_the_environment_quotes_what_was_written(
    text: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEARCHFUSE_BUDGETS", f"10 searches per conversation, {text}")
    monkeypatch.setenv("TAVILY_API_KEYS", K1)
    with pytest.raises(ConfigError) as refused:
        Router.from_env(state=None)
    assert says in str(refused.value)
    assert "LIMIT UNIT per WHOSE" in str(refused.value)  # the fix says how to write one
    assert "inf" not in str(refused.value).replace("finite", "")


def test_a_budget_is_read_whatever_the_case_of_its_words() -> None:
    assert Budget.parse("10 Searches per User a Day") == Budget(10, per="user", period="day")
