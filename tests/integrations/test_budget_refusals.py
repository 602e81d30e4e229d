"""A conversation budget through the surfaces without a framework of their own.

The `@guard` decorator and the tavily-python drop-ins have no run, thread or
session to name: the application names the conversation with `spend_scope`.
Two conversations each get their two searches, counted at Tavily on loopback;
the third in one of them is refused unsent, saying which budget and what to do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import tavily.errors

from searchfuse import Budget, BudgetExhausted, Router, guard, spend_scope
from searchfuse.tavily import AsyncTavilyClient, TavilyClient
from searchfuse.testing import TEST_KEYS, FakeTavily

BUDGET = Budget(2, unit="searches", per="conversation")
OVER_BUDGET = BudgetExhausted(BUDGET, 2).message


@pytest.fixture
def router(tavily_server: str) -> Iterator[Router]:
    with Router(list(TEST_KEYS), base_url=tavily_server, budgets=[BUDGET]) as router:
        yield router


def queries_at(fake: FakeTavily) -> list[str]:
    return [str(r.query) for r in fake.searches]


def test_a_guarded_tool_tells_the_model_its_conversations_budget_is_spent(
    router: Router, fake_tavily: FakeTavily
) -> None:
    @guard(router=router, per_turn=None, on_refusal="return")
    def web_search(query: str) -> Any:
        raise AssertionError("the router serves a routed guard")  # pragma: no cover

    with spend_scope(conversation="c-1"):
        one = [web_search(q) for q in ("python 3.13", "rust 2024")]
    with spend_scope(conversation="c-2"):
        two = [web_search(q) for q in ("zig 0.14", "pep 703")]
    with spend_scope(conversation="c-1"):
        over = web_search("go 1.24")

    assert [len(r["results"]) for r in one + two] == [5, 5, 5, 5]
    assert over == OVER_BUDGET
    assert "this conversation has used its 2 web searches" in over
    assert "answer from what you have" in over
    assert queries_at(fake_tavily) == ["python 3.13", "rust 2024", "zig 0.14", "pep 703"]


def test_the_tavily_client_raises_tavily_pythons_limit_error_naming_the_budget(
    router: Router, fake_tavily: FakeTavily
) -> None:
    client = TavilyClient(router=router)
    with spend_scope(conversation="c-1"):
        one = [client.search(q) for q in ("python 3.13", "rust 2024")]
    with spend_scope(conversation="c-2"):
        two = [client.search(q) for q in ("zig 0.14", "pep 703")]
    with spend_scope(conversation="c-1"), pytest.raises(BudgetExhausted) as refused:
        client.search("go 1.24")

    assert [len(r["results"]) for r in one + two] == [5, 5, 5, 5]
    # What the gateway answers with a 432, tavily-python's ForbiddenError ("limit exceeded").
    assert isinstance(refused.value, tavily.errors.ForbiddenError)
    assert str(refused.value) == OVER_BUDGET
    assert queries_at(fake_tavily) == ["python 3.13", "rust 2024", "zig 0.14", "pep 703"]


async def test_the_async_tavily_client_counts_the_same_way(
    router: Router, fake_tavily: FakeTavily
) -> None:
    client = AsyncTavilyClient(router=router)
    async with spend_scope(conversation="c-1"):
        for query in ("python 3.13", "rust 2024"):
            await client.search(query)
        with pytest.raises(BudgetExhausted) as refused:
            await client.search("go 1.24")
    async with spend_scope(conversation="c-2"):
        await client.search("zig 0.14")

    assert str(refused.value) == OVER_BUDGET
    assert queries_at(fake_tavily) == ["python 3.13", "rust 2024", "zig 0.14"]
