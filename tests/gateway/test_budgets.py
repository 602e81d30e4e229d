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
