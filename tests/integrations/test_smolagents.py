"""smolagents' real ``ToolCallingAgent`` and ``CodeAgent`` with a scripted model and the
simulated Tavily over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from smolagents import CodeAgent, Model, ToolCallingAgent
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
    get_tool_json_schema,
)
from smolagents.tools import validate_tool_arguments

from searchfuse import (
    Budget,
    BudgetExhausted,
    CooldownActive,
    RateLimited,
    Router,
    TurnLimitReached,
)
from searchfuse.integrations._tavily_tool import TOOL_DESCRIPTION
from searchfuse.integrations.smolagents import (
    TavilySearchTool,
    WebSearchTool,
    running_agent,
    step_turn_id,
)
from searchfuse.testing import TEST_KEYS, FakeTavily

ONE_PER_REPLY = TurnLimitReached(1).message
#: One model reply: tool calls (a query, or the call's arguments), or a CodeAgent's code.
Reply = list[str | dict[str, Any]] | str


class ScriptedModel(Model):  # type: ignore[misc]
    """A smolagents ``Model`` answering from a script, keeping what it was told.

    For a ``ToolCallingAgent`` a reply is a list of parallel tool calls (a
    final string becomes a ``final_answer`` call); for a ``CodeAgent`` it is
    the code of one action.
    """

    def __init__(self, script: list[Reply], tool: str = "web_search") -> None:
        super().__init__(model_id="scripted")
        self.script = list(script)
        self.tool = tool
        self.told: list[list[ChatMessage]] = []

    def generate(self, messages: list[ChatMessage], *args: Any, **kwargs: Any) -> ChatMessage:
        self.told.append(list(messages))
        reply = self.script.pop(0)
        if isinstance(reply, str) and reply.startswith("<code>"):
            return ChatMessage(role=MessageRole.ASSISTANT, content=f"Thought: go.\n{reply}")
        if isinstance(reply, str):
            calls: list[tuple[str, dict[str, Any]]] = [("final_answer", {"answer": reply})]
        else:
            calls = [
                (self.tool, {"query": call} if isinstance(call, str) else call) for call in reply
            ]
        number = len(self.told)
        return ChatMessage(
            role=MessageRole.ASSISTANT,
            content="",
            tool_calls=[
                ChatMessageToolCall(
                    id=f"call_{number}_{i}",
                    type="function",
                    function=ChatMessageToolCallFunction(name=name, arguments=arguments),
                )
                for i, (name, arguments) in enumerate(calls)
            ],
        )

    def observed(self, reply: int) -> str:
        """The text the model read back after its `reply`-th reply (from 1)."""
        content = self.told[reply][-1].content
        if isinstance(content, list):
            return "\n".join(str(part.get("text", "")) for part in content)
        return str(content)


def code(*lines: str) -> str:
    """A CodeAgent action."""
    return "<code>\n" + "\n".join(lines) + "\n</code>"


@pytest.fixture
def router(tavily_server: str) -> Iterator[Router]:
    with Router(list(TEST_KEYS), base_url=tavily_server) as router:
        yield router


def results_in(text: str) -> int:
    return len(json.loads(text)["results"])


# -- ToolCallingAgent: the parallel calls of one step ------------------------------------


@pytest.mark.parametrize("threads", [None, 1], ids=["threads", "one-thread"])
def test_parallel_calls_of_one_step_make_one_request_and_the_next_step_searches(
    fake_tavily: FakeTavily, router: Router, threads: int | None
) -> None:
    # With one tool thread the step's calls run one after another, never
    # overlapping: only the step can tell that they answer one reply.
    model = ScriptedModel([["python 3.13", "rust 2024", "pep 703"], ["zig 0.14"], "Done."])
    agent = ToolCallingAgent(
        tools=[WebSearchTool(router)], model=model, max_tool_threads=threads, verbosity_level=-1
    )

    assert agent.run("What is new?") == "Done."  # the refusals did not end the run

    first, second, *_ = fake_tavily.searches
    assert len(fake_tavily.searches) == 2
    # The step's calls run in threads: whichever reaches the guard first searches.
    assert first.query in {"python 3.13", "rust 2024", "pep 703"}
    assert second.query == "zig 0.14"
    told = model.observed(1)
    assert told.count(ONE_PER_REPLY) == 2
    assert f"Simulated result 1 for '{first.query}'" in told
    assert ONE_PER_REPLY not in model.observed(2)


def test_a_429_stops_the_step_and_later_steps_are_refused_unsent(
    fake_tavily: FakeTavily, router: Router
) -> None:
    fake_tavily.fail_next(429, retry_after=30, path="/search")
    model = ScriptedModel([["python 3.13"], ["rust 2024", "zig 0.14"], "Paused."])
    agent = ToolCallingAgent(tools=[WebSearchTool(router)], model=model, verbosity_level=-1)

    assert agent.run("What is new?") == "Paused."

    assert [(r.query, r.status) for r in fake_tavily.searches] == [("python 3.13", 429)]
    assert RateLimited(30).message in model.observed(1)
    assert model.observed(2).count(CooldownActive(30).message) == 2


def test_a_run_that_goes_on_searches_again_in_its_first_step(
    fake_tavily: FakeTavily, router: Router
) -> None:
    # run(reset=False) numbers its steps from 1 again: the memory tells them apart.
    model = ScriptedModel([["python 3.13"], "Done.", ["rust 2024"], "Done."])
    agent = ToolCallingAgent(tools=[WebSearchTool(router)], model=model, verbosity_level=-1)

    agent.run("What is new in Python?")
    agent.run("And in Rust?", reset=False)

    assert [r.query for r in fake_tavily.searches] == ["python 3.13", "rust 2024"]


# -- CodeAgent: the searches of one code action ------------------------------------------


@pytest.mark.parametrize("timeout", [30, None], ids=["worker-thread", "agent-thread"])
def test_the_searches_of_one_code_action_are_one_turn(
    fake_tavily: FakeTavily, router: Router, timeout: int | None
) -> None:
    model = ScriptedModel(
        [
            code("a = web_search('python 3.13')", "b = web_search('rust 2024')", "print(b)"),
            code("print(web_search(query='zig 0.14', max_results=2))"),
            code("final_answer('Done.')"),
        ]
    )
    agent = CodeAgent(
        tools=[WebSearchTool(router)],
        model=model,
        executor_kwargs={"timeout_seconds": timeout},
        verbosity_level=-1,
    )

    assert agent.run("What is new?") == "Done."

    assert [r.query for r in fake_tavily.searches] == ["python 3.13", "zig 0.14"]
    assert ONE_PER_REPLY in model.observed(1)
    assert "Simulated result 2 for 'zig 0.14'" in model.observed(2)


def test_a_bad_argument_costs_no_search_and_is_the_models_to_fix(
    fake_tavily: FakeTavily, router: Router
) -> None:
    model = ScriptedModel(
        [
            code(
                "print(web_search(query='rust 2024', max_results=50))",
                "print(web_search(query='rust 2024', topic='sports'))",
                "print(web_search(query='rust 2024', include_domains='rust-lang.org'))",
                "print(web_search(query='rust 2024', max_results=3))",
            ),
            code("final_answer('Done.')"),
        ]
    )
    agent = CodeAgent(tools=[WebSearchTool(router)], model=model, verbosity_level=-1)

    agent.run("What is new?")

    told = model.observed(1)
    assert "Search not sent: max_results must be between 0 and 20, not 50." in told
    assert "topic must be one of general, news, not 'sports'" in told
    assert "include_domains must be a list of domain names" in told
    # The corrected call still had the step's search.
    assert [(r.query, r.body and r.body["max_results"]) for r in fake_tavily.searches] == [
        ("rust 2024", 3)
    ]


def test_a_managed_agents_steps_are_its_own_turns(fake_tavily: FakeTavily, router: Router) -> None:
    search = WebSearchTool(router)
    researcher_model = ScriptedModel([["rust 2024"], "Rust 2024 is out."])
    researcher = ToolCallingAgent(
        tools=[search],
        model=researcher_model,
        name="researcher",
        description="Searches the web for one question.",
        verbosity_level=-1,
    )
    boss_model = ScriptedModel(
        [
            code(
                "print(web_search('python 3.13'))",
                "print(researcher(task='What is new in Rust?'))",
            ),
            code("final_answer('Done.')"),
        ]
    )
    boss = CodeAgent(
        tools=[search], model=boss_model, managed_agents=[researcher], verbosity_level=-1
    )

    boss.run("What is new?")

    # The boss's action searched once; the researcher's step, a turn of its own, searched too.
    assert [r.query for r in fake_tavily.searches] == ["python 3.13", "rust 2024"]


# -- the tools as smolagents sees them ---------------------------------------------------


@pytest.mark.parametrize("tool_class", [WebSearchTool, TavilySearchTool])
def test_smolagents_accepts_the_tools(router: Router, tool_class: type[WebSearchTool]) -> None:
    tool = tool_class(router)
    tool.validate_arguments()  # smolagents' own checks: name, inputs, output_type, forward

    schema = get_tool_json_schema(tool)["function"]
    assert schema["parameters"]["required"] == ["query"]
    validate_tool_arguments(tool, {"query": "python", "max_results": 3, "time_range": "week"})
    with pytest.raises(TypeError):
        validate_tool_arguments(tool, {"query": "python", "max_results": "three"})
    assert f"def {tool.name}(query: string" in tool.to_code_prompt()
    # Both kinds of agent take it.
    model = ScriptedModel([])
    assert ToolCallingAgent(tools=[tool], model=model).tools[tool.name] is tool
    assert CodeAgent(tools=[tool], model=model).tools[tool.name] is tool


def test_the_tools_parameters(router: Router) -> None:
    web, tavily = WebSearchTool(router), TavilySearchTool(router)

    assert (web.name, tavily.name) == ("web_search", "tavily_search")
    assert tavily.description == TOOL_DESCRIPTION  # the MCP server's contract
    assert list(web.inputs) == [
        "query",
        "max_results",
        "topic",
        "time_range",
        "include_domains",
        "exclude_domains",
    ]
    assert list(tavily.inputs) == [
        "query",
        "max_results",
        "search_depth",
        "topic",
        "time_range",
        "include_domains",
        "exclude_domains",
    ]
    assert web.inputs["topic"]["enum"] == ["general", "news"]
    assert tavily.inputs["topic"]["enum"] == ["general", "news", "finance"]
    assert web.output_type == tavily.output_type == "string"


def test_tavily_search_sends_tavilys_parameters(fake_tavily: FakeTavily, router: Router) -> None:
    arguments = {"query": "pep 703", "search_depth": "advanced", "topic": "news"}
    model = ScriptedModel([[arguments], "Done."], tool="tavily_search")
    agent = ToolCallingAgent(tools=[TavilySearchTool(router)], model=model, verbosity_level=-1)

    agent.run("What is PEP 703?")

    (sent,) = fake_tavily.searches
    assert sent.body is not None
    assert {k: sent.body[k] for k in arguments} == arguments
    assert sent.credits == 2
    shown = json.loads(model.observed(1).removeprefix("Observation:\n"))
    assert "searchfuse" not in shown and "usage" not in shown  # the router's accounting


def test_outside_an_agent_the_burst_rule_decides(fake_tavily: FakeTavily, router: Router) -> None:
    tool = WebSearchTool(router)

    assert running_agent() is None and step_turn_id() is None
    assert results_in(tool(query="python 3.13")) == 5
    assert results_in(tool("rust 2024")) == 5  # one after the other: not one burst

    assert len(fake_tavily.searches) == 2
    assert tool.guard_state().searches == 2


def test_without_a_router_the_keys_come_from_the_environment(
    fake_tavily: FakeTavily, tavily_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAVILY_API_KEYS", ",".join(TEST_KEYS[:2]))  # TAVILY_BASE_URL is set
    model = ScriptedModel([["python 3.13", "pep 703"], "Done."])

    ToolCallingAgent(tools=[WebSearchTool()], model=model, verbosity_level=-1).run("What?")

    assert len(fake_tavily.searches) == 1
    assert ONE_PER_REPLY in model.observed(1)


def test_guard_options_are_checked(router: Router) -> None:
    with pytest.raises(ValueError, match="per_turn"):
        WebSearchTool(router, per_turn=-1)


# -- spend: a task is the conversation its budget counts -------------------------------------


def test_a_conversation_budget_counts_one_task_and_a_new_task_starts_afresh(
    fake_tavily: FakeTavily, tavily_server: str
) -> None:
    budget = Budget(2, unit="searches", per="conversation")
    refused = BudgetExhausted(budget, 2).message
    with Router(list(TEST_KEYS), base_url=tavily_server, budgets=[budget]) as router:
        tool = WebSearchTool(router)
        model = ScriptedModel([["python 3.13"], ["rust 2024"], ["zig 0.14"], "Done."])
        agent = ToolCallingAgent(tools=[tool], model=model, verbosity_level=-1)
        assert agent.run("What is new?") == "Done."
        # The third step is over the task's budget: refused, unsent, and told why.
        assert [r.query for r in fake_tavily.searches] == ["python 3.13", "rust 2024"]
        assert refused in model.observed(3)

        # run(reset=False) goes on with the same task: still over its budget.
        model.script = [["pep 703"], "Done."]
        agent.run("And Python?", reset=False)
        assert len(fake_tavily.searches) == 2

        # A new task (a fresh run) is another conversation: its two searches are served.
        model.script = [["go 1.24"], ["bun 1.2"], "Done."]
        agent.run("And Go?")
        assert [r.query for r in fake_tavily.searches] == [
            "python 3.13",
            "rust 2024",
            "go 1.24",
            "bun 1.2",
        ]


@pytest.mark.parametrize("tool_class", [WebSearchTool, TavilySearchTool])
def test_a_missing_query_is_the_models_to_fix_and_costs_no_search(
    fake_tavily: FakeTavily, router: Router, tool_class: type[WebSearchTool]
) -> None:
    # A CodeAgent calls the tool as Python: `web_search(query=None)` reaches it as is.
    tool = tool_class(router)
    told = tool(query=None)
    assert told.startswith("the request was not sent: query must be a non-empty string")
    assert "Traceback" not in told and "Guard" not in told
    assert results_in(tool(query="python 3.13")) == 5
    assert [r.query for r in fake_tavily.searches] == ["python 3.13"]


@pytest.mark.parametrize("tool_class", [WebSearchTool, TavilySearchTool])
def test_an_unforeseen_error_is_told_to_the_model_without_its_text(
    tool_class: type[WebSearchTool], caplog: pytest.LogCaptureFixture
) -> None:
    import httpx

    from searchfuse.integrations._search_tools import UNFORESEEN

    def explode(request: httpx.Request) -> httpx.Response:
        raise RuntimeError(f"proxy plugin failed for {TEST_KEYS[0]}")

    transport = httpx.MockTransport(explode)
    with Router(list(TEST_KEYS), transport=transport) as router:
        told = tool_class(router)(query="python 3.13")
    assert told == UNFORESEEN.format(error="RuntimeError")
    assert "RuntimeError" in caplog.text
