"""How a reaction parks a key: exhausted, cooling for its seconds, or the router held.

Run inside the reaction's transaction by `Ledger.react`. An answer that may
not be a passing limit (Serper's 429: a rate limit, or credits run out; it
says nothing to tell them apart) is parked longer each time the pause before
it did not cure it: the key's last cooldown was for the same reason and has
run out, and the first request after it met the same answer. The park
doubles, up to the one-hour bound, until an answer that serves ends it; such
a park holds the key only, not the whole router, since the answer's other
meaning (Serper's credits run out) is a lasting failure of that key.

A key out of quota is flagged exhausted, or, when its provider says when the quota
comes back (Brave's month, on its own cycle), parked until then as "exhausted".
"""

from __future__ import annotations

from searchfuse._answers import MAX_PARK
from searchfuse.providers._base import Classified
from searchfuse.router.config import KeyEntry
from searchfuse.router.policy import Outcome, Park
from searchfuse.router.state import State
from searchfuse.router.state._records import KeyState

__all__ = ["exhaust", "park"]


def park(
    state: State,
    ks: KeyState,
    entry: KeyEntry,
    kind: Park,
    answer: Classified,
    now: float,
    seconds: float,
    hold: bool,
    retry_hold: float,
) -> float:
    """Park `ks` as the reaction to `answer` says (inside the reaction's transaction);
    returns the seconds parked (with `retry_hold`: the hold this call took, else 0.0)."""
    reason = str(answer.outcome)
    if kind is Park.EXHAUSTED:
        exhaust(ks, now, answer.until)
    elif seconds > 0:
        if answer.alternative is not None:  # it may not pass with a pause
            longer = _longer(ks, reason, now, seconds)
            # A pause did not cure it: this key is parked, not every search of the
            # router (another provider of a chain may serve meanwhile).
            hold = hold and longer <= seconds
            seconds = longer
        ks.park(now, seconds, reason)
        if hold:
            state.hold(entry.fingerprint, now + seconds)
        return seconds
    elif retry_hold > 0 and state.hold_left(now) <= 0:
        state.hold(entry.fingerprint, now + retry_hold)
        return retry_hold
    return 0.0


def exhaust(ks: KeyState, now: float, until: float | None) -> None:
    """Mark `ks` out of quota: until `until` when the provider says when its quota
    comes back (a park whose reason is "exhausted": it ends on the router's clock,
    whatever the calendar month), else until a probe shows headroom or the month rolls."""
    if until is None or until <= now:
        ks.exhausted = True
        return
    ks.exhausted = False
    ks.park(now, until - now, str(Outcome.EXHAUSTED))


def _longer(ks: KeyState, reason: str, now: float, seconds: float) -> float:
    """`seconds`, or twice the last park when that park, for the same reason, has run
    out without curing it (within `MAX_PARK`)."""
    until, started = ks.cooldown_until, ks.cooldown_started
    if ks.cooldown_reason != reason or until is None or started is None or until > now:
        return seconds
    return min(max(seconds, 2 * (until - started)), MAX_PARK)
