"""LangChain v1: real ``create_agent`` runs and real tools, against the simulated Tavily.

The model is langchain-core's fake chat model, scripted; Tavily is
:class:`~searchfuse.testing.FakeTavily`, in-process or on loopback. Time is
the ``fake_clock`` of searchfuse's pytest plugin, so cooldowns pass instantly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Annotated, Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import InjectedState

from searchfuse import CooldownActive, RateLimited, Router, TurnLimitReached, turn
from searchfuse._secrets import fingerprint, mask
from searchfuse.integrations.langchain import (
    GuardedTool,
    RoutedTavilySearch,
    SearchFuseMiddleware,
    TavilySearchInput,
    guard_tool,
)
from searchfuse.testing import TEST_KEYS, FakeClock, FakeTavily

KEY, OTHER = TEST_KEYS[0], TEST_KEYS[1]
ONE_PER_REPLY = TurnLimitReached(1).message
TAVILY_ARGUMENTS = [
    "query",
    "include_domains",
    "exclude_domains",
    "search_depth",
    "include_images",
    "time_range",
    "topic",
    "start_date",
    "end_date",
]


# -- the scripted model and the tools ----------------------------------------------------


class ScriptedModel(FakeMessagesListChatModel):
    """langchain-core's fake chat model; ``create_agent`` binds tools, a script ignores them."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def searches(*queries: str, tool: str = "tavily_search", reply: str = "r") -> AIMessage:
    """One model reply asking for these searches in parallel."""
    calls = [
        {"name": tool, "args": {"query": q}, "id": f"{reply}-{i}", "type": "tool_call"}
        for i, q in enumerate(queries)
    ]
    return AIMessage(content="", tool_calls=calls)


def ask(agent: Any, mode: str = "invoke") -> list[BaseMessage]:
    """Run the agent on one user message; the messages after it."""
    state = {"messages": [HumanMessage("go")]}
    result = asyncio.run(agent.ainvoke(state)) if mode == "ainvoke" else agent.invoke(state)
    return list(result["messages"][1:])


def tool_messages(messages: list[BaseMessage]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}


def tavily_client(fake: FakeTavily) -> httpx.Client:
    return httpx.Client(base_url="https://api.tavily.com", transport=fake.transport())


def tavily_like(fake: FakeTavily, key: str = KEY) -> BaseTool:
    """A tool that behaves like ``langchain_tavily.TavilySearch``: one key, and every
    HTTP error swallowed into a *successful* ``{"error": ValueError("Error 429: ...")}``."""
    client = tavily_client(fake)

    @tool("tavily_search")
    def tavily_search(query: str) -> dict[str, Any]:
        """Search the web with Tavily."""
        response = client.post(
            "/search", json={"query": query}, headers={"Authorization": f"Bearer {key}"}
        )
        if response.status_code != 200:
            detail = response.json()["detail"]["error"]
            return {"error": ValueError(f"Error {response.status_code}: {detail}")}
        return dict(response.json())

    return tavily_search


def tavily_raising(fake: FakeTavily, key: str = KEY) -> BaseTool:
    """A tool that raises ``httpx.HTTPStatusError`` (Retry-After header included)."""
    client = tavily_client(fake)

    @tool("web_search")
    def web_search(query: str) -> dict[str, Any]:
        """Search the web."""
        response = client.post(
            "/search", json={"query": query}, headers={"Authorization": f"Bearer {key}"}
        )
        response.raise_for_status()
        return dict(response.json())

    return web_search


@pytest.fixture
def router(fake_tavily: FakeTavily) -> Iterator[Router]:
    """Two keys whose usage the router already knows, so searches go straight to /search."""
    transport = fake_tavily.transport()
    with Router([KEY, OTHER], transport=transport, async_transport=transport) as router:
        router.test_keys()  # a fresh router would first ask /usage, once per key
        fake_tavily.reset_records()
        yield router


def agent_with(tools: list[BaseTool], middleware: SearchFuseMiddleware, *replies: AIMessage) -> Any:
    model = ScriptedModel(responses=[*replies, AIMessage("done")])
    return create_agent(model, tools=tools, middleware=[middleware])


