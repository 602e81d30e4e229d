"""Spend budgets through the gateway: whose spend a request is, and what the client is told."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from tavily import TavilyClient
from tavily.errors import ForbiddenError

from searchfuse import Budget

from .conftest import ALICE, BOB, Gateway

MakeGateway = Callable[..., Gateway]


def test_a_per_user_budget_counts_each_client_token_and_refuses_as_tavilys_432(
    make_gateway: MakeGateway,
) -> None:
    gw = make_gateway(router_options={"budgets": [Budget(2, per="user")]})
    alice = TavilyClient(api_key=ALICE, api_base_url=gw.url)
    for query in ("python", "rust"):
        assert alice.search(query)["results"]
    with pytest.raises(ForbiddenError, match="2 web searches"):
        alice.search("go")
    assert gw.searches == 2  # the refused search was never sent
    # Bob's spend is his own.
    assert TavilyClient(api_key=BOB, api_base_url=gw.url).search("zig")["results"]
    assert gw.searches == 3


def test_x_human_id_names_the_user_whatever_the_token(make_gateway: MakeGateway) -> None:
    gw = make_gateway(router_options={"budgets": [Budget(1, per="user")]})

    def search(query: str, token: str, human: str) -> httpx.Response:
        return httpx.post(
            f"{gw.url}/search",
            json={"query": query},
            headers={"Authorization": f"Bearer {token}", "X-Human-Id": human},
        )

    assert search("one", ALICE, "carol").status_code == 200
    refused = search("two", BOB, "carol")  # another token, the same human
    assert refused.status_code == 432
    assert "answer from what you have" in refused.json()["detail"]["error"]
    assert search("three", ALICE, "dave").status_code == 200
    assert gw.searches == 2


def test_a_per_conversation_budget_counts_x_session_id(make_gateway: MakeGateway) -> None:
    gw = make_gateway(router_options={"budgets": [Budget(1, per="conversation")]})

    def search(query: str, session: str) -> httpx.Response:
        return httpx.post(
            f"{gw.url}/search",
            json={"query": query},
            headers={"Authorization": f"Bearer {ALICE}", "X-Session-Id": session},
        )

    assert search("one", "s-1").status_code == 200
    refused = search("two", "s-1")
    assert refused.status_code == 432
    assert "conversation" in refused.json()["detail"]["error"]
    assert search("three", "s-2").status_code == 200
    assert gw.searches == 2
    assert [r.path for r in gw.fake.requests].count("/search") == 2


def test_usage_shows_the_callers_budgets_after_searches_through_tavily_python(
    make_gateway: MakeGateway,
) -> None:
    gw = make_gateway(
        router_options={
            "budgets": [
                Budget(3, per="conversation"),
                Budget(10, unit="credits", per="router", period="day"),
                Budget(5, per="user"),
            ]
        }
    )
    alice = TavilyClient(api_key=ALICE, api_base_url=gw.url, session_id="s-1")
    alice.search("python", search_depth="advanced")  # 2 credits
    alice.search("rust")
    TavilyClient(api_key=BOB, api_base_url=gw.url, session_id="s-9").search("zig")

    def usage(token: str, **headers: str) -> dict:
        answer = httpx.get(
            f"{gw.url}/usage", headers={"Authorization": f"Bearer {token}", **headers}
        )
        assert answer.status_code == 200
        return answer.json()  # type: ignore[no-any-return]

    mine = usage(ALICE, **{"X-Session-Id": "s-1"})
    assert mine["key"]["usage"] == 4  # Tavily's sections, the pool's totals
    rows = mine["searchfuse"]["budgets"]
    assert [(r["budget"], r["used"], r["left"]) for r in rows] == [
        ("3 searches per conversation", 2, 1),
        ("10 credits per router a day", 4, 6),
        ("5 searches per user", 2, 3),
    ]
    assert rows[1]["resets_at"] == gw.router.budgets()[1].resets_at
    # Bob sees the service's and his own, never Alice's conversation.
    theirs = usage(BOB)
    assert [(r["used"], r["left"]) for r in theirs["searchfuse"]["budgets"]] == [
        (None, None),
        (4, 6),
        (1, 4),
    ]
    assert "s-1" not in str(theirs) and "alice" not in str(theirs)
    assert gw.searches == 3  # /usage asked nothing upstream


def test_a_conversation_is_the_clients_own_whatever_session_id_another_sends(
    make_gateway: MakeGateway,
) -> None:
    gw = make_gateway(router_options={"budgets": [Budget(1, per="conversation")]})

    def search(query: str, token: str) -> httpx.Response:
        return httpx.post(
            f"{gw.url}/search",
            json={"query": query},
            headers={"Authorization": f"Bearer {token}", "X-Session-Id": "s-1"},
        )

    assert search("one", ALICE).status_code == 200
    # Bob names Alice's session id: his own conversation, which has its search left.
    assert search("two", BOB).status_code == 200
    assert search("three", ALICE).status_code == 432  # Alice's own is spent, by her alone
    assert search("four", BOB).status_code == 432
    assert gw.searches == 2
    usage = httpx.get(
        f"{gw.url}/usage", headers={"Authorization": f"Bearer {BOB}", "X-Session-Id": "s-1"}
    ).json()
    assert [(r["used"], r["left"]) for r in usage["searchfuse"]["budgets"]] == [(1, 0)]
