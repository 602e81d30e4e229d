"""Which key next: skip what cannot serve, then prefer the most remaining quota.

Pure functions over state snapshots, so the rules are easy to test and the
router, `status` and the diagnosis all agree on what "available" means.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from searchfuse._answers import Outcome
from searchfuse._format import duration
from searchfuse.providers._registry import lookup
from searchfuse.router.config import KeyEntry
from searchfuse.router.state import AccountUsage, Availability, KeyState, State

__all__ = [
    "MISCONFIGURED",
    "Candidate",
    "Ranking",
    "blocked_reason",
    "candidate",
    "candidates",
    "rank",
    "remaining",
    "score",
]


#: How a key parked for its instance's configuration starts its blocked reason.
MISCONFIGURED = "misconfigured"


@dataclass(frozen=True)
class Candidate:
    """A key with its state and its account's figures, as of one snapshot."""

    entry: KeyEntry
    state: KeyState
    account: AccountUsage


def candidate(entry: KeyEntry, state: State) -> Candidate:
    """One configured key with its records (empty records for an unknown key)."""
    ks = state.keys.get(entry.fingerprint) or KeyState(account=entry.account)
    if entry.disabled and not ks.disabled:
        # Disabled in the config: the snapshot says so, the store is not touched.
        ks = replace(ks, disabled=True)
    acc = state.accounts.get(entry.account_id) or AccountUsage()
    return Candidate(entry, ks, acc)


def candidates(entries: Iterable[KeyEntry], state: State) -> list[Candidate]:
    """Pair each configured key with its records (empty records for unknown keys)."""
    return [candidate(entry, state) for entry in entries]


def blocked_reason(c: Candidate, now: float) -> str | None:
    """Why this key cannot serve now, or `None` when it can.

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
    if availability is Availability.COOLING and ks.cooldown_reason == Outcome.MISCONFIGURED:
        # An instance that refused the search for its settings: not asked on every call.
        error = f"({ks.last_error}) " if ks.last_error else ""
        return f"{MISCONFIGURED} {error}asked again in {duration(ks.cooldown_left(now))}"
    if availability is Availability.COOLING:
        why = ks.cooldown_reason or "error"
        return f"cooling down for {math.ceil(ks.cooldown_left(now))} s ({why})"
    provider = lookup(c.entry.provider)
    if ks.cooling(now) and ks.cooldown_until is not None:  # until its provider's reset
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ks.cooldown_until))
        return (
            f"quota exhausted until {until} ({provider.title}'s reset, in "
            f"{duration(ks.cooldown_left(now))})"
        )
    if (ks.last_usage and ks.last_usage.key_limit == 0) or c.account.plan_limit == 0:
        return "a limit of 0: the key serves nothing until its limit is raised"
    probe = provider.probe()
    if probe is not None:
        return f"quota exhausted (waits for {probe.path} to show headroom or the month to roll)"
    return "quota exhausted (waits for the month to roll)"  # no free probe shows headroom


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


class Ranking:
    """The keys that can serve, best first, kept in order as the state changes.

    `rank` sorts every key on every call; with a thousand keys that is
    most of a search's cost. A `Ranking` re-scores only the keys whose
    records (or whose account's records) changed, keeps the usable ones in a
    sorted list, and checks cooldowns against the clock when asked. Its order
    is `rank`'s order.

    Re-scoring is lazy: changed keys are re-placed when an order is next
    asked for (`best`). A burst that stays on one key asks only whether that
    key can still serve (`usable`), which looks at that key alone.
    """

    def __init__(self, entries: Sequence[KeyEntry]) -> None:
        self.entries = {e.fingerprint: e for e in entries}
        self.position = {e.fingerprint: i for i, e in enumerate(entries)}
        self.by_account: dict[str, list[str]] = {}
        for e in entries:
            self.by_account.setdefault(e.account_id, []).append(e.fingerprint)
        self.state: State | None = None
        self.cands: dict[str, Candidate] = {}
        self.order: list[tuple[tuple[float, float, float, int], str]] = []
        self.scores: dict[str, tuple[float, float, float, int]] = {}
        #: Keys whose records changed since they were last placed.
        self.dirty: set[str] = set()

    def update(self, state: State, keys: Iterable[str] | None, accounts: Iterable[str]) -> None:
        """Bring the order up to date with `state`; `keys=None`: everything changed."""
        if keys is None or self.state is None:
            self._rebuild(state)
            return
        self.state = state
        self.dirty.update(fp for fp in keys if fp in self.entries)
        for account in accounts:
            self.dirty.update(self.by_account.get(account, ()))

    def _rebuild(self, state: State) -> None:
        """Every key scored afresh and sorted once (placing them one by one moved
        the whole list each time: quadratic in the number of keys)."""
        self.state = state
        self.cands, self.scores, self.dirty = {}, {}, set()
        for fp in self.entries:
            self._score(fp, state)
        self.order = sorted((new, fp) for fp, new in self.scores.items())

    def _flush(self) -> None:
        state = self.state
        if self.dirty and state is not None:
            if len(self.dirty) > len(self.entries) // 8:
                self._rebuild(state)  # most keys changed: one sort beats many placements
                return
            for fp in self.dirty:
                self._place(fp, state)
            self.dirty = set()

    def _score(self, fp: str, state: State) -> tuple[float, float, float, int] | None:
        """`fp`'s candidate, kept, and its score (`None`: it cannot serve at all)."""
        c = self.cands[fp] = candidate(self.entries[fp], state)
        ks = c.state
        if ks.disabled or ks.exhausted:
            return None
        # A cooling key stays in the order: best() checks the clock.
        new = self.scores[fp] = score(c, self.position[fp])
        return new

    def _place(self, fp: str, state: State) -> None:
        old = self.scores.pop(fp, None)
        if old is not None:
            i = bisect.bisect_left(self.order, (old, fp))
            if i < len(self.order) and self.order[i] == (old, fp):
                del self.order[i]
        new = self._score(fp, state)
        if new is not None:
            bisect.insort(self.order, (new, fp))

    def best(self, now: float, exclude: Iterable[str] = ()) -> list[Candidate]:
        """The usable keys at `now`, best first (lazily: stops at the first usable one
        unless `exclude` asks for more)."""
        self._flush()
        skip = set(exclude)
        out = []
        for _, fp in self.order:
            if fp in skip:
                continue
            c = self.cands[fp]
            if blocked_reason(c, now) is None:
                out.append(c)
                break
        return out

    def usable(self, fp: str, now: float) -> Candidate | None:
        """`fp`'s candidate if it can serve at `now`."""
        if fp in self.dirty and self.state is not None and fp in self.entries:
            c: Candidate | None = candidate(self.entries[fp], self.state)
        else:
            c = self.cands.get(fp)
        return c if c is not None and blocked_reason(c, now) is None else None
