"""Pydantic AI's real ``Agent`` with its ``FunctionModel`` and the simulated Tavily over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai import Agent, Tool
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from searchfuse import (
    Budget,
    BudgetExhausted,
    CooldownActive,
    RateLimited,
    Router,
    TurnLimitReached,
    spend_scope,
)
from searchfuse.integrations._tavily_tool import TOOL_DESCRIPTION
from searchfuse.integrations.pydantic_ai import tavily_search_tool, web_search_tool
from searchfuse.testing import TEST_KEYS, FakeTavily

ONE_PER_REPLY = TurnLimitReached(1).message
#: One model response: a list of tool calls (a query, or the call's arguments), or the final text.
Reply = str | list[str | dict[str, Any]]


class Script:
    """A `FunctionModel` function answering from a script, keeping what the model was told."""

    def __init__(self, replies: list[Reply], tool: str = "web_search") -> None:
        self.replies = list(replies)
        self.tool = tool
        self.told: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.told.append(list(messages))
        reply = self.replies.pop(0)
        if isinstance(reply, str):
            return ModelResponse(parts=[TextPart(reply)])
        number = len(self.told)
        return ModelResponse(
            parts=[
                ToolCallPart(
                    self.tool,
                    {"query": call} if isinstance(call, str) else call,
                    tool_call_id=f"call-{number}-{i}",
                )
                for i, call in enumerate(reply)
            ]
        )

    def returns(self, response: int) -> list[str]:
        """What the model read back for the tool calls of its `response`-th response (from 1)."""
        request = self.told[response][-1]
        assert isinstance(request, ModelRequest)
        return [str(p.content) for p in request.parts if isinstance(p, ToolReturnPart)]


@pytest.fixture
def router(tavily_server: str) -> Iterator[Router]:
    with Router(list(TEST_KEYS), base_url=tavily_server) as router:
        yield router


def agent_with(tool: Tool[Any], script: Script) -> Agent[None, str]:
    return Agent(FunctionModel(script), tools=[tool])


def results_in(text: str) -> int:
    return len(json.loads(text)["results"])


@pytest.mark.parametrize("mode", ["run_sync", "run"])
async def test_parallel_calls_of_one_response_make_one_request_and_the_next_response_searches(
    fake_tavily: FakeTavily, router: Router, mode: str
) -> None:
    script = Script([["python 3.13", "rust 2024", "pep 703"], ["zig 0.14"], "Done."])
    agent = agent_with(web_search_tool(router), script)

    if mode == "run":
        result = await agent.run("What is new?")
    else:
        # run_sync runs its own event loop: outside this test's loop, as a script would.
        import asyncio

        result = await asyncio.to_thread(agent.run_sync, "What is new?")

    assert result.output == "Done."  # the refusals did not end the run
    assert [r.query for r in fake_tavily.searches] == ["python 3.13", "zig 0.14"]
    first, second = script.returns(1), script.returns(2)
    assert [results_in(first[0]), first[1:]] == [5, [ONE_PER_REPLY, ONE_PER_REPLY]]
    assert [results_in(text) for text in second] == [5]


async def test_a_429_stops_the_turn_and_later_responses_are_refused_unsent(
    fake_tavily: FakeTavily, router: Router
) -> None:
    fake_tavily.fail_next(429, retry_after=30, path="/search")
    script = Script([["python 3.13", "rust 2024"], ["zig 0.14", "go 1.24"], ["pep 703"], "Paused."])

    result = await agent_with(web_search_tool(router), script).run("What is new?")

    assert result.output == "Paused."
    assert [(r.query, r.status) for r in fake_tavily.searches] == [("python 3.13", 429)]
    assert script.returns(1) == [RateLimited(30).message, ONE_PER_REPLY]
    assert script.returns(2) == [CooldownActive(30).message] * 2
    assert script.returns(3) == [CooldownActive(30).message]


async def test_calls_run_one_after_another_are_still_one_response(
    fake_tavily: FakeTavily, router: Router
) -> None:
    # Sequential execution: the calls never overlap, so only the run step can
    # tell that they answer one response.
    script = Script([["python 3.13", "rust 2024"], ["zig 0.14"], "Done."])
    agent = agent_with(web_search_tool(router), script)

    with Agent.parallel_tool_call_execution_mode("sequential"):
        await agent.run("What is new?")

    assert [r.query for r in fake_tavily.searches] == ["python 3.13", "zig 0.14"]
    assert script.returns(1)[1] == ONE_PER_REPLY


async def test_each_run_is_a_turn_of_its_own(fake_tavily: FakeTavily, router: Router) -> None:
    # Both runs search in their first step: the run id tells the steps apart.
    tool = web_search_tool(router)
    first, second = Script([["python 3.13"], "Done."]), Script([["rust 2024"], "Done."])

    await agent_with(tool, first).run("What is new in Python?")
    await agent_with(tool, second).run("What is new in Rust?")

    assert [r.query for r in fake_tavily.searches] == ["python 3.13", "rust 2024"]


async def test_a_cached_query_is_free_in_a_later_response(
    fake_tavily: FakeTavily, router: Router
) -> None:
    script = Script([["python 3.13"], ["Python 3.13 ", "rust 2024"], "Done."])

    await agent_with(web_search_tool(router), script).run("What is new?")

    # The repeat comes from the cache; the response's one search still runs.
    assert [results_in(text) for text in script.returns(2)] == [5, 5]
    assert [r.query for r in fake_tavily.searches] == ["python 3.13", "rust 2024"]


async def test_web_search_sends_the_provider_neutral_parameters(
    fake_tavily: FakeTavily, router: Router
) -> None:
    arguments = {
        "query": "rust 2024",
        "max_results": 3,
        "topic": "news",
        "time_range": "week",
        "include_domains": ["rust-lang.org"],
    }
    script = Script([[arguments], "Done."])

    await agent_with(web_search_tool(router), script).run("What is new?")

    (sent,) = fake_tavily.searches
    assert sent.body is not None
    assert {k: sent.body.get(k) for k in arguments} == arguments
    assert "exclude_domains" not in sent.body  # left unset: not sent
    assert results_in(script.returns(1)[0]) == 3
    shown = json.loads(script.returns(1)[0])
    assert "searchfuse" not in shown and "usage" not in shown  # the router's accounting


async def test_an_argument_out_of_range_is_sent_back_to_the_model_and_costs_no_search(
    fake_tavily: FakeTavily, router: Router
) -> None:
    script = Script([[{"query": "rust 2024", "max_results": 50}], ["rust 2024"], "Done."])

    await agent_with(web_search_tool(router), script).run("What is new?")

    # Pydantic AI's own validation told the model (a retry prompt, or since 2.x a
    # "retried" tool return); the tool never ran.
    assert "less than or equal to 20" in str(script.told[1][-1].parts)
    assert [r.query for r in fake_tavily.searches] == ["rust 2024"]


async def test_tavily_search_has_the_mcp_servers_contract(
    fake_tavily: FakeTavily, router: Router
) -> None:
    tool = tavily_search_tool(router)
    script = Script([[{"query": "pep 703", "search_depth": "advanced"}], "Done."], tool=tool.name)

    await agent_with(tool, script).run("What is PEP 703?")

    assert (tool.name, tool.description) == ("tavily_search", TOOL_DESCRIPTION)
    assert list(tool.tool_def.parameters_json_schema["properties"]) == [
        "query",
        "max_results",
        "search_depth",
        "topic",
        "time_range",
        "include_domains",
        "exclude_domains",
    ]
    (sent,) = fake_tavily.searches
    assert sent.body is not None and sent.body["search_depth"] == "advanced"
    assert sent.credits == 2


def test_web_search_names_the_provider_neutral_parameters(router: Router) -> None:
    tool = web_search_tool(router)
    schema = tool.tool_def.parameters_json_schema

    assert tool.name == "web_search"
    assert list(schema["properties"]) == [
        "query",
        "max_results",
        "topic",
        "time_range",
        "include_domains",
        "exclude_domains",
    ]
    assert schema["properties"]["topic"]["enum"] == ["general", "news"]
    assert schema["required"] == ["query"]


async def test_without_a_router_the_keys_come_from_the_environment(
    fake_tavily: FakeTavily, tavily_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAVILY_API_KEYS", ",".join(TEST_KEYS[:2]))  # TAVILY_BASE_URL is set
    script = Script([["python 3.13", "pep 703"], "Done."])

    await agent_with(web_search_tool(), script).run("What is new?")

    assert [r.query for r in fake_tavily.searches] == ["python 3.13"]
    assert script.returns(1)[1] == ONE_PER_REPLY


def test_guard_options_are_checked(router: Router) -> None:
    with pytest.raises(ValueError, match="per_turn"):
        web_search_tool(router, per_turn=-1)
    with pytest.raises(TypeError, match="cooldown"):
        tavily_search_tool(router, cooldown="soon")


# -- spend: a run is the conversation its budget counts -------------------------------------


async def test_a_conversation_budget_counts_one_run_and_a_new_run_starts_afresh(
    fake_tavily: FakeTavily, tavily_server: str
) -> None:
    budget = Budget(2, unit="searches", per="conversation")
    refused = BudgetExhausted(budget, 2).message
    with Router(list(TEST_KEYS), base_url=tavily_server, budgets=[budget]) as router:
        tool = web_search_tool(router)
        script = Script([["python 3.13"], ["rust 2024"], ["zig 0.14"], "Done."])
        assert (await agent_with(tool, script).run("What is new?")).output == "Done."
        # The third response of the run is over its budget: refused, unsent, and told why.
        assert [r.query for r in fake_tavily.searches] == ["python 3.13", "rust 2024"]
        assert script.returns(3) == [refused]

        # Another run is another conversation: its two searches are served.
        again = Script([["pep 703"], ["uv 0.5"], "Done."])
        await agent_with(tool, again).run("And Python?")
        assert [r.query for r in fake_tavily.searches][-2:] == ["pep 703", "uv 0.5"]
        assert [results_in(again.returns(n)[0]) for n in (1, 2)] == [5, 5]

        # An application's own spend_scope(conversation=...) wins over the run's.
        with spend_scope(conversation="chat-7"):
            for query in ("go 1.24", "bun 1.2", "deno 2"):
                await agent_with(tool, Script([[query], "Done."])).run("Go?")
        assert [r.query for r in fake_tavily.searches][-2:] == ["go 1.24", "bun 1.2"]
        assert len(fake_tavily.searches) == 6


def exploding_router() -> Router:
    """A router whose HTTP layer fails in a way nothing foresaw, naming a key in its text."""
    import httpx

    def explode(request: httpx.Request) -> httpx.Response:
        raise RuntimeError(f"proxy plugin failed for {TEST_KEYS[0]}")

    transport = httpx.MockTransport(explode)
    return Router(list(TEST_KEYS), transport=transport, async_transport=transport)


async def test_an_unforeseen_error_is_told_to_the_model_without_its_text_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from searchfuse.integrations._search_tools import UNFORESEEN

    with exploding_router() as router:
        script = Script([["python 3.13"], "Done."])
        result = await agent_with(web_search_tool(router), script).run("What is new?")

    assert result.output == "Done."
    told = script.returns(1)
    assert told == [UNFORESEEN.format(error="RuntimeError")]
    assert TEST_KEYS[0] not in told[0] and "Traceback" not in told[0]
    assert "RuntimeError" in caplog.text  # the operator sees what happened
