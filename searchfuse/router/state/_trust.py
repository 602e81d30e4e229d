"""How far a pacing log read from a store is believed.

A store is shared by processes whose clocks differ, and by people who edit
it. Two stored things in a pacing log can claim what cannot be true:

- a slot time later than `now` (one process's clock a day ahead, an NTP step
  back, a hand-edited row): believed, it would pace the key for as long as the
  skew, far past what its rate allows. Such a time is read as `now`, and every
  backend rewrites the log's future times to `now`, so the key waits at most
  one window, once;
  A time at most `RACE` seconds ahead is believed as it is: processes of one
  host stamp their grants a moment apart, and the one that read its clock
  first may find the other's slot already written;
- a log size far larger than any rate (`200000000`): a resize never builds
  a list of that size; it keeps the newest `size` times that are really stored.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Iterable

from searchfuse.router.state._ring import Ring

__all__ = ["RACE", "clamp_slots", "future_slot", "newest_ring"]

log = logging.getLogger("searchfuse.state")

_TOLD: set[str] = set()

#: Seconds a stored slot time may be later than `now` and still be believed: two
#: processes' grants a moment apart (a clock ahead by more is not believed).
RACE = 1.0


def _tell(name: str, what: str) -> None:
    # Once per log and process: a fleet with a skewed clock would say it on every search.
    if name in _TOLD:
        return
    if len(_TOLD) < 1000:
        _TOLD.add(name)
    log.warning("router state: pacing log %s %s", name, what)


def future_slot(name: str, t: float | None, now: float) -> bool:
    """Whether slot time `t` of log `name` is later than `now` by more than `RACE`
    (said once per log)."""
    if t is None or t <= now + RACE:
        return False
    _tell(
        name,
        f"holds a time {t - now:.0f} s after this clock's now (a clock ahead, a clock "
        "stepped back, or an edited store); read as now, so the key waits one window at most",
    )
    return True


def clamp_slots(ring: Ring, name: str, now: float) -> bool:
    """Rewrite every time in `ring` later than `now` to `now`; True if one was.

    Each slot is looked at once per ring, not on every event: after a look,
    `ring.high` bounds every time written since.
    """
    high = ring.high
    if high is not None and high <= now:
        return False
    changed = False
    for i, t in enumerate(ring.slots):
        if t is not None and t > now:
            if not changed:
                future_slot(name, t, now)
            ring.own_slots()[i] = now
            changed = True
    ring.high = max((t for t in ring.slots if t is not None), default=now)
    return changed


def newest_ring(name: str, times: Iterable[float | None], size: int, now: float) -> Ring:
    """A ring of `size` slots holding the newest `size` of the stored `times`
    (each no later than `now`), oldest first.

    Works on the times actually stored, never on a stored size: a log whose
    size reads 200 million costs what its few real slots cost.
    """
    ring = Ring(size)
    if size <= 0:
        return ring
    kept: list[float] = []
    for t in times:
        if t is None or not math.isfinite(t):
            continue
        if future_slot(name, t, now):
            t = now
        kept.append(t)
    for t in sorted(heapq.nlargest(size, kept)):
        ring.set(ring.seq % size, t)
        ring.seq += 1
    return ring
