"""Which key next: skip what cannot serve, then prefer the most remaining quota.

Pure functions over state snapshots, so the rules are easy to test and the
router, ``status`` and the diagnosis all agree on what "available" means.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from searchfuse.router.config import KeyEntry
from searchfuse.router.state import AccountUsage, Availability, KeyState, State

__all__ = ["Candidate", "blocked_reason", "candidates", "rank", "remaining", "score"]


@dataclass(frozen=True)
class Candidate:
    """A key with its state and its account's figures, as of one snapshot."""

    entry: KeyEntry
    state: KeyState
    account: AccountUsage


def candidates(entries: Iterable[KeyEntry], state: State) -> list[Candidate]:
    """Pair each configured key with its records (empty records for unknown keys)."""
    out = []
    for entry in entries:
        ks = state.keys.get(entry.fingerprint) or KeyState(account=entry.account)
        if entry.disabled and not ks.disabled:
            # Disabled in the config: the snapshot says so, the store is not touched.
            ks = replace(ks, disabled=True)
        acc = state.accounts.get(entry.account_id) or AccountUsage()
        out.append(Candidate(entry, ks, acc))
    return out


def blocked_reason(c: Candidate, now: float) -> str | None:
    """Why this key cannot serve now, or ``None`` when it can.

    An expired cooldown is not a reason: state is a cache, and a cooldown
    that has passed simply means the key is available (incident 2).
    """
    ks = c.state
    availability = ks.availability(now)
    if availability is Availability.AVAILABLE:
        return None
    if availability is Availability.DISABLED:
        if c.entry.disabled:
            return "disabled in config"
        return "disabled in the state (a leftover; `searchfuse test-keys` clears it)"
    if availability is Availability.COOLING:
        why = ks.cooldown_reason or "error"
        return f"cooling down for {math.ceil(ks.cooldown_left(now))} s ({why})"
    return "quota exhausted (waits for /usage to show headroom or the month to roll)"


def remaining(c: Candidate) -> float:
    """Credits this key can still spend: the lesser of its own limit and its account's plan.

    Keys of one account share the plan, so the account's local spending counts
    against every one of them. Unknown figures count as unlimited.
    """
    return min(c.state.left(), c.account.left())


def rank(cands: Sequence[Candidate], now: float, exclude: Iterable[str] = ()) -> list[Candidate]:
    """The keys that can serve now, best first.

    Order: most remaining quota, then the lowest search usage, then the least
    recently used (never used comes first), then configuration order.
    """
    skip = set(exclude)
    usable = [
        (i, c)
        for i, c in enumerate(cands)
        if c.entry.fingerprint not in skip and blocked_reason(c, now) is None
    ]
    usable.sort(key=lambda ic: score(ic[1], ic[0]))
    return [c for _, c in usable]


def score(c: Candidate, index: int) -> tuple[float, float, float, int]:
    """The sort key of a key that can serve: lower is better."""
    last = c.state.last_used_at
    return (-remaining(c), c.state.search_usage(), last if last is not None else -math.inf, index)
