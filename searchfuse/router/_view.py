"""The router's view of its store, and the choice of the next key from it.

Pure bookkeeping over states the ledger has read: merging what changed into
the view (the view is never modified in place: a change makes a new one, so
readers in other threads always see a whole state), keeping the ranking of
keys up to date, and keeping a burst on one key.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from searchfuse.router._options import STICKY_WINDOW
from searchfuse.router.config import KeyEntry
from searchfuse.router.selection import Ranking
from searchfuse.router.state import Changes, State

__all__ = ["Chooser", "Pick"]


@dataclass(frozen=True)
class Pick:
    """The key to use next, with the state it was chosen from.

    `entry` is `None` when no key can serve; `held` is the router-wide hold
    (seconds left, masked key that set it) when one runs: then nothing is picked.
    """

    entry: KeyEntry | None
    state: State
    now: float
    held: tuple[float, str | None] | None = None


class Chooser:
    """Which key next, from the view: the burst's key while it lasts, else the best."""

    def __init__(self, keys: Sequence[KeyEntry]) -> None:
        self.ranking = Ranking(keys)
        #: The key the current burst stays on, and when it was last picked.
        self.sticky: tuple[str, float] | None = None
        self._lock = threading.Lock()

    def merge(self, old: State | None, changes: Changes) -> State:
        """`old` with `changes` applied, the ranking brought up to date with it."""
        if changes.complete or old is None or old.month != changes.month:
            state = changes.as_state()
            self.ranking.update(state, None, ())
            return state
        if not (
            changes.keys
            or changes.accounts
            or (changes.hold_until, changes.hold_key) != (old.hold_until, old.hold_key)
        ):
            return old
        state = State(
            month=changes.month,
            keys={**old.keys, **changes.keys} if changes.keys else old.keys,
            accounts={**old.accounts, **changes.accounts} if changes.accounts else old.accounts,
            hold_until=changes.hold_until,
            hold_key=changes.hold_key,
        )
        self.ranking.update(state, changes.keys, changes.accounts)
        return state

    def choose(self, now: float, tried: Collection[str]) -> KeyEntry | None:
        """The key to use at `now`, none of `tried` (`None`: no key can serve)."""
        with self._lock:
            # Searches that come in a burst stay on one key: if the burst draws a
            # 429, only that key is touched (incident 1). Across bursts the most
            # remaining quota wins again.
            choice = None
            ranking = self.ranking
            if self.sticky is not None and now - self.sticky[1] < STICKY_WINDOW:
                fp = self.sticky[0]
                if fp not in tried and ranking.usable(fp, now) is not None:
                    choice = ranking.entries[fp]
            if choice is None:
                ranked = ranking.best(now, exclude=tried)
                if not ranked:
                    return None
                choice = ranked[0].entry
            self.sticky = (choice.fingerprint, now)
        return choice
