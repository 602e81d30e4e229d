"""Budgets through the router on every store: each scope and period on the fake clock,
refusals sent nothing, and what was given back or settled after the answer."""

from __future__ import annotations

import json

import httpx
import pytest

from searchfuse import (
    BadRequest,
    Budget,
    BudgetExhausted,
    CooldownActive,
    NoKeyAvailable,
    RateLimited,
    SearchFailed,
    Throttled,
    spend_scope,
)
from searchfuse.router import KeyEntry
from searchfuse.testing import FakeClock, FakeTavily

from .conftest import K1, Make


def searches(fake: FakeTavily) -> int:
    return len(fake.searches)


def test_a_conversation_budget_serves_its_limit_then_refuses_unsent(make: Make) -> None:
    fake, router = make(budgets=[Budget(3, unit="searches", per="conversation")])
    with spend_scope(conversation="c-1"):
        for i in range(3):
            router.search(f"q{i}")
        with pytest.raises(BudgetExhausted) as refused:
            router.search("one too many")
    assert searches(fake) == 3
    exc = refused.value
    assert (exc.reason, exc.used, exc.limit, exc.retry_after) == ("budget", 3, 3, None)
    assert exc.budget == Budget(3, unit="searches", per="conversation")
    assert "this conversation has used its 3 web searches" in exc.message
    assert "answer from what you have" in exc.message
    with spend_scope(conversation="c-2"):
        router.search("another conversation has its own budget")
    router.search("outside any scope: not counted against a conversation budget")
    assert searches(fake) == 5


def test_a_user_budget_spans_that_users_conversations(make: Make) -> None:
    fake, router = make(budgets=[Budget(2, per="user")])
    with spend_scope(user="alice", conversation="c-1"):
        router.search("a")
    with spend_scope(user="alice"), spend_scope(conversation="c-2"):
        router.search("b")  # the inner scope keeps the outer user
        with pytest.raises(BudgetExhausted, match="this user has used their 2 web searches"):
            router.search("c")
    with spend_scope(user="bob"):
        router.search("d")
    assert searches(fake) == 3


def test_a_router_budget_counts_every_caller_scoped_or_not(make: Make) -> None:
    fake, router = make(budgets=[Budget(2, per="router")])
    router.search("a")
    with spend_scope(user="alice", conversation="c-1"):
        router.search("b")
        with pytest.raises(BudgetExhausted):
            router.search("c")
    with pytest.raises(BudgetExhausted):
        router.search("d")
    assert searches(fake) == 2


def test_a_daily_budget_resets_at_utc_midnight_and_says_when(make: Make, clock: FakeClock) -> None:
    fake, router = make(budgets=[Budget(2, per="router", period="day")])
    router.search("a")
    clock.advance(6 * 3600)
    router.search("b")
    with pytest.raises(BudgetExhausted) as refused:
        router.search("c")
    assert refused.value.retry_after == pytest.approx(6 * 3600)  # 18:00 -> midnight
    assert "resets in 6.0 h" in refused.value.message
    clock.advance(6 * 3600 - 1)
    with pytest.raises(BudgetExhausted):
        router.search("23:59:59 is still today")
    clock.advance(1)
    router.search("a new UTC day")
    assert searches(fake) == 3


def test_a_monthly_budget_resets_on_the_first_of_the_next_month(
    make: Make, clock: FakeClock
) -> None:
    fake, router = make(budgets=[Budget(1, per="user", period="month")])
    with spend_scope(user="alice"):
        router.search("a")
        with pytest.raises(BudgetExhausted) as refused:
            router.search("b")
        # 2026-12-03 12:00 UTC to 2027-01-01 00:00 UTC.
        assert refused.value.retry_after == pytest.approx(28.5 * 86400)
        clock.advance(28 * 86400)
        with pytest.raises(BudgetExhausted):
            router.search("still December")
        clock.advance(43200)
        router.search("January")
    assert searches(fake) == 2


def test_the_result_reports_each_budget_with_this_search_included(make: Make) -> None:
    _, router = make(
        budgets=[Budget(10, per="conversation"), Budget(200, unit="credits", per="router")]
    )
    with spend_scope(conversation="c-1"):
        router.search("a")
        result = router.search("b", search_depth="advanced")
    assert result["searchfuse"]["budgets"] == [
        {"per": "conversation", "unit": "searches", "period": None, "used": 2.0,
         "limit": 10, "left": 8.0},
        {"per": "router", "unit": "credits", "period": None, "used": 3.0,
         "limit": 200, "left": 197.0},
    ]  # fmt: skip
    plain = router.search("c")  # outside the conversation: only the router's budget
    assert [b["per"] for b in plain["searchfuse"]["budgets"]] == ["router"]


def test_credits_are_charged_by_depth_and_a_search_over_what_is_left_is_refused(
    make: Make,
) -> None:
    fake, router = make(budgets=[Budget(3, unit="credits", per="router")])
    router.search("advanced costs two", search_depth="advanced")
    with pytest.raises(BudgetExhausted):
        router.search("two more do not fit in one", search_depth="advanced")
    router.search("one fits")
    assert searches(fake) == 2


# -- given back: a request never sent, or not served --------------------------------------


def test_a_failed_request_is_given_back(make: Make, clock: FakeClock) -> None:
    fake, router = make(budgets=[Budget(1, per="router")], max_keys_per_call=1)
    for fault in (500, 503, "connect"):
        fake.fail_next(fault, path="/search")  # type: ignore[arg-type]
        with pytest.raises((SearchFailed, NoKeyAvailable)):
            router.search(f"fails with {fault}")
        clock.advance(3600)  # past the key's cooldown and the breaker
    router.search("the budget is still whole")
    with pytest.raises(BudgetExhausted):
        router.search("now it is spent")


