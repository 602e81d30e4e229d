"""The `tavily_search` and `web_search` tools that the MCP server and the OpenAI Agents
SDK expose.

One contract, two frameworks: the same names, descriptions and parameters,
and the same way of turning a guarded, routed search into what the model
reads. Each framework writes the parameters into its own function
signature (both build the tool's schema from it) and calls `answer`.
`web_search` takes what every provider can honour (no `search_depth`, the
topics `general` and `news`) and is served over the router's whole chain.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError, WithJsonSchema

from searchfuse.errors import BadRequest, SearchFailed, SearchRefused
from searchfuse.guard import Call, Guard
from searchfuse.integrations._search_tools import (
    WEB_SEARCH_DESCRIPTION,
    WEB_SEARCH_NAME,
    unforeseen,
)

__all__ = [
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "WEB_PARAMETERS",
    "WEB_SEARCH_DESCRIPTION",
    "WEB_SEARCH_NAME",
    "Depth",
    "Domains",
    "MaxResults",
    "Query",
    "TimeRange",
    "Topic",
    "WebTopic",
    "answer",
    "check_arguments",
    "checked_here",
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
WebTopic = Literal["general", "news"]
TimeRange = Literal["day", "week", "month", "year"] | None
Domains = list[str] | None

#: Each parameter's declared type, to check a call's arguments against.
PARAMETERS: dict[str, Any] = {
    "query": Query,
    "max_results": MaxResults,
    "search_depth": Depth,
    "topic": Topic,
    "time_range": TimeRange,
    "include_domains": Domains,
    "exclude_domains": Domains,
}
#: `web_search`'s parameters: Tavily's, less what only Tavily honours.
WEB_PARAMETERS: dict[str, Any] = {
    **{k: v for k, v in PARAMETERS.items() if k != "search_depth"},
    "topic": WebTopic,
}
_ADAPTERS = {name: TypeAdapter(kind) for name, kind in PARAMETERS.items()}
_WEB_ADAPTERS = {**_ADAPTERS, "topic": TypeAdapter(WebTopic)}


def checked_here(name: str, web: bool = False) -> Any:
    """Parameter `name`'s type as the schema shows it, checked by `check_arguments`
    instead of the framework: a framework's own check answers the model with
    validation internals ("1 validation error for tavily_searchArguments ...").
    `web`: `web_search`'s parameter of that name."""
    adapter = (_WEB_ADAPTERS if web else _ADAPTERS)[name]
    return Annotated[Any, WithJsonSchema(adapter.json_schema())]


def check_arguments(arguments: dict[str, Any], web: bool = False) -> dict[str, Any] | str:
    """`arguments` as their parameters take them ("5" as 5, as the framework's own
    check would), or what the model is told for the first one that does not fit:
    the "not sent" text of a `BadRequest`, as for an empty query. `web`: the
    arguments of `web_search`."""
    adapters = _WEB_ADAPTERS if web else _ADAPTERS
    checked: dict[str, Any] = {}
    for name, value in arguments.items():
        try:
            checked[name] = adapters[name].validate_python(value)
        except ValidationError as exc:
            why = str(exc.errors()[0]["msg"])
            why = why.replace("Input should", "it should").replace("Value error, ", "")
            shown = repr(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            return str(BadRequest(f"{name} is {shown}: {why}", sent=False))
    return checked


if TYPE_CHECKING:
    QueryArgument = Query
    MaxResultsArgument = MaxResults
    DepthArgument = Depth
    TopicArgument = Topic
    WebTopicArgument = WebTopic
    TimeRangeArgument = TimeRange
    DomainsArgument = Domains
else:
    QueryArgument = checked_here("query")
    MaxResultsArgument = checked_here("max_results")
    DepthArgument = checked_here("search_depth")
    TopicArgument = checked_here("topic")
    WebTopicArgument = checked_here("topic", web=True)
    TimeRangeArgument = checked_here("time_range")
    DomainsArgument = checked_here("include_domains")


#: What the model is not handed back: the router's accounting (key served, credits) and
#: a provider's own JSON beside the common shape.
_NOT_FOR_THE_MODEL = ("searchfuse", "usage", "raw")


async def answer(
    rules: Guard, query: str, *, tool: str = TOOL_NAME, **params: Any
) -> tuple[str, bool]:
    """Run one call of `tool` through `rules`: the text for the model, and whether it is
    a refusal.

    `None` parameters are left out. A refusal or a failed search is its
    message (never an exception: either would end an agent's run).
    """
    call = Call(query, {k: v for k, v in params.items() if v is not None}, tool)
    try:
        result = await rules.arun(call)
    except SearchRefused as refusal:
        return refusal.message, True
    except SearchFailed as failure:
        return str(failure), True
    except Exception as exc:
        return unforeseen(exc, tool=rules.name, router=rules.router), True
    shown = {k: v for k, v in result.items() if k not in _NOT_FOR_THE_MODEL}
    return json.dumps(shown), False
