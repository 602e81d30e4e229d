"""The implicit burst window, through every surface that relies on it (no turn scope, no
reply ids): an agent searching once every 1.5 s gets a search in each new 2 s window,
for as long as it calls. A burst runs from its first call; a refused call never extends
it. (MCP's own test is in tests/integrations/test_mcp.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from searchfuse import Router, guard
from searchfuse.guard import tavily_tool
from searchfuse.testing import TEST_KEYS, FakeClock, FakeTavily

from ..gateway.conftest import ALICE, Gateway, make_gateway, server  # noqa: F401 (fixtures)

CALLS = 12
EVERY = 1.5
#: Served, refused, served, ...: each call that starts 2 s or more after the burst's
#: first call starts a new burst; the one 1.5 s in is refused and extends nothing.
PATTERN = [True, False] * (CALLS // 2)

Surface = Callable[[str], bool]


@pytest.fixture
def routed() -> Iterator[tuple[FakeTavily, Router, FakeClock]]:
    clock = FakeClock()
    fake = FakeTavily(TEST_KEYS[:1], clock=clock)
    with fake.serve() as url, Router(list(TEST_KEYS[:1]), base_url=url, clock=clock) as router:
        yield fake, router, clock


def _decorated(router: Router, clock: FakeClock) -> Surface:
    tool = guard(router=router, clock=clock, cache=False, on_refusal="return")(
        lambda query: router.search(query)
    )
    return lambda query: isinstance(tool(query), dict)


def _decorated_async(router: Router, clock: FakeClock) -> Surface:
    @guard(router=router, clock=clock, cache=False, on_refusal="return")
    async def web_search(query: str) -> Any:
        return await router.asearch(query)

    return lambda query: isinstance(asyncio.run(web_search(query)), dict)


def _ready_made(router: Router, clock: FakeClock) -> Surface:
    tool = tavily_tool(router, clock=clock, cache=False, on_refusal="return")
    return lambda query: isinstance(tool(query), dict)


def _langchain(router: Router, clock: FakeClock) -> Surface:
    pytest.importorskip("langchain_core")
    from langchain_core.tools import tool as lc_tool

    from searchfuse.integrations.langchain import guard_tool

    @lc_tool
    def web_search(query: str) -> str:
        """Search the web."""
        return "unused: the router serves"

    guarded = guard_tool(web_search, router=router, clock=clock, cache=False)
    return lambda query: "refused" not in str(guarded.invoke({"query": query})).lower()


@pytest.mark.parametrize(
    "surface",
    [_decorated, _decorated_async, _ready_made, _langchain],
    ids=["guard", "guard-async", "tavily_tool", "langchain-guard_tool"],
)
def test_an_agent_calling_steadily_keeps_getting_searches(
    surface: Callable[[Router, FakeClock], Surface],
    routed: tuple[FakeTavily, Router, FakeClock],
) -> None:
    fake, router, clock = routed
    call = surface(router, clock)
    served = []
    for n in range(CALLS):
        served.append(call(f"q{n}"))
        clock.advance(EVERY)
    assert served == PATTERN
    assert [r.query for r in fake.searches] == [f"q{n}" for n in range(0, CALLS, 2)]


def test_a_gateway_session_calling_steadily_keeps_getting_searches(
    make_gateway: Callable[..., Gateway],  # noqa: F811 (the fixture)
) -> None:
    gw = make_gateway(per_turn=1, min_interval=2.0)
    headers = {"Authorization": f"Bearer {ALICE}", "X-Session-Id": "steady"}
    codes = []
    for n in range(CALLS):
        answer = httpx.post(f"{gw.url}/search", json={"query": f"q{n}"}, headers=headers)
        codes.append(answer.status_code)
        gw.clock.advance(EVERY)
    assert codes == [200 if served else 429 for served in PATTERN]
    assert [r.query for r in gw.fake.searches] == [f"q{n}" for n in range(0, CALLS, 2)]
