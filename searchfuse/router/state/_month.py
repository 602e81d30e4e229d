"""Billing months: which month an instant is in, and what of the state a new month keeps.

Tavily's quotas reset monthly (UTC). Every store rolls its state with these
functions, so the month's turn means the same on each.
"""

from __future__ import annotations

import calendar
import time

from searchfuse.router.state._records import KeyState, State
from searchfuse.router.state._values import _warn

__all__ = ["ROLLOVER_GRACE", "month_of", "rolled", "rolled_key", "rollover"]


def month_of(epoch: float) -> str:
    """`"2026-11"`: the billing month (UTC) an instant belongs to; Tavily resets monthly."""
    global _last_month
    start, end, month = _last_month
    if start <= epoch < end:
        return month
    t = time.gmtime(epoch)
    month = time.strftime("%Y-%m", t)
    # Every search asks (twice): the month's bounds answer the next asks.
    year, mon = t.tm_year, t.tm_mon
    start = calendar.timegm((year, mon, 1, 0, 0, 0, 0, 0, 0))
    end = calendar.timegm((year + mon // 12, mon % 12 + 1, 1, 0, 0, 0, 0, 0, 0))
    _last_month = (start, end, month)
    return month


#: The month `month_of` last named, with its first instant and the next month's.
_last_month: tuple[float, float, str] = (0.0, 0.0, "")


#: Shared state rolls into a new month only once this process's clock is this
#: far past the month's first instant: a clock running a few minutes ahead must
#: not reset counters that every process shares.
ROLLOVER_GRACE = 600.0


def rollover(stored: str, now: float) -> str | None:
    """The month that state stamped `stored` rolls into at `now`, or `None` to keep it.

    Never backwards for small skew: state stamped with the next month (written
    by a process whose clock ran a little ahead at the month's turn) is kept as
    it is, so processes with different clocks cannot reset each other's
    counters back and forth. A month further ahead is not believed: it rolls
    to this clock's month, with a warning.
    """
    if not stored:
        return month_of(now)
    target = month_of(now - ROLLOVER_GRACE)
    if target > stored:
        return target
    current = month_of(now)
    year, month = int(current[:4]), int(current[5:7])
    next_month = f"{year + month // 12:04d}-{month % 12 + 1:02d}"
    if stored > next_month:
        # More than a month ahead: a clock far in the future stamped it, not
        # the small skew at a month's turn. Believing it would stop every
        # process with a correct clock from ever starting a new month.
        _warn(
            f"the state's month {stored[:16]!r} is more than a month ahead of this "
            f"clock's {current}: a process with a wrong clock wrote it; starting {current}"
        )
        return current
    return None


def rolled_key(ks: KeyState, now: float) -> KeyState | None:
    """What of a key's record survives a new month: an active cooldown (with its
    error), nothing else. `None` when nothing survives."""
    if not ks.cooling(now):
        return None
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


def rolled(state: State, month: str, now: float) -> State:
    """`state` in a new month. Tavily's quotas roll over, so usage figures,
    counters and exhausted flags reset; a cooldown or a 429 hold still running
    is a fact about now, not about the month, and is kept (a hold written at
    23:59:50 on the last day still holds at 00:00:05). Pacing logs live on."""
    keys = {fp: kept for fp, ks in state.keys.items() if (kept := rolled_key(ks, now))}
    held = state.hold_until is not None and state.hold_until > now
    return State(
        month=month,
        keys=keys,
        hold_until=state.hold_until if held else None,
        hold_key=state.hold_key if held else None,
        rings=state.rings,
        tallies=state.tallies,
        events=state.events,
    )
