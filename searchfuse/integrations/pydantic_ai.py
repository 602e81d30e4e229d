"""Pydantic AI: guarded, routed `web_search` and `tavily_search` tools.

`pip install ".[pydantic-ai]"`, then:

```python
from pydantic_ai import Agent
from searchfuse.integrations.pydantic_ai import web_search_tool

agent = Agent("openai:gpt-5", tools=[web_search_tool()])
```

Every call passes one [`Guard`][searchfuse.Guard] (cache, fuse, turn budget)
and is served by a [`Router`][searchfuse.Router]. A turn is one model
response: Pydantic AI runs the tool calls of a response together (as
asyncio tasks), and they share the run's `run_id` and `run_step`, so with
`per_turn=1` one of them searches and the others are refused. A refusal is
the tool's return value, a text that tells the model what happened and
what to do; it never raises, so the run goes on. Pydantic AI's own
`UsageLimits(tool_calls_limit=...)` still counts every call, refused ones
included: it is a run-wide ceiling, the guard the per-response rule.
"""

from __future__ import annotations

import contextlib
from typing import Any

try:
    from pydantic_ai import RunContext, Tool
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'searchfuse.integrations.pydantic_ai needs Pydantic AI: pip install ".[pydantic-ai]"'
    ) from exc

from searchfuse._spend import conversation_scope
from searchfuse.guard import Guard, turn
from searchfuse.integrations._search_tools import (
    TAVILY_SEARCH_DESCRIPTION,
    TAVILY_SEARCH_NAME,
    WEB_SEARCH_DESCRIPTION,
    WEB_SEARCH_NAME,
    WebTopic,
    areply,
    call_of,
)
from searchfuse.integrations._tavily_tool import (
    Depth,
    Domains,
    MaxResults,
    Query,
    TimeRange,
    Topic,
)
from searchfuse.router import Router

__all__ = [
    "TAVILY_SEARCH_NAME",
    "WEB_SEARCH_NAME",
    "response_turn_id",
    "tavily_search_tool",
    "web_search_tool",
]


def response_turn_id(context: RunContext[Any]) -> str | None:
    """The turn id of the model response a tool call belongs to, or `None`.

    `run_id` names the run (a fresh one per `Agent.run`) and `run_step`
    counts its model requests, so the pair is the same for the parallel
    calls of one response and new for the next. `None` (a context without
    a run id) leaves the decision to the guard's burst rule.
    """
    if context.run_id is None:
        return None
    return f"pydantic-ai:{context.run_id}:{context.run_step}"


def _rules(name: str, router: Router | None, guard_options: dict[str, Any]) -> Guard:
    guard_options.setdefault("min_interval", 0.0)
    if router is None:
        router = Router.from_env()
    return Guard(name=name, router=router, **guard_options)


def run_conversation(context: RunContext[Any]) -> str | None:
    """The conversation budgets count a call against: its run (`None` without a run id)."""
    return None if context.run_id is None else f"pydantic-ai:{context.run_id}"


async def _answer(rules: Guard, context: RunContext[Any], query: str, **params: Any) -> str:
    turn_id = response_turn_id(context)
    scope = turn(id=turn_id) if turn_id is not None else contextlib.nullcontext()
    async with scope, conversation_scope(run_conversation(context)):
        return await areply(rules, call_of(rules.name, query, params))


def web_search_tool(router: Router | None = None, **guard_options: Any) -> Tool[Any]:
    """A Pydantic AI `Tool` named `web_search`, guarded and served by `router`.

    Args:
        router: the router that serves the searches; default
            [`Router.from_env`][searchfuse.Router.from_env].
        **guard_options: options of [`Guard`][searchfuse.Guard] (`per_turn`,
            `cache`, `cooldown`, `checklist`, `budget`, `fuse`...).
            `min_interval` (default 0) only matters outside a run: then
            overlapping calls, and calls starting within `min_interval`
            seconds of the previous one, are one turn.

    The parameters are the provider-neutral ones: `query`, `max_results`,
    `topic` (`general` or `news`), `time_range`, `include_domains` and
    `exclude_domains`. The return value is the result as JSON, in
    Tavily's shape (`query`, `answer`, `results` with `title`, `url`,
    `content`, `score`) without the router's accounting, or the refusal's
    message.
    """
    rules = _rules(WEB_SEARCH_NAME, router, guard_options)

    async def web_search(
        ctx: RunContext[Any],
        query: Query,
        max_results: MaxResults = 5,
        topic: WebTopic = "general",
        time_range: TimeRange = None,
        include_domains: Domains = None,
        exclude_domains: Domains = None,
    ) -> str:
        return await _answer(
            rules,
            ctx,
            query,
            max_results=max_results,
            topic=topic,
            time_range=time_range,
            include_domains=include_domains,
            exclude_domains=exclude_domains,
        )

    return Tool(
        web_search, takes_ctx=True, name=WEB_SEARCH_NAME, description=WEB_SEARCH_DESCRIPTION
    )


def tavily_search_tool(router: Router | None = None, **guard_options: Any) -> Tool[Any]:
    """A Pydantic AI `Tool` named `tavily_search`: the MCP server's Tavily-shaped contract.

    The same as [`web_search_tool`][searchfuse.integrations.pydantic_ai.web_search_tool],
    with Tavily's parameters: `query`, `max_results`, `search_depth`,
    `topic` (`general`, `news`, `finance`), `time_range`, `include_domains`
    and `exclude_domains`.
    """
    rules = _rules(TAVILY_SEARCH_NAME, router, guard_options)

    async def tavily_search(
        ctx: RunContext[Any],
        query: Query,
        max_results: MaxResults = 5,
        search_depth: Depth = "basic",
        topic: Topic = "general",
        time_range: TimeRange = None,
        include_domains: Domains = None,
        exclude_domains: Domains = None,
    ) -> str:
        return await _answer(
            rules,
            ctx,
            query,
            max_results=max_results,
            search_depth=search_depth,
            topic=topic,
            time_range=time_range,
            include_domains=include_domains,
            exclude_domains=exclude_domains,
        )

    return Tool(
        tavily_search,
        takes_ctx=True,
        name=TAVILY_SEARCH_NAME,
        description=TAVILY_SEARCH_DESCRIPTION,
    )