# -- SearchFuseMiddleware ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_three_parallel_searches_make_one_request_and_two_refusals(
    fake_tavily: FakeTavily, mode: str
) -> None:
    agent = agent_with(
        [tavily_like(fake_tavily)],
        SearchFuseMiddleware(),
        searches("python 3.13", "rust 2024", "pep 703"),
    )

    messages = ask(agent, mode)

    assert [(r.query, r.key_fingerprint) for r in fake_tavily.requests] == [
        ("python 3.13", fingerprint(KEY))
    ]
    answers = tool_messages(messages)
    assert answers["r-0"].status == "success"
    assert json.loads(str(answers["r-0"].content))["query"] == "python 3.13"
    assert [(answers[i].status, answers[i].content) for i in ("r-1", "r-2")] == [
        ("error", ONE_PER_REPLY),
        ("error", ONE_PER_REPLY),
    ]
    assert messages[-1] == AIMessage("done", id=messages[-1].id)  # the run completed


def test_a_429_in_the_result_stops_the_turn_and_the_next_reply_is_refused(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    # langchain_tavily reports a 429 as a successful {"error": ...}: no Retry-After
    # survives, so the middleware's own cooldown applies.
    middleware = SearchFuseMiddleware(cooldown=45)
    fake_tavily.fail_next(429, retry_after=30, path="/search")
    agent = agent_with(
        [tavily_like(fake_tavily)],
        middleware,
        searches("python 3.13", "rust 2024", reply="a"),
        AIMessage("waiting"),
        searches("python 3.13", "pep 703", reply="b"),
    )

    messages = ask(agent)

    answers = tool_messages(messages)
    assert answers["a-0"].status == "error"
    assert answers["a-0"].content == RateLimited(45.0).message
    assert answers["a-1"].content == ONE_PER_REPLY
    assert [r.status for r in fake_tavily.requests] == [429]

    fake_clock.advance(15)
    messages = ask(agent)

    answers = tool_messages(messages)
    refused = CooldownActive(30.0).message
    assert [(answers[i].status, answers[i].content) for i in ("b-0", "b-1")] == [
        ("error", refused),
        ("error", refused),
    ]
    assert "30 more seconds" in refused
    assert len(fake_tavily.requests) == 1  # nothing was sent during the cooldown
    assert middleware.cooldown_left() == 30.0


def test_a_raised_429_trips_the_fuse_for_its_retry_after(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    middleware = SearchFuseMiddleware()
    fake_tavily.fail_next(429, retry_after=20, path="/search")
    agent = agent_with(
        [tavily_raising(fake_tavily)],
        middleware,
        searches("python 3.13", tool="web_search", reply="a"),
        AIMessage("waiting"),
        searches("rust 2024", tool="web_search", reply="b"),
        AIMessage("waiting"),
        searches("rust 2024", tool="web_search", reply="c"),
    )

    first = tool_messages(ask(agent))  # the exception never reaches the ToolNode
    fake_clock.advance(5)
    second = tool_messages(ask(agent))
    fake_clock.advance(15)
    third = tool_messages(ask(agent))

    assert first["a-0"].content == RateLimited(20.0).message
    assert second["b-0"].content == CooldownActive(15.0).message
    assert third["c-0"].status == "success"
    assert [r.status for r in fake_tavily.requests] == [429, 200]


def test_the_router_backed_tool_and_the_middleware_agree_on_the_cooldown(
    fake_tavily: FakeTavily, fake_clock: FakeClock, router: Router
) -> None:
    middleware = SearchFuseMiddleware()
    fake_tavily.fail_next(429, retry_after=20, path="/search")
    agent = agent_with(
        [RoutedTavilySearch(router=router)],
        middleware,
        searches("python 3.13", reply="a"),
        AIMessage("waiting"),
        searches("rust 2024", reply="b"),
    )

    first = tool_messages(ask(agent))
    sent = len(fake_tavily.requests)
    fake_clock.advance(8)
    second = tool_messages(ask(agent))

    assert first["a-0"].content == RateLimited(20.0).message  # Retry-After, not a default
    assert middleware.cooldown_left() == 12.0
    assert second["b-0"].content == CooldownActive(12.0).message
    assert len(fake_tavily.requests) == sent
    assert [r.status for r in fake_tavily.searches] == [429]


def test_the_router_skips_an_invalid_key(fake_tavily: FakeTavily, router: Router) -> None:
    fake_tavily.revoke(KEY)
    agent = agent_with(
        [RoutedTavilySearch(router=router, max_results=3)],
        SearchFuseMiddleware(),
        searches("python 3.13"),
    )

    answer = tool_messages(ask(agent))["r-0"]

    result = json.loads(str(answer.content))
    assert len(result["results"]) == 3
    # Which key served is for people: the artifact, not what the model reads.
    assert "searchfuse" not in result
    assert answer.artifact["searchfuse"] == {
        "served_by": "tavily",
        "key": mask(OTHER),
        "degraded": None,
    }
    assert [(r.key_fingerprint, r.status) for r in fake_tavily.requests] == [
        (fingerprint(KEY), 401),  # revoked upstream: the router moves on, the model never knows
        (fingerprint(OTHER), 200),
    ]


def test_a_middleware_router_serves_every_guarded_call(
    fake_tavily: FakeTavily, router: Router
) -> None:
    ran: list[str] = []

    @tool
    def web_search(query: str, max_results: int = 5) -> str:
        """Search the web."""
        ran.append(query)
        return "the tool's own backend"

    agent = agent_with(
        [web_search],
        SearchFuseMiddleware(router=router),
        searches("python 3.13", "rust 2024", tool="web_search"),
    )

    answers = tool_messages(ask(agent))

    assert ran == []
    assert json.loads(str(answers["r-0"].content))["query"] == "python 3.13"
    assert answers["r-1"].content == ONE_PER_REPLY
    assert [(r.path, r.query) for r in fake_tavily.requests] == [("/search", "python 3.13")]


def test_a_cached_search_is_free(fake_tavily: FakeTavily) -> None:
    agent = agent_with(
        [tavily_like(fake_tavily)],
        SearchFuseMiddleware(),
        searches("Python 3.13", reply="a"),
        AIMessage("noted"),
        searches("python  3.13", "rust 2024", "python 3.13", reply="b"),
    )

    ask(agent)
    answers = tool_messages(ask(agent))

    assert [answers[i].status for i in ("b-0", "b-1", "b-2")] == ["success"] * 3
    assert [r.query for r in fake_tavily.searches] == ["Python 3.13", "rust 2024"]


def test_only_search_tools_are_guarded(fake_tavily: FakeTavily) -> None:
    @tool
    def calculator(expression: str) -> str:
        """Evaluate arithmetic."""
        return "4"

    @tool
    def tavily_extract(url: str) -> str:
        """Fetch a page."""
        return "page text"

    reply = AIMessage(
        content="",
        tool_calls=[
            {"name": "calculator", "args": {"expression": "2+2"}, "id": "c-0", "type": "tool_call"},
            {"name": "calculator", "args": {"expression": "2*2"}, "id": "c-1", "type": "tool_call"},
            {"name": "tavily_extract", "args": {"url": "a"}, "id": "e-0", "type": "tool_call"},
            {"name": "tavily_extract", "args": {"url": "b"}, "id": "e-1", "type": "tool_call"},
            *searches("python 3.13", "rust 2024").tool_calls,
        ],
    )
    middleware = SearchFuseMiddleware()
    agent = agent_with([calculator, tavily_extract, tavily_like(fake_tavily)], middleware, reply)

    answers = tool_messages(ask(agent))

    assert {i: m.status for i, m in answers.items()} == {
        "c-0": "success",
        "c-1": "success",
        "e-0": "success",
        "e-1": "success",
        "r-0": "success",
        "r-1": "error",
    }
    assert not middleware.guards("tavily_extract") and middleware.guards("tavily_search")
    assert SearchFuseMiddleware(tools=["lookup"]).guards("lookup")
    assert not SearchFuseMiddleware(tools=["lookup"]).guards("web_search")


# -- guard_tool -------------------------------------------------------------------


def test_guard_tool_keeps_the_tool_the_model_sees(fake_tavily: FakeTavily) -> None:
    inner = tavily_like(fake_tavily)

    guarded = guard_tool(inner)

    assert isinstance(guarded, GuardedTool)
    assert (guarded.name, guarded.description) == (inner.name, inner.description)
    assert guarded.args == inner.args
    assert (
        guarded.tool_call_schema.model_json_schema()  # type: ignore[union-attr]
        == inner.tool_call_schema.model_json_schema()  # type: ignore[union-attr]
    )


def test_guard_tool_guards_invoke_batch_run_and_ainvoke(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    guarded = guard_tool(tavily_like(fake_tavily))

    # batch: parallel calls outside any turn() overlap, so they are one turn.
    results = guarded.batch([{"query": "a"}, {"query": "b"}, {"query": "c"}])
    assert sorted(type(r).__name__ for r in results) == ["dict", "str", "str"]
    assert [r for r in results if isinstance(r, str)] == [ONE_PER_REPLY, ONE_PER_REPLY]

    fake_clock.advance(5)
    with turn():
        message = guarded.invoke(
            {"name": "tavily_search", "args": {"query": "d"}, "id": "t-1", "type": "tool_call"}
        )
        refusal = guarded.run({"query": "e"})
    assert (message.status, message.tool_call_id) == ("success", "t-1")
    assert refusal == ONE_PER_REPLY

    async def one_reply() -> list[Any]:
        async with turn():
            return [
                await guarded.ainvoke({"query": "f"}),
                await guarded.ainvoke(
                    {
                        "name": "tavily_search",
                        "args": {"query": "g"},
                        "id": "t-2",
                        "type": "tool_call",
                    }
                ),
            ]

    found, refused = asyncio.run(one_reply())
    assert found["query"] == "f"
    assert (refused.status, refused.content) == ("error", ONE_PER_REPLY)
    assert [r.query for r in fake_tavily.searches] == [
        r["query"] for r in results if isinstance(r, dict)
    ] + ["d", "f"]


def test_guard_tool_keys_its_cache_on_what_the_model_sent(fake_tavily: FakeTavily) -> None:
    client = tavily_client(fake_tavily)
    states: list[int] = []

    @tool
    def web_search(query: str, state: Annotated[dict[str, Any], InjectedState]) -> dict[str, Any]:
        """Search the web."""
        states.append(len(state["messages"]))
        response = client.post(
            "/search", json={"query": query}, headers={"Authorization": f"Bearer {KEY}"}
        )
        return dict(response.json())

    model = ScriptedModel(
        responses=[
            searches("python 3.13", tool="web_search", reply="a"),
            AIMessage("noted"),
            searches("Python  3.13", tool="web_search", reply="b"),
            AIMessage("done"),
        ]
    )
    agent = create_agent(model, tools=[guard_tool(web_search)])  # no middleware: a plain ToolNode

    first = tool_messages(ask(agent))
    second = tool_messages(ask(agent))  # another conversation state, the same search

    assert first["a-0"].status == second["b-0"].status == "success"
    assert second["b-0"].content == first["a-0"].content
    assert states == [2]  # the ToolNode injected the state once; the repeat was a cache hit
    assert len(fake_tavily.searches) == 1


def test_guard_tool_hears_a_429_the_tool_reported(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    guarded = guard_tool(tavily_like(fake_tavily), cooldown=40)
    fake_tavily.fail_next(429, path="/search")

    stopped = guarded.invoke(
        {"name": "tavily_search", "args": {"query": "a"}, "id": "t-1", "type": "tool_call"}
    )
    fake_clock.advance(10)
    refused = guarded.invoke({"query": "b"})

    assert (stopped.status, stopped.content) == ("error", RateLimited(40.0).message)
    assert refused == CooldownActive(30.0).message
    assert len(fake_tavily.requests) == 1


def test_guard_tool_injects_the_routers_key_hidden_from_the_model(
    fake_tavily: FakeTavily, router: Router
) -> None:
    client = tavily_client(fake_tavily)
    keys_used: list[str] = []

    @tool
    def web_search(query: str, api_key: str) -> dict[str, Any]:
        """Search the web with the given Tavily key."""
        keys_used.append(api_key)
        response = client.post(
            "/search", json={"query": query}, headers={"Authorization": f"Bearer {api_key}"}
        )
        if response.status_code != 200:
            return {"error": f"Error {response.status_code}: {response.text}"}
        return dict(response.json())

    guarded = guard_tool(web_search, router=router, inject="api_key")
    fake_tavily.fail_next(401, key=KEY, path="/search")  # the key was rotated upstream

    answer = guarded.invoke(
        {"name": "web_search", "args": {"query": "a"}, "id": "t-1", "type": "tool_call"}
    )

    assert "api_key" not in guarded.args
    assert list(guarded.tool_call_schema.model_json_schema()["properties"]) == ["query"]  # type: ignore[union-attr]
    assert answer.status == "success"
    assert keys_used == [KEY, OTHER]  # the router moved on after the 401
    assert [(r.key_fingerprint, r.status) for r in fake_tavily.searches] == [
        (fingerprint(KEY), 401),
        (fingerprint(OTHER), 200),
    ]


# -- RoutedTavilySearch ------------------------------------------------------------


def test_routed_tavily_search_has_tavily_searchs_name_and_arguments(router: Router) -> None:
    search = RoutedTavilySearch(router=router)

    assert search.name == "tavily_search"
    assert list(search.args) == TAVILY_ARGUMENTS
    assert search.args_schema is TavilySearchInput


def test_routed_tavily_search_matches_langchain_tavily_when_installed(router: Router) -> None:
    langchain_tavily = pytest.importorskip("langchain_tavily")
    reference = langchain_tavily.TavilySearch(tavily_api_key="unused")

    assert RoutedTavilySearch(router=router).name == reference.name
    assert list(RoutedTavilySearch(router=router).args) == list(reference.args)


def test_routed_tavily_search_stops_on_a_429_and_refuses_until_the_cooldown_ends(
    fake_tavily: FakeTavily, fake_clock: FakeClock, router: Router
) -> None:
    search = RoutedTavilySearch(router=router, max_results=2)

    found = search.invoke({"query": "python 3.13", "topic": "news"})
    fake_tavily.fail_next(429, retry_after=30, path="/search")
    stopped = search.invoke(
        {"name": "tavily_search", "args": {"query": "b"}, "id": "t-1", "type": "tool_call"}
    )
    sent = len(fake_tavily.requests)
    fake_clock.advance(10)
    refused = search.invoke(
        {"name": "tavily_search", "args": {"query": "c"}, "id": "t-2", "type": "tool_call"}
    )

    assert len(found["results"]) == 2
    assert fake_tavily.searches[0].body is not None
    assert fake_tavily.searches[0].body["topic"] == "news"
    assert (stopped.status, stopped.content) == ("error", RateLimited(30.0).message)
    assert refused.status == "error" and "20 more seconds" in refused.content
    assert len(fake_tavily.requests) == sent


def test_real_langchain_tavily_behind_the_middleware(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    langchain_tavily = pytest.importorskip("langchain_tavily")
    with fake_tavily.serve() as url:
        search = langchain_tavily.TavilySearch(tavily_api_key=KEY, api_base_url=url)
        fake_tavily.fail_next(429, path="/search")
        agent = agent_with(
            [search],
            SearchFuseMiddleware(cooldown=30),
            searches("python 3.13", "rust 2024", reply="a"),
            AIMessage("waiting"),
            searches("pep 703", reply="b"),
        )
        first = tool_messages(ask(agent))
        second = tool_messages(ask(agent))

    assert first["a-0"].content == RateLimited(30.0).message
    assert second["b-0"].content == CooldownActive(30.0).message
    assert len(fake_tavily.requests) == 1


def test_routed_tavily_search_content_has_tavily_searchs_shape(
    fake_tavily: FakeTavily, router: Router
) -> None:
    langchain_tavily = pytest.importorskip("langchain_tavily")
    call = {
        "name": "tavily_search",
        "args": {"query": "python 3.13"},
        "id": "c",
        "type": "tool_call",
    }
    with fake_tavily.serve() as url:
        reference = langchain_tavily.TavilySearch(tavily_api_key=KEY, api_base_url=url)
        theirs = reference.invoke(call)
    ours = RoutedTavilySearch(router=router).invoke(call)

    expected, got = json.loads(str(theirs.content)), json.loads(str(ours.content))
    # The same fields at the top and in every result; nothing of searchfuse's.
    assert set(got) == set(expected)
    assert [set(r) for r in got["results"]] == [set(r) for r in expected["results"]]
    assert got["results"] == expected["results"]
    assert ours.artifact["searchfuse"]["served_by"] == "tavily"


def test_the_model_never_reads_operator_text_when_no_key_can_serve(
    fake_tavily: FakeTavily, router: Router
) -> None:
    fake_tavily.revoke(KEY)
    fake_tavily.revoke(OTHER)
    agent = agent_with(
        [RoutedTavilySearch(router=router)],
        SearchFuseMiddleware(per_turn=None),
        searches("a", reply="x"),
        searches("b", reply="y"),
    )

    answers = tool_messages(ask(agent))

    for answer in answers.values():
        text = str(answer.content)
        assert answer.status == "error"
        assert "no API key can serve right now" in text or "401" not in text
        for operator_text in ("keys.json", "searchfuse ", "config/", "diagnose", "tvly-"):
            assert operator_text not in text
        assert len(text) < 300


@pytest.mark.parametrize("bad", ["", "x" * 401, "\ud800"])
def test_guard_tool_gives_back_the_search_of_a_query_never_sent(
    fake_tavily: FakeTavily, router: Router, bad: str
) -> None:
    guarded = guard_tool(RoutedTavilySearch(router=router))

    def call(query: str, call_id: str) -> ToolMessage:
        message: ToolMessage = guarded.invoke(
            {"name": "tavily_search", "args": {"query": query}, "id": call_id, "type": "tool_call"}
        )
        return message

    with turn():
        refused = call(bad, "t-1")
        found = call("python 3.13", "t-2")
        assert str(call("rust 2024", "t-3").content) == ONE_PER_REPLY

    assert refused.status == "error"
    assert str(refused.content).startswith("the request was not sent")
    assert found.status == "success"
    assert [r.query for r in fake_tavily.searches] == ["python 3.13"]


def test_after_a_failed_search_the_refusal_says_it_failed(
    fake_tavily: FakeTavily, router: Router
) -> None:
    guarded = guard_tool(RoutedTavilySearch(router=router))
    fake_tavily.fail_next(400, path="/search")

    with turn():
        failed = guarded.run({"query": "python 3.13"})
        refused = guarded.run({"query": "rust 2024"})

    assert "400" in str(failed)
    assert refused == TurnLimitReached(1, failed=True).message
    assert len(fake_tavily.searches) == 1


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_the_middleware_lets_the_reply_s_search_run_beside_queries_never_sent(
    fake_tavily: FakeTavily, router: Router, mode: str
) -> None:
    agent = agent_with(
        [RoutedTavilySearch(router=router)],
        SearchFuseMiddleware(),
        searches("", "x" * 401, "python 3.13", "rust 2024"),
    )

    answers = tool_messages(ask(agent, mode))

    for call_id in ("r-0", "r-1"):
        assert answers[call_id].status == "error"
        assert str(answers[call_id].content).startswith("the request was not sent")
    assert answers["r-2"].status == "success"
    assert (answers["r-3"].status, answers["r-3"].content) == ("error", ONE_PER_REPLY)
    assert [r.query for r in fake_tavily.searches] == ["python 3.13"]


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_routed_web_search_is_served_over_the_chain_under_the_middleware(
    fake_tavily: FakeTavily, fake_clock: FakeClock, mode: str
) -> None:
    """Tavily's keys are rejected: `web_search` is served by Exa, one per reply; the model
    reads Tavily's shape, the artifact says who served and that Tavily was passed over."""
    from searchfuse.integrations.langchain import RoutedWebSearch
    from searchfuse.testing import EXA_TEST_KEYS, FakeExa

    exa = FakeExa(keys=EXA_TEST_KEYS, clock=fake_clock)
    fake_tavily.revoke(KEY)
    fake_tavily.revoke(OTHER)
    with fake_tavily.serve() as tavily_url, exa.serve() as exa_url:
        chain = Router(
            {"tavily": [KEY, OTHER], "exa": list(EXA_TEST_KEYS)},
            base_url=tavily_url,
            base_urls={"exa": exa_url},
        )
        tool = RoutedWebSearch(router=chain, max_results=3)
        agent = agent_with(
            [tool], SearchFuseMiddleware(), searches("zig 0.14", "pep 703", tool="web_search")
        )
        answers = tool_messages(ask(agent, mode))
    served, refused = answers["r-0"], answers["r-1"]
    result = json.loads(str(served.content))
    assert len(result["results"]) == 3 and not {"searchfuse", "raw"} & set(result)
    assert served.artifact["searchfuse"]["served_by"] == "exa"
    assert served.artifact["searchfuse"]["degraded"]["from"] == "tavily"
    assert refused.status == "error" and refused.content == TurnLimitReached(1).message
    assert [r.query for r in exa.searches] == ["zig 0.14"]
    assert tool.name == "web_search"
    assert set(tool.args) == {"query", "topic", "time_range", "include_domains", "exclude_domains"}
    assert tool.args["topic"]["anyOf"][0]["enum"] == ["general", "news"]


def test_routed_tavily_search_tells_an_unforeseen_error_as_an_error_message() -> None:
    import httpx

    from searchfuse.integrations._search_tools import UNFORESEEN

    def explode(request: httpx.Request) -> httpx.Response:
        raise RuntimeError(f"proxy plugin failed for {TEST_KEYS[0]}")

    with Router(list(TEST_KEYS), transport=httpx.MockTransport(explode)) as router:
        told = RoutedTavilySearch(router=router).invoke(
            {"name": "tavily_search", "args": {"query": "b"}, "id": "t-1", "type": "tool_call"}
        )
    assert (told.status, told.content) == ("error", UNFORESEEN.format(error="RuntimeError"))
