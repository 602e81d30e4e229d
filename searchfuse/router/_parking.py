"""How a reaction parks a key: exhausted, cooling for its seconds, or the router held.

Run inside the reaction's transaction by `Ledger.react`.
"""

from __future__ import annotations

from searchfuse.router.config import KeyEntry
from searchfuse.router.policy import Park
from searchfuse.router.state import State
from searchfuse.router.state._records import KeyState

__all__ = ["park"]


def park(
    state: State,
    ks: KeyState,
    entry: KeyEntry,
    kind: Park,
    reason: str,
    now: float,
    seconds: float,
    hold: bool,
    retry_hold: float,
) -> float:
    """Park `ks` as the reaction says (inside the reaction's transaction)."""
    if kind is Park.EXHAUSTED:
        ks.exhausted = True
    elif seconds > 0:
        ks.park(now, seconds, reason)
        if hold:
            state.hold(entry.fingerprint, now + seconds)
    elif retry_hold > 0 and state.hold_left(now) <= 0:
        state.hold(entry.fingerprint, now + retry_hold)
        return retry_hold
    return 0.0
