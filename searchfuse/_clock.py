"""Time, in one injectable place.

Every time decision in searchfuse goes through a *clock*: a zero-argument
callable returning epoch seconds. Routers and guards take `clock=`; when
none is given they use `now`, which is `time.time` unless
[`searchfuse.testing.set_testing`][searchfuse.testing.set_testing] installed a controllable clock.
Waits go through `sleep` / `asleep` for the same reason: under test they
advance the fake clock instead of sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Clock", "asleep", "install", "now", "sleep"]

Clock = Callable[[], float]

_clock: Clock | None = None
_sleeper: Callable[[float], None] | None = None


def now() -> float:
    """The current time in epoch seconds, from the installed clock or `time.time`."""
    return _clock() if _clock is not None else time.time()


def sleep(seconds: float) -> None:
    """Wait `seconds`; under test, advance the fake clock instead."""
    if seconds <= 0:
        return
    if _sleeper is not None:
        _sleeper(seconds)
    else:
        time.sleep(seconds)


async def asleep(seconds: float) -> None:
    """Async twin of `sleep`."""
    import asyncio  # here, not at the top: `import searchfuse` never pays for asyncio

    if seconds <= 0:
        return
    if _sleeper is not None:
        _sleeper(seconds)
        await asyncio.sleep(0)
    else:
        await asyncio.sleep(seconds)


def install(clock: Clock | None, sleeper: Callable[[float], None] | None = None) -> None:
    """Replace the default clock and sleeper (`None` restores real time)."""
    global _clock, _sleeper
    _clock = clock
    _sleeper = sleeper
