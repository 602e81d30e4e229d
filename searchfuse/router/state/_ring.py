"""A pacing log: the times of the last events of one kind, in a fixed ring of slots."""

from __future__ import annotations

import math

__all__ = ["Ring"]


class Ring:
    """The times of the last `size` events of one kind: a sliding-window log.

    At most `size` events may fall in any `window` seconds. The slot the
    next event would take holds the event `size` events ago; the next event
    may happen once that one has left the window. Unlike a token bucket that
    starts full and refills per second (which lets `rpm` requests through at
    once and then more as it refills, so a 60-second window can see up to twice
    `rpm`), this never admits more than `size` events in any window, and it
    costs one slot read and one slot write per event whatever `size` is.
    """

    __slots__ = ("_shared", "high", "seq", "size", "slots")

    def __init__(self, size: int, seq: int = 0, slots: list[float | None] | None = None) -> None:
        self.size = size
        self.seq = seq
        #: Grows to `size` as events come: a rate of a million costs nothing until used.
        #: Read it freely; change it only through `set` or `own_slots` (it may be shared).
        self.slots: list[float | None] = slots if slots is not None else []
        #: No stored time is later than this (`None`: not known yet). It spares a look
        #: at every slot for a time later than now on each event.
        self.high: float | None = None
        #: `slots` may be another ring's too (see `copy`).
        self._shared = False

    def copy(self) -> Ring:
        """A ring with the same times, to change freely.

        The copy shares this ring's slots until either changes one (then that
        one takes a list of its own): a log of a high rate holds thousands of
        times, and a transaction copies every log it may change.
        """
        ring = Ring(self.size, self.seq, self.slots)
        ring.high = self.high
        ring._shared = self._shared = True
        return ring

    def own_slots(self) -> list[float | None]:
        """`slots`, to change in place (copied first if another ring shares them)."""
        if self._shared:
            self.slots = list(self.slots)
            self._shared = False
        return self.slots

    def get(self, index: int) -> float | None:
        """The time in slot `index` (`None`: never used)."""
        return self.slots[index] if index < len(self.slots) else None

    def set(self, index: int, t: float | None) -> None:
        """Put time `t` in slot `index`."""
        slots = self.own_slots()
        if index >= len(slots):
            slots.extend([None] * (index + 1 - len(slots)))
        slots[index] = t
        high = self.high
        if high is not None and t is not None and t > high:
            self.high = t

    def resized(self, size: int) -> Ring:
        """The same history in a ring of `size` slots (the newest events kept)."""
        ring = Ring(size)
        for t in self.ordered()[-size:] if size else []:
            ring.set(ring.seq % size, t)
            ring.seq += 1
        return ring

    def ordered(self) -> list[float]:
        """The remembered times, oldest first."""
        n = self.size
        out = [self.get((self.seq + i) % n) for i in range(n)] if n else []
        return [t for t in out if t is not None]

    def wait(self, window: float, now: float) -> float:
        """Seconds until the next event fits (0.0: now)."""
        if self.size <= 0:
            return math.inf
        oldest = self.get(self.seq % self.size)
        if oldest is None:
            return 0.0
        return max(0.0, oldest + window - now)

    def take(self, window: float, now: float) -> float:
        """Record an event now if it fits and return 0.0, else the seconds to wait."""
        wait = self.wait(window, now)
        if wait <= 0.0:
            self.set(self.seq % self.size, now)
            self.seq += 1
        return wait
