"""What every answer's headers say of its key, applied: the key's pace and its month.

Some providers put their figures on every answer, whatever it was (Brave's
`X-RateLimit-*`: the per-second limit and the month's quota). The provider
reads them (`observe`); this applies them after each answer: the pace the
key is granted at from now on, and the month's figures in the store, where a
remainder of 0 makes the key exhausted before any request is refused for it, until
the reset the provider gives (Brave's month is its own cycle, not the calendar's).
"""

from __future__ import annotations

from typing import Any

from searchfuse.providers._base import Figures, Rate
from searchfuse.router._core import Core
from searchfuse.router.config import KeyEntry

__all__ = ["observe"]


def observe(core: Core, entry: KeyEntry, result: Any) -> None:
    """Apply what `result`'s headers say of `entry` (an exception says nothing)."""
    if isinstance(result, BaseException) or not hasattr(result, "headers"):
        return
    seen = core.provider.observe(result, core.ledger.now())
    if seen is None:
        return
    if seen.rate is not None:
        core.ledger.rates[entry.fingerprint] = _pace(entry, core.ledger.rates, seen.rate)
    if seen.figures is not None or seen.exhausted_until is not None:
        core.ledger.record_figures(entry, seen.figures or Figures(), seen.exhausted_until)


def _pace(entry: KeyEntry, rates: Any, told: Rate) -> Rate:
    """The provider's own figure, unless the configuration asked for a slower pace."""
    if entry.rate is None and entry.rpm is None:
        return told
    configured: Rate = rates[entry.fingerprint]
    slower = configured.requests / configured.window <= told.requests / told.window
    return configured if slower else told
