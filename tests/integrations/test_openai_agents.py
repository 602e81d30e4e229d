"""The OpenAI Agents SDK's real ``Runner`` with a scripted model and the simulated Tavily."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, FunctionTool, ModelResponse, RunConfig, Runner, Usage
from agents.items import ToolCallOutputItem
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from searchfuse import (
    Budget,
    BudgetExhausted,
    CooldownActive,
    RateLimited,
    Router,
    TurnLimitReached,
    spend_scope,
)
from searchfuse.integrations.openai_agents import tavily_search_tool, web_search_tool
from searchfuse.testing import EXA_TEST_KEYS, TEST_KEYS, FakeClock, FakeExa, FakeTavily

ONE_PER_REPLY = TurnLimitReached(1).message
Reply = str | list[str]


class ScriptedModel(Model):
    """The SDK's ``Model`` interface answering from a script.

    A list of queries is one response with that many parallel ``tavily_search``
    calls; a string is the final answer. ``requests`` is what the response
    reports as usage (the SDK's own models report 1).
    """

    def __init__(
        self, script: list[Reply], *, requests: int = 1, tool: str = "tavily_search"
    ) -> None:
        self.script = list(script)
        self.requests = requests
        self.tool = tool
        self.inputs: list[Any] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(kwargs["input"])
        reply = self.script.pop(0)
        number = len(self.inputs)
        output: list[Any]
        if isinstance(reply, str):
            text = ResponseOutputText(type="output_text", text=reply, annotations=[])
            output = [
                ResponseOutputMessage(
                    id=f"msg_{number}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            ]
        else:
            output = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{number}_{i}",
                    call_id=f"call_{number}_{i}",
                    name=self.tool,
                    arguments=json.dumps({"query": query}),
                )
                for i, query in enumerate(reply)
            ]
        usage = Usage(requests=self.requests, input_tokens=10, output_tokens=5, total_tokens=15)
        return ModelResponse(output=output, usage=usage, response_id=f"resp_{number}")

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


def router_on(fake: FakeTavily, clock: FakeClock) -> Router:
    return Router(
        list(TEST_KEYS), clock=clock, transport=fake.transport(), async_transport=fake.transport()
    )


async def run(tool: FunctionTool, model: ScriptedModel) -> tuple[str, list[list[str]]]:
    """Run the agent; the final output and the tool outputs, grouped by model response."""
    agent = Agent(name="researcher", instructions="Answer briefly.", model=model, tools=[tool])
    result = await Runner.run(
        agent, "What is new?", max_turns=6, run_config=RunConfig(tracing_disabled=True)
    )
    outputs = [item for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    by_response: dict[str, list[str]] = {}
    for item in outputs:
        response = item.raw_item["call_id"].split("_")[1]  # type: ignore[index]
        by_response.setdefault(response, []).append(str(item.output))
    return str(result.final_output), list(by_response.values())


def results_in(output: str) -> int:
    return len(json.loads(output)["results"])


async def test_three_parallel_calls_make_one_request_and_the_next_response_searches_again(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    tool = tavily_search_tool(router_on(fake_tavily, fake_clock))
    model = ScriptedModel([["python 3.13", "rust 2024", "pep 703"], ["zig 0.14"], "Done."])

    final, (first, second) = await run(tool, model)

    assert final == "Done."  # the run completed
    assert [results_in(first[0]), first[1:]] == [5, [ONE_PER_REPLY, ONE_PER_REPLY]]
    assert results_in(second[0]) == 5
    assert [r.query for r in fake_tavily.searches] == ["python 3.13", "zig 0.14"]
    # The model read the refusals as the tool's output in its next response's input.
    seen = [i for i in model.inputs[1] if i.get("type") == "function_call_output"]
    assert [i["output"] for i in seen][1:] == [ONE_PER_REPLY, ONE_PER_REPLY]


async def test_a_429_stops_the_search_and_the_next_response_is_refused_without_a_request(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    fake_tavily.fail_next(429, retry_after=30, path="/search")
    tool = tavily_search_tool(router_on(fake_tavily, fake_clock))
    model = ScriptedModel([["python 3.13"], ["rust 2024", "zig 0.14"], "Searching is paused."])

    final, (stopped, refused) = await run(tool, model)

    assert final == "Searching is paused."
    assert stopped == [RateLimited(30).message]
    assert refused == [CooldownActive(30).message] * 2
    assert [r.status for r in fake_tavily.searches] == [429]  # nothing sent after it


async def test_a_cached_query_is_free_in_a_later_response(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    tool = tavily_search_tool(router_on(fake_tavily, fake_clock))
    model = ScriptedModel([["python 3.13"], ["Python 3.13 ", "rust 2024"], "Done."])

    _, (_, second) = await run(tool, model)

    # The repeat comes from the cache; the response's one search still runs.
    assert [results_in(output) for output in second] == [5, 5]
    assert [r.query for r in fake_tavily.searches] == ["python 3.13", "rust 2024"]


async def test_without_usage_figures_overlapping_calls_are_one_turn(
    fake_tavily: FakeTavily, tavily_server: str
) -> None:
    # A model reporting no usage gives no response count: the burst rule decides.
    # On real HTTP the calls of one response overlap; the next response comes
    # after they ended.
    router = Router(list(TEST_KEYS), base_url=tavily_server)
    model = ScriptedModel([["a", "b", "c"], ["d"], "Done."], requests=0)

    final, (first, second) = await run(tavily_search_tool(router), model)

    assert final == "Done."
    assert sorted(first).count(ONE_PER_REPLY) == 2
    assert results_in(second[0]) == 5
    assert len(fake_tavily.searches) == 2


def test_the_tool_is_a_function_tool_named_tavily_search_with_the_mcp_parameters(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    tool = tavily_search_tool(router_on(fake_tavily, fake_clock))
    assert isinstance(tool, FunctionTool) and tool.name == "tavily_search"
    assert list(tool.params_json_schema["properties"]) == [
        "query",
        "max_results",
        "search_depth",
        "topic",
        "time_range",
        "include_domains",
        "exclude_domains",
    ]


def test_guard_options_are_checked(fake_tavily: FakeTavily, fake_clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="per_turn"):
        tavily_search_tool(router_on(fake_tavily, fake_clock), per_turn=-1)


async def test_a_query_refused_before_sending_leaves_the_response_its_search(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    tool = tavily_search_tool(router_on(fake_tavily, fake_clock))
    model = ScriptedModel([["", "python 3.13"], "Done."])

    final, (outputs,) = await run(tool, model)

    assert final == "Done."
    assert outputs[0].startswith("the request was not sent: query must be a non-empty string")
    assert results_in(outputs[1]) == 5  # the empty query took no search from it
    assert [r.query for r in fake_tavily.searches] == ["python 3.13"]


# -- spend: a run is the conversation its budget counts -------------------------------------


async def test_a_conversation_budget_refuses_a_runs_third_search_and_not_another_runs(
    fake_tavily: FakeTavily, tavily_server: str
) -> None:
    budget = Budget(2, unit="searches", per="conversation")
    refused = BudgetExhausted(budget, 2).message
    assert "this conversation has used its 2 web searches" in refused
    assert "answer from what you have" in refused
    with Router(list(TEST_KEYS), base_url=tavily_server, budgets=[budget]) as router:
        tool = tavily_search_tool(router)
        first = ScriptedModel([["python 3.13"], ["rust 2024"], ["zig 0.14"], "Done."])
        final, outputs = await run(tool, first)
        # The run's third search is over its budget: refused, unsent, and the model told why.
        assert final == "Done."
        assert [r.query for r in fake_tavily.searches] == ["python 3.13", "rust 2024"]
        assert outputs[2] == [refused]
        seen = [i for i in first.inputs[3] if i.get("type") == "function_call_output"]
        assert seen[-1]["output"] == refused

        # Another run is another conversation: its two searches are served.
        _, outputs = await run(tool, ScriptedModel([["pep 703"], ["go 1.24"], "Done."]))
        assert [results_in(o[0]) for o in outputs] == [5, 5]
        assert len(fake_tavily.searches) == 4

        # An application's own spend_scope(conversation=...) wins over the run's.
        with spend_scope(conversation="chat-7"):
            for query in ("bun 1.2", "deno 2", "node 24"):
                _, outputs = await run(tool, ScriptedModel([[query], "Done."]))
        assert outputs == [[refused]]
        assert [r.query for r in fake_tavily.searches][4:] == ["bun 1.2", "deno 2"]


async def test_web_search_is_served_over_the_chain_one_search_per_response(
    fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    """Tavily's keys are rejected: the provider-neutral tool is served by Exa, under the
    same per-response rule; the Tavily-shaped tool keeps its own parameters."""
    exa = FakeExa(keys=EXA_TEST_KEYS, clock=fake_clock)
    for key in TEST_KEYS:
        fake_tavily.revoke(key)
    with fake_tavily.serve() as tavily_url, exa.serve() as exa_url:
        router = Router(
            {"tavily": list(TEST_KEYS), "exa": list(EXA_TEST_KEYS)},
            base_url=tavily_url,
            base_urls={"exa": exa_url},
            clock=fake_clock,
        )
        tool = web_search_tool(router)
        model = ScriptedModel([["python 3.13", "rust 2024"], "Done."], tool="web_search")
        final, (first,) = await run(tool, model)
    assert final == "Done."
    assert results_in(first[0]) == 5 and first[1:] == [ONE_PER_REPLY]
    assert [r.query for r in exa.searches] == ["python 3.13"]
    assert {r.status for r in fake_tavily.requests} == {401}  # every key refused; none served
    assert set(json.loads(first[0])) >= {"query", "results"}
    assert not {"searchfuse", "raw"} & set(json.loads(first[0]))
    assert tool.name == "web_search"
    assert set(tool.params_json_schema["properties"]) == {
        "query",
        "max_results",
        "topic",
        "time_range",
        "include_domains",
        "exclude_domains",
    }
    assert "search_depth" in tavily_search_tool(router).params_json_schema["properties"]


async def test_an_unforeseen_error_is_told_to_the_model_without_its_text_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import httpx

    from searchfuse.integrations._search_tools import UNFORESEEN

    def explode(request: httpx.Request) -> httpx.Response:
        raise RuntimeError(f"proxy plugin failed for {TEST_KEYS[0]}")

    transport = httpx.MockTransport(explode)
    with Router(list(TEST_KEYS), transport=transport, async_transport=transport) as router:
        for make, name in ((tavily_search_tool, "tavily_search"), (web_search_tool, "web_search")):
            model = ScriptedModel([["python 3.13"], "Done."], tool=name)
            final, (outputs,) = await run(make(router), model)
            assert final == "Done."
            assert outputs == [UNFORESEEN.format(error="RuntimeError")]
    assert "RuntimeError" in caplog.text
