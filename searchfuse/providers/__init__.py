"""The search providers the router drives: one module each, behind one protocol.

A provider is an object the router drives, never a place it branches on a
name: it builds a request, reads an answer into an outcome of the reaction
table, normalises a result into Tavily's shape and says what a request cost.
Each provider's facts live in its module, once; [`lookup`][searchfuse.providers.lookup]
finds a provider by its name in configuration (`"tavily"`, `"exa"`,
`"brave"`, `"serper"`, `"searxng"`), loading its module on first use.

Example:
    ```python
    from searchfuse.providers import NAMES, lookup

    assert lookup("exa").title == "Exa"
    assert NAMES[0] == "tavily"
    ```
"""

from __future__ import annotations

from searchfuse.providers._base import Provider
from searchfuse.providers._registry import NAMES, UnknownProvider, lookup

__all__ = ["NAMES", "Provider", "UnknownProvider", "lookup"]
