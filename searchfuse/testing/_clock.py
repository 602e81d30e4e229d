"""A clock that only moves when told to, and the switch that installs it for a test run.

[`FakeClock`][searchfuse.testing.FakeClock] is a zero-argument callable returning epoch seconds,
like `time.time`, so it fits every `clock=` parameter in searchfuse. Its
[`FakeClock.advance`][searchfuse.testing.FakeClock.advance] has the shape of a sleeper, so it also
fits `searchfuse._clock.install(clock, sleeper)`: under test, a wait moves the
clock forward instead of blocking.

[`set_testing`][searchfuse.testing.set_testing] (and its scoped twin
[`testing_mode`][searchfuse.testing.testing_mode]) is the switch a user's own test suite flips, like
`stamina.set_testing`: guard and router then read time from the fake clock and never really sleep.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal, overload

from searchfuse import _clock as clock_seam

__all__ = ["DEFAULT_START", "FakeClock", "is_testing", "set_testing", "testing_mode"]

#: 2026-01-15 12:00:00 UTC. Mid-month and mid-day on purpose, so a test that
#: advances by hours or days does not cross a monthly quota reset by accident.
DEFAULT_START = 1_768_478_400.0


class FakeClock:
    """A controllable clock: `clock()` returns the current fake time in epoch seconds.

    Thread-safe: parallel requests may read it while a test advances it.

    Example:
        ```python
        clock = FakeClock()
        t0 = clock()
        clock.advance(61)      # a minute and a bit later, instantly
        assert clock() == t0 + 61
        ```
    """

    def __init__(self, start: float = DEFAULT_START) -> None:
        """Start at `start` (epoch seconds; default `DEFAULT_START`)."""
        self._check(start)
        self._start = float(start)
        self._now = self._start
        self._lock = threading.Lock()

    @staticmethod
    def _check(value: float) -> None:
        if not math.isfinite(value):
            raise ValueError(f"a clock reading must be a finite number, got {value!r}")

    def __call__(self) -> float:
        """The current fake time in epoch seconds."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`.

        This is also the sleeper under test: waiting `n` seconds advances the
        clock by `n`. Negative values are refused (time does not run back by
        waiting); use [`set`][searchfuse.testing.FakeClock.set] to jump anywhere.
        """
        self._check(seconds)
        if seconds < 0:
            raise ValueError(f"cannot advance a clock by a negative amount ({seconds!r} s)")
        with self._lock:
            self._now += seconds

    def set(self, t: float) -> None:
        """Jump to epoch second `t` (forwards or backwards)."""
        self._check(t)
        with self._lock:
            self._now = float(t)

    def reset(self) -> None:
        """Go back to the time this clock started at (what the pytest plugin does between tests)."""
        with self._lock:
            self._now = self._start

    def __repr__(self) -> str:
        return f"FakeClock({self():.3f})"


@overload
def set_testing(testing: Literal[True], *, clock: FakeClock | None = None) -> FakeClock: ...
@overload
def set_testing(testing: Literal[False], *, clock: None = None) -> None: ...
@overload
def set_testing(testing: bool, *, clock: FakeClock | None = None) -> FakeClock | None: ...
def set_testing(testing: bool, *, clock: FakeClock | None = None) -> FakeClock | None:
    """Switch searchfuse's time to a [`FakeClock`][searchfuse.testing.FakeClock] (`True`) or back
    to real time.

    With `True`, installs `clock` (or a new one) as searchfuse's default
    clock and its [`advance`][searchfuse.testing.FakeClock.advance] as the sleeper, and returns it:
    every guard and router built without an explicit `clock=` now reads fake time,
    and every wait (a 429 retry, a back-off) advances it instead of sleeping.
    With `False`, restores `time.time` and real sleeping, and returns `None`.

    Example:
        ```python
        clock = searchfuse.testing.set_testing(True)
        ...                    # code under test; clock.advance(60) to let a cooldown pass
        searchfuse.testing.set_testing(False)
        ```

    Prefer [`testing_mode`][searchfuse.testing.testing_mode] (or the `fake_clock` pytest fixture)
    when the switch should be undone automatically.
    """
    if not testing:
        if clock is not None:
            raise TypeError("set_testing(False) takes no clock")
        clock_seam.install(None, None)
        return None
    clock = clock if clock is not None else FakeClock()
    clock_seam.install(clock, clock.advance)
    return clock


def is_testing() -> bool:
    """Whether searchfuse currently reads time from a
    [`FakeClock`][searchfuse.testing.FakeClock]."""
    return isinstance(clock_seam._clock, FakeClock)


@contextmanager
def testing_mode(clock: FakeClock | None = None) -> Iterator[FakeClock]:
    """[`set_testing`][searchfuse.testing.set_testing] for the duration of a `with` block; yields
    the clock.

    On exit, whatever clock and sleeper were installed before are restored
    (real time, or an outer test mode), even if the block raised.

    Example:
        ```python
        with searchfuse.testing.testing_mode() as clock:
            ...
            clock.advance(30)
        ```
    """
    previous_clock: Callable[[], float] | None = clock_seam._clock
    previous_sleeper: Callable[[float], None] | None = clock_seam._sleeper
    installed = set_testing(True, clock=clock)
    try:
        yield installed
    finally:
        clock_seam.install(previous_clock, previous_sleeper)


# Its name starts with "test": without this, a test module that imports it
# would have pytest collect it as a test.
testing_mode.__test__ = False  # type: ignore[attr-defined]
