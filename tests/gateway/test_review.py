"""The gateway under attack: numbers too large for a float, in a request's body and in
the gateway's own options, are answered as what they are, never as a crash."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from searchfuse import Router
from searchfuse.gateway import build_app

from .conftest import ALICE, Gateway

MakeGateway = Callable[..., Gateway]
#: A JSON integer no float can hold: `json` reads it as an int of 401 digits.
HUGE = "1" + "0" * 400


@pytest.mark.parametrize("path", ["/extract", "/crawl"])
@pytest.mark.parametrize(
    "timeout",
    [HUGE, "-" + HUGE, "1e999", '"30"', "true", "0", "-5"],
    ids=["huge", "-huge", "inf", "text", "bool", "zero", "negative"],
)
def test_any_timeout_a_client_asks_for_is_served_within_the_deadline(
    make_gateway: MakeGateway, path: str, timeout: str
) -> None:
    gw = make_gateway()
    field = (
        '"urls": ["https://example.com"]' if path == "/extract" else '"url": "https://example.com"'
    )
    answer = httpx.post(
        f"{gw.url}{path}",
        content=f'{{{field}, "timeout": {timeout}}}'.encode(),
        headers={"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json"},
    )
    # Tavily judges the parameter (the simulator accepts or refuses it); the gateway
    # neither crashes on it nor waits past its own deadline for it.
    assert answer.status_code in (200, 400), answer.text
    assert answer.json() != {"detail": {"error": ""}}
    assert "internal error" not in answer.text


@pytest.mark.parametrize("name", ["deadline", "min_interval"])
@pytest.mark.parametrize(
    "value", [10**400, float("inf"), float("nan"), -1], ids=["huge", "inf", "nan", "negative"]
)
def test_a_gateway_option_beyond_any_float_names_the_option(name: str, value: Any) -> None:
    router = Router(["tvly-dev-test0001"], state=None)
    with pytest.raises(ValueError, match=name):
        build_app(router, **{name: value})
    router.close()
