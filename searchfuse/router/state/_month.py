"""Billing months: which month an instant is in, and what of the state a new month keeps.

Tavily's quotas reset monthly (UTC). Every store rolls its state with these
functions, so the month's turn means the same on each.
"""

from __future__ import annotations

import calendar
import functools
import logging
import threading
import time
from collections.abc import Iterable
from typing import Protocol

from searchfuse.router.state._records import KeyState, State
from searchfuse.router.state._values import _warn

__all__ = [
    "ROLLOVER_GRACE",
    "ROLLOVER_SKEW",
    "MonthBook",
    "Months",
    "hold_kept",
    "month_bounds",
    "month_of",
    "next_month",
    "rolled",
    "rolled_key",
    "rollover",
    "start_month",
]

log = logging.getLogger("searchfuse.state")


def month_of(epoch: float) -> str:
    """`"2026-11"`: the billing month (UTC) an instant belongs to; Tavily resets monthly."""
    start, end, month = _last_month
    if start <= epoch < end:
        return month
    return month_bounds(epoch)[2]


def month_bounds(epoch: float) -> tuple[float, float, str]:
    """The billing month of `epoch`: its first instant, the next month's, and its name."""
    global _last_month
    bounds = _last_month
    if bounds[0] <= epoch < bounds[1]:
        return bounds
    t = time.gmtime(epoch)
    month = time.strftime("%Y-%m", t)
    # Every search asks (twice): the month's bounds answer the next asks.
    year, mon = t.tm_year, t.tm_mon
    start = calendar.timegm((year, mon, 1, 0, 0, 0, 0, 0, 0))
    end = calendar.timegm((year + mon // 12, mon % 12 + 1, 1, 0, 0, 0, 0, 0, 0))
    _last_month = bounds = (start, end, month)
    return bounds


#: The month `month_of` last named, with its first instant and the next month's.
_last_month: tuple[float, float, str] = (0.0, 0.0, "")


#: Shared state rolls into a new month only once this process's clock is this
#: far past the month's first instant: a clock running a few minutes ahead must
#: not reset counters that every process shares.
ROLLOVER_GRACE = 600.0


@functools.lru_cache(maxsize=64)  # asked twice on every search, of the same month
def next_month(month: str) -> str:
    """`"2026-12"` for `"2026-11"`: the month after `month` (YYYY-MM)."""
    year, mon = int(month[:4]), int(month[5:7])
    return f"{year + mon // 12:04d}-{mon % 12 + 1:02d}"


def rollover(stored: str, now: float) -> str | None:
    """The month that state stamped `stored` rolls into at `now`, or `None` to keep it.

    Forward only for small skew: state stamped with the next month (written
    by a process whose clock ran a little ahead at the month's turn) is kept as
    it is, so processes with different clocks cannot reset each other's
    counters back and forth. A month further ahead is not believed: it rolls
    to this clock's month, with a warning (see `Months` for how the clock that
    wrote it then stops rolling it forward again).
    """
    if not stored:
        return month_of(now)
    target = month_of(now - ROLLOVER_GRACE)
    if target > stored:
        return target
    current = month_of(now)
    if stored > next_month(current):
        # More than a month ahead: a clock far in the future stamped it, not
        # the small skew at a month's turn. Believing it would stop every
        # process with a correct clock from ever starting a new month.
        _warn(
            f"the state's month {stored[:16]!r} is more than a month ahead of this "
            f"clock's {current}: a process with a wrong clock wrote it; starting {current}"
        )
        return current
    return None


class Months:
    """One store handle's view of the month turns it has seen: `rollover` with memory.

    Two processes whose clocks are more than a month apart would otherwise
    reset each other at every search: the one ahead rolls the state forward
    to its month, the other does not believe that month and rolls it back
    (`rollover`), and so on. A handle that sees the stored month go back from
    one it saw more than a month later knows its own clock was not believed:
    from then on it does not jump forward to that month or later again, and
    counts into the month the others keep (said once). Whoever rolls the state
    forward one month at a time, as a month ends, is always believed.
    """

    __slots__ = ("_disputed", "_lock", "_seen", "_told")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: The latest month this handle saw stamped on the state.
        self._seen = ""
        #: Months from this one on were rolled back by another clock ("": none).
        self._disputed = ""
        self._told = False

    def rollover(self, stored: str, now: float) -> str | None:
        """The month the state stamped `stored` rolls into at `now` (see `rollover`),
        or `None` to keep it; never forward to a month the others rolled back."""
        with self._lock:
            if stored and self._seen > next_month(stored):
                # Rolled back from a month this handle saw: another clock did not believe it.
                self._dispute(self._seen)
            if self._disputed and stored >= self._disputed:
                self._disputed = ""  # reached one month at a time: believed again
            target = rollover(stored, now)
            if target is not None and stored and target < stored:
                self._dispute(stored)  # this handle rolls it back itself
            elif (
                target is not None
                and stored
                and self._disputed
                and target >= self._disputed
                and target > next_month(stored)
            ):
                self._tell(target, stored)
                target = None
            self._seen = target or stored
            return target

    def _dispute(self, month: str) -> None:
        self._disputed = min(self._disputed or month, month)

    def _tell(self, mine: str, kept: str) -> None:
        if self._told:
            return
        self._told = True
        log.warning(
            "router state: this clock's month %s is more than a month ahead of the month "
            "%s that other processes sharing the store keep (they rolled it back); counting "
            "into %s instead of resetting theirs: check this machine's clock",
            mine,
            kept,
            kept,
        )


#: What a new month keeps is decided on one process's clock, while every
#: process sharing the store reads it on its own: a cooldown or a hold that
#: ended up to this long ago on the rolling clock is kept, so a process whose
#: clock runs ahead (past `ROLLOVER_GRACE`) cannot end one that still runs for
#: the others. An ended one is simply over; keeping it costs nothing.
ROLLOVER_SKEW = 86400.0


def _lasts(until: float | None, now: float) -> bool:
    return until is not None and until > now - ROLLOVER_SKEW


def hold_kept(until: float | None, now: float) -> bool:
    """Whether a new month keeps a 429 hold until `until` (see `ROLLOVER_SKEW`)."""
    return _lasts(until, now)


def rolled_key(ks: KeyState, now: float) -> KeyState | None:
    """What of a key's record survives a new month: a cooldown that may still run
    on another process's clock (with its error), and a pause of its `/usage`
    calls; nothing else. `None` when nothing survives."""
    cooling = _lasts(ks.cooldown_until, now)
    if not cooling and not _lasts(ks.usage_blocked_until, now):
        return None
    if not cooling:
        return KeyState(account=ks.account, usage_blocked_until=ks.usage_blocked_until)
    return KeyState(
        account=ks.account,
        cooldown_until=ks.cooldown_until,
        cooldown_reason=ks.cooldown_reason,
        cooldown_started=ks.cooldown_started,
        last_error=ks.last_error,
        last_error_at=ks.last_error_at,
        last_status=ks.last_status,
        usage_blocked_until=ks.usage_blocked_until,
    )


class MonthBook(Protocol):
    """What a store gives the start of a month, inside one transaction: reads
    first, then writes (a store may queue the writes until it commits)."""

    def lasting(self, since: float) -> Iterable[tuple[str, KeyState]]:
        """The key records whose cooldown or `/usage` pause ends after `since`."""
        ...

    def stored_hold(self) -> tuple[float | None, str | None]:
        """The router-wide hold as stored: until when, and the key that set it."""
        ...

    def empty(self, month: str) -> None:
        """Forget every key and account record and the hold; the state is `month`'s."""
        ...

    def put_key(self, fp: str, ks: KeyState) -> None:
        """Keep `ks` as key `fp`'s record."""
        ...

    def put_hold(self, until: float, key: str | None) -> None:
        """Keep the router-wide hold until `until`, set by `key`."""
        ...


def start_month(book: MonthBook, month: str, now: float, *, keep: bool = True) -> None:
    """Start `month` in a store: usage figures, counters, exhausted flags and
    accounts go; a cooldown or a hold that may still run (see `ROLLOVER_SKEW`) is
    kept, `keep=False` (a cleared store) keeps nothing. Pacing logs, budget tallies,
    the event log and the shared cache are not the month's: no store touches them."""
    kept = [(fp, k) for fp, ks in book.lasting(now - ROLLOVER_SKEW) if (k := rolled_key(ks, now))]
    until, key = book.stored_hold()
    book.empty(month)
    if not keep:
        return
    for fp, ks in kept:
        book.put_key(fp, ks)
    if until is not None and hold_kept(until, now):
        book.put_hold(until, key)


class _NewState:
    """A `MonthBook` that makes the new month's `State` from an old one."""

    def __init__(self, old: State) -> None:
        self.old = old
        self.new = State(month=old.month)

    def lasting(self, since: float) -> Iterable[tuple[str, KeyState]]:
        return self.old.keys.items()

    def stored_hold(self) -> tuple[float | None, str | None]:
        return self.old.hold_until, self.old.hold_key

    def empty(self, month: str) -> None:
        old = self.old
        self.new = State(month=month, rings=old.rings, tallies=old.tallies, events=old.events)

    def put_key(self, fp: str, ks: KeyState) -> None:
        self.new.keys[fp] = ks

    def put_hold(self, until: float, key: str | None) -> None:
        self.new.hold_until, self.new.hold_key = until, key


def rolled(state: State, month: str, now: float, *, keep: bool = True) -> State:
    """`state` in a new month (see `start_month`): a hold written at 23:59:50 on the
    last day still holds at 00:00:05, also after a process whose clock runs ahead
    rolled the month."""
    book = _NewState(state)
    start_month(book, month, now, keep=keep)
    return book.new
