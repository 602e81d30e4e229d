"""searchfuse: keep AI agents from burning their web-search budget.

Two halves:

- :func:`guard` wraps any agent's ``web_search`` callable and enforces the
  agent-facing rules (one search per turn, local lookups first, a hard stop on
  the first 429, refusal during a cooldown, a TTL cache).
- :class:`Router` spreads Tavily searches over several API keys by real usage
  and explains itself when it cannot serve.
"""

from searchfuse.errors import (
    BadRequest,
    ConfigError,
    CooldownActive,
    NoKeyAvailable,
    RateLimited,
    SearchFailed,
    SearchFuseError,
    SearchRefused,
    TurnLimitReached,
)
from searchfuse.guard import (
    FileLookup,
    Fuse,
    GuardState,
    MappingLookup,
    TurnBudget,
    guard,
    guard_state,
    turn,
)
from searchfuse.router import Router
from searchfuse.router.diagnose import Diagnosis

__version__ = "0.1.0"

__all__ = [
    "BadRequest",
    "ConfigError",
    "CooldownActive",
    "Diagnosis",
    "FileLookup",
    "Fuse",
    "GuardState",
    "MappingLookup",
    "NoKeyAvailable",
    "RateLimited",
    "Router",
    "SearchFailed",
    "SearchFuseError",
    "SearchRefused",
    "TurnBudget",
    "TurnLimitReached",
    "__version__",
    "guard",
    "guard_state",
    "turn",
]
