"""The guard: the agent-facing rules in front of any web-search tool.

`guard` wraps a search callable in a [`Guard`][searchfuse.Guard] (the rules and their
state, public for integrations) enforces, in order: local lookups
first (`checklist`), a TTL cache, the fuse (a hard stop on the first 429
and refusal while the cooldown runs), and a per-turn search budget
(`turn`). See `guard` for the whole story.
"""

from typing import TYPE_CHECKING, Any

from searchfuse.guard.cache import normalize_query, search_key
from searchfuse.guard.calls import Call
from searchfuse.guard.checklist import FileLookup, Lookup, MappingLookup, Passage
from searchfuse.guard.core import Guard, GuardState, reset_all
from searchfuse.guard.decorator import Guarded, GuardOptions, OnRefusal, guard, guard_state
from searchfuse.guard.delegation import RouterLike
from searchfuse.guard.fuse import Fuse
from searchfuse.guard.near import near_key, near_query

if TYPE_CHECKING:
    from searchfuse._tools import TavilyTool, WebTool, tavily_tool, web_tool
    from searchfuse.guard._wrapper import GuardedFunction
from searchfuse.guard.turns import Turn, TurnBudget, current_turn_id, turn

__all__ = [
    "Call",
    "FileLookup",
    "Fuse",
    "Guard",
    "GuardOptions",
    "GuardState",
    "Guarded",
    "GuardedFunction",
    "Lookup",
    "MappingLookup",
    "OnRefusal",
    "Passage",
    "RouterLike",
    "TavilyTool",
    "Turn",
    "TurnBudget",
    "WebTool",
    "current_turn_id",
    "guard",
    "guard_state",
    "near_key",
    "near_query",
    "normalize_query",
    "reset_all",
    "search_key",
    "tavily_tool",
    "turn",
    "web_tool",
]


def __getattr__(name: str) -> Any:
    # The wrapt proxy class loads with wrapt, on first use (PEP 562).
    if name == "GuardedFunction":
        from searchfuse.guard._wrapper import GuardedFunction

        return GuardedFunction
    # The ready-made tool is built on the guard, not part of it (it knows
    # Tavily's parameters): it lives above the guard and loads on first use.
    if name in ("TavilyTool", "WebTool", "tavily_tool", "web_tool"):
        from searchfuse import _tools

        return getattr(_tools, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
