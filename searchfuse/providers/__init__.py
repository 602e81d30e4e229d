"""The search providers the router drives: one module each, behind one protocol.

A provider is an object the router drives, never a place it branches on a
name: it builds a request, reads an answer into an outcome of the reaction
table, normalises a result into Tavily's shape and says what a request cost.
Each provider's facts live in its module, once; this registry finds a
provider by its name in configuration (`"tavily"`, `"exa"`, `"brave"`,
`"serper"`, `"searxng"`).

Example:
    ```python
    from searchfuse.providers import lookup

    assert lookup("exa").title == "Exa"
    ```
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from searchfuse.providers._base import Provider
from searchfuse.providers.brave import BRAVE
from searchfuse.providers.exa import EXA
from searchfuse.providers.searxng import SEARXNG
from searchfuse.providers.serper import SERPER
from searchfuse.providers.tavily import TAVILY

__all__ = ["NAMES", "PROVIDERS", "Provider", "lookup"]

#: Every provider by name, in the default chain order.
PROVIDERS: Mapping[str, Provider] = MappingProxyType(
    {p.name: p for p in (TAVILY, EXA, BRAVE, SERPER, SEARXNG)}
)
#: The providers' names, in the default chain order.
NAMES: tuple[str, ...] = tuple(PROVIDERS)


def lookup(name: str) -> Provider:
    """The provider called `name`; a `KeyError` saying which names exist otherwise."""
    provider = PROVIDERS.get(name) if isinstance(name, str) else None
    if provider is None:
        raise KeyError(f"unknown provider {name!r}: use one of {', '.join(NAMES)}")
    return provider
