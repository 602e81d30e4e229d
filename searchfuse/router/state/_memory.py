"""State kept in this process only."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from searchfuse.router.state._base import Changes, Store, TxState, logged
from searchfuse.router.state._budgets import Tally, live_tallies
from searchfuse.router.state._events import Event, event_from_fields, newest
from searchfuse.router.state._eviction import evicted
from searchfuse.router.state._month import Months, month_of, rolled
from searchfuse.router.state._records import State, copied

__all__ = ["MemoryStore"]

T = TypeVar("T")


class MemoryStore(Store):
    """State in this process only: threads and tasks share it, nothing is written."""

    #: Its lock is held for dict operations only: safe to use on an event loop.
    blocking = False

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._state = State(month="")
        self._seq = 0
        #: Revision of each record ("k:<fp>", "a:<account>") for `changes`.
        self._revs: dict[str, int] = {}
        self._epoch = 0
        self._cache: dict[str, tuple[str, float]] = {}
        self._months = Months()
        self._claims: dict[str, tuple[str, float]] = {}

    def __repr__(self) -> str:
        return "MemoryStore()"

    def _current(self, now: float) -> State:
        month = self._months.rollover(self._state.month, now)
        if month is not None:
            # Usage resets; running cooldowns, the hold and pacing logs live on.
            self._state = rolled(self._state, month, now)
            self._revs.clear()
            self._epoch += 1
            # What survived (running cooldowns) is part of the new month's state.
            self._revs.update((f"k:{fp}", self._seq) for fp in self._state.keys)
        return self._state

    def read(self, now: float) -> State:
        with self._lock:
            state = self._current(now)
            return State(
                month=state.month,
                keys={fp: copied(ks) for fp, ks in state.keys.items()},
                accounts={n: copied(a) for n, a in state.accounts.items()},
                hold_until=state.hold_until,
                hold_key=state.hold_key,
                events=state.events,  # never changed in place
            )

    def update(self, now: float, change: Callable[[State], T]) -> T:
        with self._lock:
            state = self._current(now)
            tx = TxState.over(state)
            try:
                result = change(tx)
            except BaseException:
                tx.roll_back()  # all or nothing, as every store
                raise
            state.hold_until, state.hold_key = tx.hold_until, tx.hold_key
            made = tx.made_events(now)
            if made:
                state.events = logged(state.events, made)
            touched = [f"k:{fp}" for fp in tx.changed_keys()]
            touched += [f"a:{name}" for name in tx.changed_accounts()]
            if touched or tx.hold_changed():
                self._seq += 1
                for name in touched:
                    self._revs[name] = self._seq
            return result

    def changes(self, now: float, since: Any) -> Changes:
        with self._lock:
            state = self._current(now)
            token = (self._epoch, self._seq)
            complete = not (isinstance(since, tuple) and since[0] == self._epoch)
            if not complete and since[1] == self._seq:
                return Changes(token, False, state.month, state.hold_until, state.hold_key)
            after = -1 if complete else since[1]
            keys, accounts = {}, {}
            for name, rev in self._revs.items():
                if rev > after:
                    if name[0] == "k":
                        keys[name[2:]] = copied(state.keys[name[2:]])
                    else:
                        accounts[name[2:]] = copied(state.accounts[name[2:]])
            return Changes(
                token, complete, state.month, state.hold_until, state.hold_key, keys, accounts
            )

    def clear(self, now: float) -> None:
        with self._lock:
            # Budgets count money spent, which forgetting key state does not give back.
            # Nor does it undo what happened: the event log stays (see `start_month`).
            self._state = rolled(self._state, month_of(now), now, keep=False)
            self._revs.clear()
            self._epoch += 1

    def tallies(self, now: float, prefix: str = "") -> dict[str, Tally]:
        with self._lock:
            return live_tallies(self._state.tallies, now, prefix)

    def events(self, limit: int = 50) -> list[Event]:
        with self._lock:
            stored = self._state.events[-limit:] if limit > 0 else []
        return newest((e for raw in stored if (e := event_from_fields(raw))), limit)

    def pacing_log(self, name: str) -> list[float] | None:
        with self._lock:
            ring = self._state.rings.get(name)
            return [] if ring is None else ring.ordered()

    # -- the shared cache (shared by this process's guards only) ---------------------------

    def cache_get(self, key: str, now: float) -> str | None:
        with self._lock:
            hit = self._cache.get(key)
            if hit is None:
                return None
            if hit[1] <= now:
                del self._cache[key]
                return None
            return hit[0]

    def cache_set(
        self, key: str, value: str, expires_at: float, maxsize: int, *, now: float | None = None
    ) -> None:
        with self._lock:
            self._cache.pop(key, None)
            for gone in evicted({k: e for k, (_, e) in self._cache.items()}, maxsize):
                del self._cache[gone]
            self._cache[key] = (value, expires_at)

    def cache_delete(self, key: str) -> None:
        with self._lock:
            self._cache.pop(key, None)

    def cache_keys(self, now: float) -> list[str]:
        with self._lock:
            return [k for k, (_, exp) in self._cache.items() if exp > now]

    def cache_claim(self, key: str, owner: str, until: float) -> bool:
        with self._lock:
            held = self._claims.get(key)
            if held is None or held[0] == owner or held[1] <= time.time():
                self._claims[key] = (owner, until)
                return True
            return False

    def cache_release(self, key: str, owner: str) -> None:
        with self._lock:
            if self._claims.get(key, ("",))[0] == owner:
                del self._claims[key]

    def close(self) -> None:
        return None
