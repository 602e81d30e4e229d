"""LangChain v1: one import keeps a LangChain agent within its web-search budget.

`pip install ".[langchain]"`, then pick what fits the code:

- [`SearchFuseMiddleware`][searchfuse.integrations.langchain.SearchFuseMiddleware] for
  `langchain.agents.create_agent`. Each model reply is one turn: the whole batch of search calls
  in one AI message is decided at once (`per_turn` of them run, the rest are answered with an
  error tool message), and every call that runs passes the cache, the fuse
  and, if given, the router.
- `guard_tool` wraps any existing `BaseTool` for code that does not
  use `create_agent`: same name, description and argument schema, so the
  model sees the same tool; `invoke`, `ainvoke`, `batch` and `run`
  are all guarded.
- [`RoutedTavilySearch`][searchfuse.integrations.langchain.RoutedTavilySearch], a drop-in for
  `langchain_tavily.TavilySearch` (same name, arguments and result shape) whose searches go
  through a [`Router`][searchfuse.Router]: several keys, lazy usage sync, a hard stop on
  a 429; [`RoutedWebSearch`][searchfuse.integrations.langchain.RoutedWebSearch], the
  provider-neutral `web_search`, served over the router's whole chain.

Refusals always reach the model as a tool message with `status="error"`
carrying `message`, never as an exception:
LangGraph's `ToolNode` re-raises ordinary exceptions, which would end the
run. The rules are a [`Guard`][searchfuse.Guard]'s: one per middleware or
wrapped tool, shared by every tool it guards.
"""

from __future__ import annotations

try:
    import langchain.agents.middleware  # noqa: F401
    import langchain_core.tools  # noqa: F401
    import langgraph.prebuilt  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'searchfuse.integrations.langchain needs LangChain v1: pip install ".[langchain]"'
    ) from exc

from searchfuse.integrations.langchain.guard_tool import GuardedTool, guard_tool
from searchfuse.integrations.langchain.middleware import (
    DEFAULT_SEARCH_TOOLS,
    SearchFuseMiddleware,
    ToolSelection,
)
from searchfuse.integrations.langchain.tavily import (
    TAVILY_SEARCH_DESCRIPTION,
    RoutedTavilySearch,
    RoutedWebSearch,
    TavilySearchInput,
    WebSearchInput,
)

__all__ = [
    "DEFAULT_SEARCH_TOOLS",
    "TAVILY_SEARCH_DESCRIPTION",
    "GuardedTool",
    "RoutedTavilySearch",
    "RoutedWebSearch",
    "SearchFuseMiddleware",
    "TavilySearchInput",
    "ToolSelection",
    "WebSearchInput",
    "guard_tool",
]
