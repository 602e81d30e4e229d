"""The `tavily_search` tool that the MCP server and the OpenAI Agents SDK expose.

One contract, two frameworks: the same name, description and parameters,
and the same way of turning a guarded, routed search into what the model
reads. Each framework writes the parameters into its own function
signature (both build the tool's schema from it) and calls `answer`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field

from searchfuse.errors import SearchFailed, SearchRefused
from searchfuse.guard import Call, Guard

__all__ = [
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "Depth",
    "Domains",
    "MaxResults",
    "Query",
    "TimeRange",
    "Topic",
    "answer",
]

TOOL_NAME = "tavily_search"
TOOL_DESCRIPTION = (
    "Search the web with Tavily. Returns the top results (title, URL, content, score) "
    "as JSON. Make one search per reply: combine what you need into one query. If the "
    "search is refused, the result says why and what to do instead; do not retry it."
)

Query = Annotated[str, Field(description="What to search for (at most 400 characters).")]
MaxResults = Annotated[int, Field(ge=0, le=20, description="How many results.")]
Depth = Literal["basic", "advanced", "fast", "ultra-fast"]
Topic = Literal["general", "news", "finance"]
TimeRange = Literal["day", "week", "month", "year"] | None
Domains = list[str] | None

#: What the model is not handed back: the router's accounting (key served, credits).
_NOT_FOR_THE_MODEL = ("searchfuse", "usage")


async def answer(rules: Guard, query: str, **params: Any) -> tuple[str, bool]:
    """Run one call through `rules`: the text for the model, and whether it is a refusal.

    `None` parameters are left out. A refusal or a failed search is its
    message (never an exception: either would end an agent's run).
    """
    call = Call(query, {k: v for k, v in params.items() if v is not None}, TOOL_NAME)
    try:
        result = await rules.arun(call)
    except SearchRefused as refusal:
        return refusal.message, True
    except SearchFailed as failure:
        return str(failure), True
    shown = {k: v for k, v in result.items() if k not in _NOT_FOR_THE_MODEL}
    return json.dumps(shown), False
