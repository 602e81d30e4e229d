"""LangChain: a conversation budget through every way in, against Tavily on loopback.

A conversation is LangGraph's thread (`config["configurable"]["thread_id"]`),
else the agent run. The agents are real ``create_agent`` runs with a
scripted model; the searches are counted where they arrive, at the fake.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver

from searchfuse import Budget, BudgetExhausted, Router, spend_scope
from searchfuse.integrations.langchain import RoutedTavilySearch, SearchFuseMiddleware, guard_tool
from searchfuse.testing import TEST_KEYS, FakeTavily

from .test_langchain import ScriptedModel, searches, tavily_like

BUDGET = Budget(2, unit="searches", per="conversation")
OVER_BUDGET = BudgetExhausted(BUDGET, 2).message


@pytest.fixture
def router(tavily_server: str) -> Iterator[Router]:
    with Router(list(TEST_KEYS), base_url=tavily_server, budgets=[BUDGET]) as router:
        yield router


def test_the_refusal_names_the_budget_and_what_to_do() -> None:
    assert "this conversation has used its 2 web searches" in OVER_BUDGET
    assert "answer from what you have" in OVER_BUDGET


def answers(
    tools: list[BaseTool],
    middleware: list[SearchFuseMiddleware],
    *queries: str,
    thread: str | None = None,
    run_id: uuid.UUID | None = None,
    checkpointer: InMemorySaver | None = None,
    mode: str = "invoke",
) -> list[str]:
    """One agent run, one model reply per query; what the model read back for each."""
    replies = [searches(q, reply=f"{q}-{uuid.uuid4().hex[:6]}") for q in queries]
    model = ScriptedModel(responses=[*replies, AIMessage("done")])
    agent = create_agent(model, tools=tools, middleware=middleware, checkpointer=checkpointer)
    config: Any = {"configurable": {"thread_id": thread}} if thread else {}
    if run_id is not None:
        config["run_id"] = run_id
    state = {"messages": [HumanMessage("go")]}
    if mode == "ainvoke":
        result = asyncio.run(agent.ainvoke(state, config))
    else:
        result = agent.invoke(state, config)
    ids = {str(call["id"]) for reply in replies for call in reply.tool_calls}
    told = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.tool_call_id in ids]
    assert len(told) == len(queries)
    return [str(m.content) for m in told]


def queries_at(fake: FakeTavily) -> list[str]:
    return [str(r.query) for r in fake.searches]


def test_the_middleware_counts_a_thread_across_runs_and_each_thread_apart(
    router: Router, fake_tavily: FakeTavily
) -> None:
    saver = InMemorySaver()
    tools: list[BaseTool] = [RoutedTavilySearch(router=router)]
    middleware = [SearchFuseMiddleware()]

    a = answers(tools, middleware, "python 3.13", "rust 2024", thread="t-a", checkpointer=saver)
    b = answers(tools, middleware, "zig 0.14", "pep 703", thread="t-b", checkpointer=saver)
    # Thread a's next run is the same conversation: over its budget, refused unsent.
    (again,) = answers(tools, middleware, "go 1.24", thread="t-a", checkpointer=saver)

    assert OVER_BUDGET not in a + b
    assert again == OVER_BUDGET
    assert queries_at(fake_tavily) == ["python 3.13", "rust 2024", "zig 0.14", "pep 703"]


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_without_a_thread_the_middleware_counts_each_run(
    router: Router, fake_tavily: FakeTavily, mode: str
) -> None:
    tools: list[BaseTool] = [RoutedTavilySearch(router=router)]
    middleware = [SearchFuseMiddleware()]

    first = answers(tools, middleware, "python 3.13", "rust 2024", "zig 0.14", mode=mode)
    second = answers(tools, middleware, "pep 703", "go 1.24", mode=mode)

    assert first[2] == OVER_BUDGET and OVER_BUDGET not in first[:2] + second
    assert queries_at(fake_tavily) == ["python 3.13", "rust 2024", "pep 703", "go 1.24"]


def test_a_routed_guard_tool_without_the_middleware_counts_the_thread(
    router: Router, fake_tavily: FakeTavily
) -> None:
    tools: list[BaseTool] = [guard_tool(tavily_like(fake_tavily), router=router, per_turn=None)]

    a = answers(tools, [], "python 3.13", "rust 2024", "zig 0.14", thread="t-a")
    b = answers(tools, [], "pep 703", "go 1.24", thread="t-b")

    assert a[2] == OVER_BUDGET and OVER_BUDGET not in a[:2] + b
    assert queries_at(fake_tavily) == ["python 3.13", "rust 2024", "pep 703", "go 1.24"]


def test_without_a_thread_the_run_id_given_names_the_conversation(
    router: Router, fake_tavily: FakeTavily
) -> None:
    # LangGraph's servers give every run its run_id: a run resumed under the
    # same id goes on spending from the same budget, with or without the middleware.
    run = uuid.uuid4()
    guarded: list[BaseTool] = [guard_tool(tavily_like(fake_tavily), router=router, per_turn=None)]
    routed: list[BaseTool] = [RoutedTavilySearch(router=router)]

    first = answers(guarded, [], "python 3.13", run_id=run)
    again = answers(routed, [SearchFuseMiddleware()], "rust 2024", "zig 0.14", run_id=run)
    other = answers(guarded, [], "pep 703", run_id=uuid.uuid4())

    assert again[1] == OVER_BUDGET and OVER_BUDGET not in first + again[:1] + other
    assert queries_at(fake_tavily) == ["python 3.13", "rust 2024", "pep 703"]


def test_routed_tavily_search_alone_counts_the_thread_of_its_config(
    router: Router, fake_tavily: FakeTavily
) -> None:
    search = RoutedTavilySearch(router=router)

    def ask(query: str, thread: str) -> ToolMessage:
        call = {"name": "tavily_search", "args": {"query": query}, "id": query, "type": "tool_call"}
        message = search.invoke(call, {"configurable": {"thread_id": thread}})
        assert isinstance(message, ToolMessage)
        return message

    a = [ask(q, "t-a") for q in ("python 3.13", "rust 2024", "zig 0.14")]
    b = [ask(q, "t-b") for q in ("pep 703", "go 1.24")]

    assert [m.status for m in a + b] == ["success", "success", "error", "success", "success"]
    assert a[2].content == OVER_BUDGET
    assert queries_at(fake_tavily) == ["python 3.13", "rust 2024", "pep 703", "go 1.24"]


def test_an_applications_spend_scope_wins_over_the_thread(
    router: Router, fake_tavily: FakeTavily
) -> None:
    tools: list[BaseTool] = [RoutedTavilySearch(router=router)]
    middleware = [SearchFuseMiddleware()]

    with spend_scope(conversation="chat-7"):
        told = [answers(tools, middleware, q, thread=f"t-{q}")[0] for q in ("a", "b", "c")]

    assert told[2] == OVER_BUDGET and OVER_BUDGET not in told[:2]
    assert queries_at(fake_tavily) == ["a", "b"]


def test_a_subagent_spends_from_the_outer_runs_conversation(
    router: Router, fake_tavily: FakeTavily
) -> None:
    inner_tools: list[BaseTool] = [RoutedTavilySearch(router=router)]

    @tool("ask_researcher")
    def ask_researcher(query: str) -> str:
        """Hand a question to the research agent."""
        (told,) = answers(inner_tools, [SearchFuseMiddleware()], query)
        return told

    outer = [
        AIMessage("", tool_calls=[{"name": "ask_researcher", "args": {"query": q}, "id": q}])
        for q in ("python 3.13", "rust 2024", "zig 0.14")
    ]
    model = ScriptedModel(responses=[*outer, AIMessage("done")])
    agent = create_agent(model, tools=[ask_researcher], middleware=[SearchFuseMiddleware()])
    result = agent.invoke({"messages": [HumanMessage("go")]})

    told = [m.content for m in result["messages"] if isinstance(m, ToolMessage)]
    assert told[2] == OVER_BUDGET and OVER_BUDGET not in told[:2]
    assert queries_at(fake_tavily) == ["python 3.13", "rust 2024"]