def test_a_bad_request_is_given_back(make: Make) -> None:
    fake, router = make(budgets=[Budget(1, per="router")])
    fake.fail_next(400, path="/search")
    with pytest.raises(BadRequest):
        router.search("rejected by Tavily")
    with pytest.raises(BadRequest):
        router.search("")  # refused before sending
    router.search("served")
    with pytest.raises(BudgetExhausted):
        router.search("spent")


def test_a_429_and_the_cooldown_after_it_are_given_back(make: Make, clock: FakeClock) -> None:
    fake, router = make(budgets=[Budget(1, per="router")])
    fake.fail_next(429, retry_after=30, path="/search")
    with pytest.raises(RateLimited):
        router.search("429")
    with pytest.raises(CooldownActive):
        router.search("refused during the cooldown")
    clock.advance(31)
    router.search("served")
    with pytest.raises(BudgetExhausted):
        router.search("spent")


def test_a_search_throttled_by_pacing_is_not_counted(make: Make, clock: FakeClock) -> None:
    fake, router = make(keys=[KeyEntry(K1, rpm=1)], budgets=[Budget(2, per="router")], max_wait=0.0)
    router.search("a")
    with pytest.raises(Throttled):
        router.search("over the key's rate")
    clock.advance(62)
    router.search("b")
    with pytest.raises(BudgetExhausted):
        router.search("c")
    assert searches(fake) == 2


def test_budgets_hold_without_pacing(make: Make) -> None:
    fake, router = make(budgets=[Budget(2, per="router")], pace=False)
    router.search("a")
    router.search("b")
    with pytest.raises(BudgetExhausted):
        router.search("c")
    assert searches(fake) == 2


# -- settled with the answer's real cost ---------------------------------------------------


def rewriting(fake: FakeTavily, credits: float) -> httpx.MockTransport:
    """Tavily's answers, saying each search cost `credits`."""

    def handle(request: httpx.Request) -> httpx.Response:
        answer = fake.handle(request)
        if request.url.path != "/search" or answer.status_code != 200:
            return answer
        body = json.loads(answer.content)
        body["usage"] = {"credits": credits}
        return httpx.Response(200, json=body)

    return httpx.MockTransport(handle)


@pytest.mark.parametrize(("said", "used"), [(0, 0.0), (3, 3.0)])
def test_the_answers_own_credits_settle_the_charge(make: Make, said: int, used: float) -> None:
    fake, router = make(budgets=[Budget(6, unit="credits", per="router")])
    router = type(router)(
        [K1],
        state=router.store,
        clock=router.now,
        transport=rewriting(fake, said),
        budgets=[Budget(6, unit="credits", per="router")],
    )
    result = router.search("basic: one credit expected")
    assert result["searchfuse"]["budgets"][0]["used"] == used
    again = router.search("and the store agrees")
    assert again["searchfuse"]["budgets"][0]["used"] == 2 * used


def test_usd_budgets_use_the_list_price_or_the_override(make: Make) -> None:
    _, router = make(budgets=[Budget(0.02, unit="usd", per="router")])
    first = router.search("list price: 0.008 USD a credit")
    assert first["searchfuse"]["budgets"][0]["used"] == pytest.approx(0.008)
    router.search("b")
    with pytest.raises(BudgetExhausted, match=r"0\.02 USD"):
        router.search("a third would make 0.024")


def test_a_routers_price_and_a_keys_price_win_over_the_list(make: Make) -> None:
    _, router = make(budgets=[Budget(0.05, unit="usd", per="router")], prices={"tavily": 0.02})
    assert router.search("a")["searchfuse"]["budgets"][0]["used"] == pytest.approx(0.02)
    _, keyed = make(
        keys=[KeyEntry(K1, price=0.05)],
        budgets=[Budget(0.1, unit="usd", per="conversation")],
        prices={"tavily": 0.02},
    )
    with spend_scope(conversation="c-9"):
        assert keyed.search("b")["searchfuse"]["budgets"][0]["used"] == pytest.approx(0.05)


async def test_async_searches_are_counted_in_their_scope(make: Make) -> None:
    fake, router = make(budgets=[Budget(1, per="conversation")])
    async with spend_scope(conversation="c-async"):
        await router.asearch("a")
        with pytest.raises(BudgetExhausted):
            await router.asearch("b")
    assert searches(fake) == 1
    await router.aclose()


def test_two_budgets_of_one_spender_share_a_tally(make: Make) -> None:
    fake, router = make(budgets=[Budget(5, per="router"), Budget(2, per="router")])
    router.search("a")
    result = router.search("b")
    assert [b["used"] for b in result["searchfuse"]["budgets"]] == [2.0, 2.0]
    with pytest.raises(BudgetExhausted) as refused:
        router.search("c")
    assert refused.value.limit == 2
    assert searches(fake) == 2


@pytest.mark.parametrize(
    ("budget", "said"),
    [
        (Budget(1, per="conversation"), "this conversation has used its 1 web search,"),
        (Budget(1, unit="credits", per="router", period="day"), "its 1 search credit for today"),
        (Budget(2, per="user"), "this user has used their 2 web searches,"),
    ],
)
def test_the_refusal_counts_its_budget_in_plain_words(
    make: Make, budget: Budget, said: str
) -> None:
    fake, router = make(budgets=[budget])
    with spend_scope(user="u-1", conversation="c-1"):
        for i in range(int(budget.limit)):
            router.search(f"q{i}")
        with pytest.raises(BudgetExhausted) as refused:
            router.search("one too many")
    assert said in refused.value.message
    assert searches(fake) == budget.limit  # the refused search was never sent
