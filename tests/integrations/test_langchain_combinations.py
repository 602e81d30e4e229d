"""SearchFuseMiddleware next to LangChain's own middleware, in either order.

Real ``create_agent``, real ``ToolRetryMiddleware``, ``ToolErrorMiddleware``,
``ToolCallLimitMiddleware``, ``ModelRetryMiddleware`` and
``ModelFallbackMiddleware``, a scripted fake chat model and the simulated
Tavily. Whatever the order: a 429 is never retried through searchfuse (one
request reaches Tavily), and every tool call gets exactly one ToolMessage.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    ModelFallbackMiddleware,
    ModelRetryMiddleware,
    ToolCallLimitMiddleware,
    ToolErrorMiddleware,
    ToolRetryMiddleware,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest

from searchfuse import RateLimited, TurnLimitReached
from searchfuse.integrations.langchain import SearchFuseMiddleware
from searchfuse.testing import FakeTavily
from tests.integrations.test_langchain import (
    ScriptedModel,
    ask,
    searches,
    tavily_like,
    tavily_raising,
)

ONE_PER_REPLY = TurnLimitReached(1).message


class FlakyModel(ScriptedModel):
    """The scripted model, failing its first calls (what ModelRetryMiddleware retries)."""

    failures: int = 1

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("the model provider dropped the connection")
        return super()._generate(*args, **kwargs)


def surfaced(exc: Exception, request: ToolCallRequest) -> str:
    """A ToolErrorMiddleware handler that hands every tool exception to the model."""
    return f"{request.tool_call['name']} failed ({type(exc).__name__})"


def theirs(kind: str, replies: list[AIMessage]) -> AgentMiddleware[Any, Any, Any]:
    if kind == "tool_retry":
        # No backoff: the test must not sleep, and a retry would show in the request count.
        return ToolRetryMiddleware(max_retries=2, initial_delay=0, jitter=False)
    if kind == "tool_error":
        return ToolErrorMiddleware(surfaced)
    if kind == "tool_call_limit":
        return ToolCallLimitMiddleware(run_limit=2)
    if kind == "model_fallback":
        # The agent's own model always fails; the fallback answers from the script.
        return ModelFallbackMiddleware(ScriptedModel(responses=replies))
    return ModelRetryMiddleware(max_retries=2, initial_delay=0, jitter=False)


def agent_for(kind: str, ours_first: bool, tools: list[Any], *replies: AIMessage) -> Any:
    script = [*replies, AIMessage("done")]
    other = theirs(kind, script)
    ours = SearchFuseMiddleware(cooldown=45)
    middleware = [ours, other] if ours_first else [other, ours]
    if kind == "model_retry":
        model: ScriptedModel = FlakyModel(responses=script)
    elif kind == "model_fallback":
        model = FlakyModel(responses=[], failures=len(script))
    else:
        model = ScriptedModel(responses=script)
    return create_agent(model, tools=tools, middleware=middleware)


def answers_per_call(messages: list[BaseMessage]) -> collections.Counter[str]:
    return collections.Counter(m.tool_call_id for m in messages if isinstance(m, ToolMessage))


KINDS = ["tool_retry", "tool_error", "tool_call_limit", "model_retry", "model_fallback"]
ORDERS = [pytest.param(True, id="searchfuse-first"), pytest.param(False, id="searchfuse-last")]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ours_first", ORDERS)
@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_a_raised_429_is_never_retried(
    fake_tavily: FakeTavily, kind: str, ours_first: bool, mode: str
) -> None:
    fake_tavily.fail_next(429, retry_after=30, path="/search")
    agent = agent_for(
        kind, ours_first, [tavily_raising(fake_tavily)], searches("a", tool="web_search")
    )

    messages = ask(agent, mode)

    assert len(fake_tavily.requests) == 1
    assert answers_per_call(messages) == {"r-0": 1}
    (answer,) = [m for m in messages if isinstance(m, ToolMessage)]
    assert (answer.status, answer.content) == ("error", RateLimited(30.0).message)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ours_first", ORDERS)
def test_a_reported_429_is_never_retried(
    fake_tavily: FakeTavily, kind: str, ours_first: bool
) -> None:
    fake_tavily.fail_next(429, retry_after=30, path="/search")
    agent = agent_for(
        kind,
        ours_first,
        [tavily_like(fake_tavily)],
        searches("a", reply="x"),
        searches("b", reply="y"),  # the next reply: refused by the fuse, no request
    )

    messages = ask(agent)

    assert len(fake_tavily.requests) == 1
    assert answers_per_call(messages) == {"x-0": 1, "y-0": 1}
    answers = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    assert answers["x-0"].content == RateLimited(45.0).message
    assert "cooling down" in str(answers["y-0"].content)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ours_first", ORDERS)
@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_every_call_of_a_parallel_burst_gets_one_answer(
    fake_tavily: FakeTavily, kind: str, ours_first: bool, mode: str
) -> None:
    agent = agent_for(
        kind, ours_first, [tavily_like(fake_tavily)], searches("python", "rust", "go")
    )

    messages = ask(agent, mode)

    assert answers_per_call(messages) == {"r-0": 1, "r-1": 1, "r-2": 1}
    assert [r.query for r in fake_tavily.requests] == ["python"]
    answers = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    assert answers["r-0"].status == "success"
    assert answers["r-1"].content == ONE_PER_REPLY
    if kind == "tool_call_limit":
        # The third call is over ToolCallLimitMiddleware's run limit: its answer, not ours.
        assert answers["r-2"].content != ONE_PER_REPLY
        assert answers["r-2"].status == "error"
    else:
        assert answers["r-2"].content == ONE_PER_REPLY
    assert messages[-1].content == "done"


def test_the_reply_is_decided_when_another_middleware_answered_a_call_first(
    fake_tavily: FakeTavily,
) -> None:
    # ToolCallLimitMiddleware listed after ours runs its after_model first and
    # appends its answer to the reply's last call. The reply's other calls are
    # still decided together, in the reply's order: which of them the tool node
    # starts first (a thread race under invoke) cannot pick the search that runs.
    ours = SearchFuseMiddleware(cooldown=45)
    reply = searches("python", "rust", "go")
    limited = ToolMessage("over the limit", tool_call_id="r-2", status="error")
    state: Any = {"messages": [HumanMessage("go"), reply, limited]}
    ours.after_model(state, runtime=None)  # type: ignore[arg-type]
    tool = tavily_like(fake_tavily)
    ran: list[str] = []

    def run(request: ToolCallRequest) -> ToolMessage:
        ran.append(request.tool_call["args"]["query"])
        return ToolMessage("ok", tool_call_id=str(request.tool_call["id"]))

    # The second call runs first: it is refused without reaching the tool.
    second = ToolCallRequest(tool_call=reply.tool_calls[1], tool=tool, state=state, runtime=None)
    first = ToolCallRequest(tool_call=reply.tool_calls[0], tool=tool, state=state, runtime=None)
    refused = ours.wrap_tool_call(second, run)
    answered = ours.wrap_tool_call(first, run)

    assert isinstance(refused, ToolMessage)
    assert (refused.status, refused.content) == ("error", ONE_PER_REPLY)
    assert isinstance(answered, ToolMessage) and answered.content == "ok"
    assert ran == ["python"]


STACKS = {
    # LangChain's recommended composition: the error handler outside, the retries inside.
    "searchfuse-first": lambda error, retry, ours: [ours, error, retry],
    "searchfuse-between": lambda error, retry, ours: [error, ours, retry],
    "searchfuse-last": lambda error, retry, ours: [error, retry, ours],
}


def stacked(order: str, tools: list[Any], *replies: AIMessage) -> Any:
    error = ToolErrorMiddleware(surfaced)
    retry = ToolRetryMiddleware(max_retries=2, initial_delay=0, jitter=False, on_failure="error")
    ours = SearchFuseMiddleware(cooldown=45)
    model = ScriptedModel(responses=[*replies, AIMessage("done")])
    return create_agent(model, tools=tools, middleware=STACKS[order](error, retry, ours))


@pytest.mark.parametrize("order", list(STACKS))
@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_a_429_under_error_and_retry_middleware_is_one_request_and_searchfuses_answer(
    fake_tavily: FakeTavily, order: str, mode: str
) -> None:
    fake_tavily.fail_next(429, retry_after=30, path="/search")
    agent = stacked(order, [tavily_raising(fake_tavily)], searches("a", tool="web_search"))

    messages = ask(agent, mode)

    assert len(fake_tavily.requests) == 1
    assert answers_per_call(messages) == {"r-0": 1}
    (answer,) = [m for m in messages if isinstance(m, ToolMessage)]
    assert (answer.status, answer.content) == ("error", RateLimited(30.0).message)


FAILED_SEARCH = TurnLimitReached(1, failed=True).message


@pytest.mark.parametrize("order", list(STACKS))
@pytest.mark.parametrize("times", [1, 3], ids=["once", "lasting"])
def test_a_server_error_spends_the_replys_search_and_its_retries_are_refused_unsent(
    fake_tavily: FakeTavily, order: str, times: int
) -> None:
    # A 500 is not a rate limit, so ToolRetryMiddleware retries it; each retry
    # passes the guard again, which has given the reply its one search: refused,
    # nothing sent, and the model is told the search failed. ToolErrorMiddleware
    # gets no exception to report.
    fake_tavily.fail_next(500, path="/search", times=times)
    agent = stacked(order, [tavily_raising(fake_tavily)], searches("a", tool="web_search"))

    messages = ask(agent)

    assert [r.status for r in fake_tavily.searches] == [500]
    assert answers_per_call(messages) == {"r-0": 1}
    (answer,) = [m for m in messages if isinstance(m, ToolMessage)]
    assert (answer.status, answer.content) == ("error", FAILED_SEARCH)


@pytest.mark.parametrize("order", list(STACKS))
def test_with_searches_to_spare_a_retry_of_a_server_error_is_sent_and_served(
    fake_tavily: FakeTavily, order: str
) -> None:
    fake_tavily.fail_next(500, path="/search")
    error = ToolErrorMiddleware(surfaced)
    retry = ToolRetryMiddleware(max_retries=2, initial_delay=0, jitter=False, on_failure="error")
    ours = SearchFuseMiddleware(per_turn=2)
    model = ScriptedModel(responses=[searches("a", tool="web_search"), AIMessage("done")])
    tools = [tavily_raising(fake_tavily)]
    agent = create_agent(model, tools=tools, middleware=STACKS[order](error, retry, ours))

    messages = ask(agent)

    assert [r.status for r in fake_tavily.searches] == [500, 200]
    assert answers_per_call(messages) == {"r-0": 1}
    (answer,) = [m for m in messages if isinstance(m, ToolMessage)]
    assert answer.status == "success"
