"""The pacing decision over a log, written once for every store.

A pacing log is a ring of `size` slots holding the times of the last `size`
events of one kind (`Ring`). Whether one more event fits now, and what is
written when it does, is decided here, over a few primitives a store provides
(`SlotLog`): read the log's head, read the times stored, replace the log,
clamp times later than now, put one time. Memory and the JSON file keep rings
in the state (`RingLog`); SQLite keeps rows and Redis a hash, read and written
inside the store's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Protocol

from searchfuse.router.state._ring import Ring
from searchfuse.router.state._trust import clamp_slots, future_slot, newest_ring

__all__ = ["RingLog", "SlotLog", "take_slot"]


class SlotLog(Protocol):
    """What a store gives the pacing decision, inside one transaction."""

    def head(self, name: str) -> tuple[int | None, int, float | None]:
        """`(size, position, time in the slot the next event takes)` of log `name`;
        size `None` when there is no log or it cannot be read as one."""
        ...

    def stored_times(self, name: str, most: int) -> Iterable[float | None]:
        """Times stored in log `name`, at least its newest `most` (any order)."""
        ...

    def replace(self, name: str, ring: Ring) -> None:
        """Log `name` is `ring` from now on."""
        ...

    def clamp(self, name: str, now: float) -> None:
        """Every time in log `name` later than `now` becomes `now`."""
        ...

    def put(self, name: str, slot: int, t: float, position: int, size: int) -> None:
        """Time `t` in `slot` of log `name`, whose position becomes `position`."""
        ...


def take_slot(log: SlotLog, name: str, limit: int, window: float, now: float) -> float:
    """Count one event now in pacing log `name` if at most `limit` then fall in any
    `window` seconds, and return 0.0; else the seconds until it would fit.

    A log of another size is rebuilt from the newest times really stored (never
    from its stored size); a time later than now is read as now (`_trust`).
    """
    size, position, oldest = log.head(name)
    if size != limit:
        ring = newest_ring(name, log.stored_times(name, limit), limit, now)
        log.replace(name, ring)
        position, oldest = ring.seq, ring.get(ring.seq % limit)
    elif future_slot(name, oldest, now):
        # Not believed past now, here and in every other slot of the log.
        log.clamp(name, now)
        oldest = now
    if oldest is not None and oldest + window > now:
        return oldest + window - now
    log.put(name, position % limit, now, position + 1, limit)
    return 0.0


class RingLog:
    """A `SlotLog` over rings kept in memory (`State.rings`); `changed` tells whether
    a decision wrote."""

    __slots__ = ("changed", "rings")

    def __init__(self, rings: MutableMapping[str, Ring]) -> None:
        self.rings = rings
        self.changed = False

    def head(self, name: str) -> tuple[int | None, int, float | None]:
        ring = self.rings.get(name)
        if ring is None or ring.size <= 0:
            return None, 0, None
        return ring.size, ring.seq, ring.get(ring.seq % ring.size)

    def stored_times(self, name: str, most: int) -> Iterable[float | None]:
        ring = self.rings.get(name)
        return () if ring is None else ring.slots

    def replace(self, name: str, ring: Ring) -> None:
        self.rings[name] = ring
        self.changed = True

    def clamp(self, name: str, now: float) -> None:
        self.changed = clamp_slots(self.rings[name], name, now) or self.changed

    def put(self, name: str, slot: int, t: float, position: int, size: int) -> None:
        ring = self.rings[name]
        ring.set(slot, t)
        ring.seq = position
        self.changed = True
