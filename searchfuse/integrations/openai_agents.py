"""OpenAI Agents SDK: a guarded, routed `tavily_search` tool.

`pip install ".[openai-agents]"`, then:

```python
from agents import Agent
from searchfuse.integrations.openai_agents import tavily_search_tool

agent = Agent(name="researcher", tools=[tavily_search_tool()])
```

Every call passes one [`Guard`][searchfuse.Guard] (cache, fuse, turn budget)
and is served by a [`Router`][searchfuse.Router] over all keys. A turn is one
model response: the SDK runs the parallel tool calls of a response together,
so with `per_turn=1` one of them searches and the others are refused. A
refusal is the tool's output, a text that tells the model what happened and
what to do; it never raises, so it never ends the run.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

try:
    from agents import FunctionTool, function_tool
    from agents.tool_context import ToolContext
    from agents.usage import Usage
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "searchfuse.integrations.openai_agents needs the OpenAI Agents SDK: "
        'pip install ".[openai-agents]"'
    ) from exc

from searchfuse.guard import Guard, turn
from searchfuse.integrations._tavily_tool import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    Depth,
    Domains,
    MaxResults,
    Query,
    TimeRange,
    Topic,
    answer,
)
from searchfuse.router import Router

__all__ = ["TOOL_DESCRIPTION", "TOOL_NAME", "tavily_search_tool"]


class _Responses:
    """Which model response a tool call belongs to.

    The SDK adds each model response's usage to the run's one `Usage`
    object before it runs that response's tool calls, and every model it
    ships counts a response as one request. So (the run, `usage.requests`)
    names the response: the same for the parallel calls of one response,
    new for the next. A model that reports no usage leaves `requests` at
    0; then the guard's burst rule decides (calls that overlap are one turn).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # id(usage) -> (a weak reference proving it is still that object, the run's number)
        self._runs: dict[int, tuple[weakref.ref[Usage], int]] = {}
        self._numbers = itertools.count(1)

    def turn_id(self, context: ToolContext[Any]) -> str | None:
        usage = context.usage
        requests = getattr(usage, "requests", 0)
        if not isinstance(requests, int) or requests <= 0:
            return None
        with self._lock:
            known = self._runs.get(id(usage))
            if known is None or known[0]() is not usage:
                self._runs = {k: v for k, v in self._runs.items() if v[0]() is not None}
                known = (weakref.ref(usage), next(self._numbers))
                self._runs[id(usage)] = known
        return f"openai-agents-run-{known[1]}-response-{requests}"


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
    if router is None:
        router = Router.from_env()
    guard_options.setdefault("min_interval", 0.0)
    rules = Guard(name=TOOL_NAME, router=router, **guard_options)
    responses = _Responses()

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
        turn_id = responses.turn_id(context)
        if turn_id is None:
            text, _ = await answer(rules, query, **params)
        else:
            async with turn(id=turn_id):
                text, _ = await answer(rules, query, **params)
        return text

    return function_tool(
        tavily_search, name_override=TOOL_NAME, description_override=TOOL_DESCRIPTION
    )
