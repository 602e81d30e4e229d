"""OpenAI Agents SDK: guarded, routed `web_search` and `tavily_search` tools.

`pip install ".[openai-agents]"`, then:

```python
from agents import Agent
from searchfuse.integrations.openai_agents import web_search_tool

agent = Agent(name="researcher", tools=[web_search_tool()])
```

`web_search` is provider-neutral (the parameters every provider honours) and
served over the router's whole chain; `tavily_search` is Tavily's contract.

Every call passes one [`Guard`][searchfuse.Guard] (cache, fuse, turn budget)
and is served by a [`Router`][searchfuse.Router] over all keys. A turn is one
model response: the SDK runs the parallel tool calls of a response together,
so with `per_turn=1` one of them searches and the others are refused. A
refusal is the tool's output, a text that tells the model what happened and
what to do; it never raises, so it never ends the run. Budgets per
conversation count each run (`Runner.run`) as one conversation, unless the
application names one with `spend_scope(conversation=...)`.
"""

from __future__ import annotations

import contextlib
from typing import Any

try:
    from agents import FunctionTool, function_tool
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "searchfuse.integrations.openai_agents needs the OpenAI Agents SDK: "
        'pip install ".[openai-agents]"'
    ) from exc

from searchfuse._spend import conversation_scope
from searchfuse.guard import Guard, turn
from searchfuse.integrations._names import ObjectNames
from searchfuse.integrations._tavily_tool import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    WEB_SEARCH_DESCRIPTION,
    WEB_SEARCH_NAME,
    Depth,
    Domains,
    MaxResults,
    Query,
    TimeRange,
    Topic,
    WebTopic,
    answer,
)
from searchfuse.router import Router

__all__ = [
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "response_turn_id",
    "run_conversation",
    "tavily_search_tool",
    "web_search_tool",
]


#: Names for the runs tools serve, by the run's one `Usage` object.
_RUNS = ObjectNames()


def response_turn_id(context: ToolContext[Any]) -> str | None:
    """The turn id of the model response a tool call belongs to, or `None`.

    The SDK adds each model response's usage to the run's one `Usage`
    object before it runs that response's tool calls, and every model it
    ships counts a response as one request. So (the run, `usage.requests`)
    names the response: the same for the parallel calls of one response,
    new for the next. A model that reports no usage leaves `requests` at
    0; then the guard's burst rule decides (calls that overlap are one turn).
    """
    requests = getattr(context.usage, "requests", 0)
    if not isinstance(requests, int) or requests <= 0:
        return None
    return f"{run_conversation(context)}:response-{requests}"


def run_conversation(context: ToolContext[Any]) -> str:
    """The conversation budgets count a call against: its run, `openai-agents:run-<name>`.

    A run is one `Runner.run` (its tool calls share the run's `Usage`); a
    new run is a new conversation, whatever `conversation_id` or
    `previous_response_id` it continues.
    """
    return f"openai-agents:run-{_RUNS.name(context.usage)}"


def tavily_search_tool(router: Router | None = None, **guard_options: Any) -> FunctionTool:
    """A `FunctionTool` named `tavily_search`, guarded and served by `router`.

    Args:
        router: the router that serves the searches; default
            [`Router.from_env`][searchfuse.Router.from_env].
        **guard_options: options of [`Guard`][searchfuse.Guard] (`per_turn`,
            `cache`, `cooldown`, `checklist`, `budget`, `fuse`...).
            `min_interval` (default 0) only matters for models that report
            no usage: then overlapping calls, and calls starting within
            `min_interval` seconds of the previous one, are one turn.

    The tool's output is Tavily's answer as JSON (without the router's
    accounting), or, when the search is refused or fails, the refusal's
    message for the model.
    """
    rules = _rules(TOOL_NAME, router, guard_options)

    async def tavily_search(
        context: ToolContext[Any],
        query: Query,
        max_results: MaxResults = 5,
        search_depth: Depth = "basic",
        topic: Topic = "general",
        time_range: TimeRange = None,
        include_domains: Domains = None,
        exclude_domains: Domains = None,
    ) -> str:
        params = {
            "max_results": max_results,
            "search_depth": search_depth,
            "topic": topic,
            "time_range": time_range,
            "include_domains": include_domains,
            "exclude_domains": exclude_domains,
        }
        return await _reply(rules, context, TOOL_NAME, query, params)

    return function_tool(
        tavily_search, name_override=TOOL_NAME, description_override=TOOL_DESCRIPTION
    )


def web_search_tool(router: Router | None = None, **guard_options: Any) -> FunctionTool:
    """A `FunctionTool` named `web_search`, guarded and served by `router`'s whole chain.

    The same as [`tavily_search_tool`][searchfuse.integrations.openai_agents.tavily_search_tool],
    with the parameters every provider can honour: `query`, `max_results`,
    `topic` (`general` or `news`), `time_range`, `include_domains` and
    `exclude_domains`. The output is the result in Tavily's shape as JSON,
    whichever provider served it, or the refusal's message.
    """
    rules = _rules(WEB_SEARCH_NAME, router, guard_options)

    async def web_search(
        context: ToolContext[Any],
        query: Query,
        max_results: MaxResults = 5,
        topic: WebTopic = "general",
        time_range: TimeRange = None,
        include_domains: Domains = None,
        exclude_domains: Domains = None,
    ) -> str:
        params = {
            "max_results": max_results,
            "topic": topic,
            "time_range": time_range,
            "include_domains": include_domains,
            "exclude_domains": exclude_domains,
        }
        return await _reply(rules, context, WEB_SEARCH_NAME, query, params)

    return function_tool(
        web_search, name_override=WEB_SEARCH_NAME, description_override=WEB_SEARCH_DESCRIPTION
    )


def _rules(name: str, router: Router | None, guard_options: dict[str, Any]) -> Guard:
    if router is None:
        router = Router.from_env()
    guard_options.setdefault("min_interval", 0.0)
    return Guard(name=name, router=router, **guard_options)


async def _reply(
    rules: Guard, context: ToolContext[Any], tool: str, query: str, params: dict[str, Any]
) -> str:
    """The text for the model: one call in the turn of its model response, counted
    against its run's conversation."""
    turn_id = response_turn_id(context)
    scope = turn(id=turn_id) if turn_id is not None else contextlib.nullcontext()
    async with scope, conversation_scope(run_conversation(context)):
        text, _ = await answer(rules, query, tool=tool, **params)
    return text
