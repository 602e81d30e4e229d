"""searchfuse: keep AI agents from burning their web-search budget.

Two halves:

- [`guard`][searchfuse.guard] wraps any agent's `web_search` callable and enforces the
  agent-facing rules (one search per turn, local lookups first, a hard stop on
  the first 429, refusal during a cooldown, a TTL cache).
- [`Router`][searchfuse.Router] spreads searches over several API keys by real usage (Tavily's,
  and Exa, Brave, Serper or SearXNG behind them as a chain), keeps spend within budgets
  and explains itself when it cannot serve.
"""

from typing import TYPE_CHECKING, Any

from searchfuse._spend import Budget, spend_scope
from searchfuse.errors import (
    BadRequest,
    BudgetExhausted,
    ConfigError,
    CooldownActive,
    NoKeyAvailable,
    RateLimited,
    SearchFailed,
    SearchFuseError,
    SearchRefused,
    StoreUnavailable,
    Throttled,
    TurnLimitReached,
)
from searchfuse.guard import (
    FileLookup,
    Fuse,
    Guard,
    GuardState,
    MappingLookup,
    TurnBudget,
    guard,
    guard_state,
    turn,
)

if TYPE_CHECKING:
    from searchfuse.router import Router
    from searchfuse.router.diagnose import Diagnosis

__version__ = "0.1.0"

__all__ = [
    "BadRequest",
    "Budget",
    "BudgetExhausted",
    "ConfigError",
    "CooldownActive",
    "Diagnosis",
    "FileLookup",
    "Fuse",
    "Guard",
    "GuardState",
    "MappingLookup",
    "NoKeyAvailable",
    "RateLimited",
    "Router",
    "SearchFailed",
    "SearchFuseError",
    "SearchRefused",
    "StoreUnavailable",
    "Throttled",
    "TurnBudget",
    "TurnLimitReached",
    "__version__",
    "guard",
    "guard_state",
    "spend_scope",
    "turn",
]

# The router half (httpx, the Tavily client) loads on first use, so a program
# that only guards its own search function never pays for it (PEP 562).
_LAZY = {"Router": "searchfuse.router", "Diagnosis": "searchfuse.router.diagnose"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'searchfuse' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
