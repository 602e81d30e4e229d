"""The two search tools the Pydantic AI and smolagents integrations expose.

- `web_search`, provider-neutral: the parameters every search provider can
  honour (`query`, `max_results`, `topic` general or news, `time_range`,
  `include_domains`, `exclude_domains`), served by `router.search`, which
  serves them over the router's providers.
- `tavily_search`, Tavily-shaped: the MCP server's contract (the same
  parameters plus `search_depth` and the `finance` topic).

Both answer with text: the result in Tavily's shape as JSON, or, when the
search is refused or fails, the refusal's message for the model. An agent
framework ends its run on a raised exception, so neither ever raises.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Mapping
from typing import Any, Literal

from searchfuse._secrets import redact
from searchfuse.errors import SearchFailed, SearchRefused
from searchfuse.guard import Call, Guard

logger = logging.getLogger("searchfuse.integrations")

__all__ = [
    "TAVILY_SEARCH_DESCRIPTION",
    "TAVILY_SEARCH_NAME",
    "UNFORESEEN",
    "WEB_SEARCH_DESCRIPTION",
    "WEB_SEARCH_NAME",
    "WebTopic",
    "areply",
    "call_of",
    "reply",
    "unforeseen",
]

# The MCP server's contract, as `_tavily_tool` states it. Restated here because that
# module builds its parameters with pydantic, which smolagents does not install;
# the tests of both integrations check that the two stay equal.
TAVILY_SEARCH_NAME = "tavily_search"
TAVILY_SEARCH_DESCRIPTION = (
    "Search the web with Tavily. Returns the top results (title, URL, content, score) "
    "as JSON. Make one search per reply: combine what you need into one query. If the "
    "search is refused, the result says why and what to do instead; do not retry it."
)

WEB_SEARCH_NAME = "web_search"
WEB_SEARCH_DESCRIPTION = (
    "Search the web. Returns the top results (title, URL, content, score) as JSON. "
    "Make one search per reply: combine what you need into one query. If the search "
    "is refused, the result says why and what to do instead; do not retry it."
)

#: What the model is told when a search failed in a way no refusal or failure
#: foresaw (a bug, a broken proxy...): the error's name, never its text, which may
#: hold anything; the operator finds it whole, keys masked, in the log.
UNFORESEEN = (
    "Search failed: the search tool hit an unexpected error ({error}). Do not retry it; "
    "answer from what you already know, or tell the user that web search is not working."
)


def unforeseen(exc: Exception, *, tool: str, router: object = None) -> str:
    """Log `exc` (from `tool`, served by `router`) for the operator, keys masked, and
    return the text for the model.

    Call it from the `except` clause that caught `exc`: an agent framework ends
    its run on an exception (or hands its raw text to the model), so the tools
    searchfuse serves never raise one.
    """
    keys = [str(getattr(entry, "key", "")) for entry in getattr(router, "keys", ())]
    told = redact("".join(traceback.format_exception(exc)), keys)
    logger.error("%s: the search failed unexpectedly:\n%s", tool, told)
    return UNFORESEEN.format(error=type(exc).__name__)


#: The topics every provider can express (a news search, or any page).
WebTopic = Literal["general", "news"]

#: What the model is not handed back: the router's accounting (the key that
#: served, credits, budgets) and a provider's own JSON beside the common shape.
_NOT_FOR_THE_MODEL = ("searchfuse", "usage", "raw")


def call_of(tool: str, query: str, params: Mapping[str, Any]) -> Call:
    """The guard's view of one tool call; arguments left at `None` are left out."""
    return Call(query, {k: v for k, v in params.items() if v is not None}, tool)


def _text(result: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in result.items() if k not in _NOT_FOR_THE_MODEL})


def reply(rules: Guard, call: Call) -> str:
    """Run `call` through `rules` (served by the guard's router): the text for the model."""
    try:
        return _text(rules.run(call))
    except SearchRefused as refusal:
        return refusal.message
    except SearchFailed as failure:
        return str(failure)
    except Exception as exc:
        return unforeseen(exc, tool=rules.name, router=rules.router)


async def areply(rules: Guard, call: Call) -> str:
    """The same as [`reply`][searchfuse.integrations._search_tools.reply], on the event loop."""
    try:
        return _text(await rules.arun(call))
    except SearchRefused as refusal:
        return refusal.message
    except SearchFailed as failure:
        return str(failure)
    except Exception as exc:
        return unforeseen(exc, tool=rules.name, router=rules.router)
