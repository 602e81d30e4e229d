"""The router's options, checked once at construction, and the defaults they start from."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import httpx

from searchfuse import _clock
from searchfuse.providers.tavily import RATE_WINDOW

__all__ = [
    "DEFAULT_BREAKER_THRESHOLD",
    "DEFAULT_DEADLINE",
    "DEFAULT_MAX_KEYS_PER_CALL",
    "DEFAULT_MAX_WAIT",
    "DEFAULT_SYNC_INTERVAL",
    "FIRST_RETRY_WAIT",
    "MAX_PENDING",
    "MAX_SEARCH_CREDITS",
    "PACE_MARGIN",
    "PACE_WINDOW",
    "RETRIES_ON_429",
    "STICKY_WINDOW",
    "USAGE_CLAIM",
    "USAGE_SHARE",
    "On429",
    "RouterOptions",
    "seconds",
]

On429 = Literal["stop", "retry", "failover"]

#: `on_429="retry"`: how many retries on the same key, and the first wait.
RETRIES_ON_429 = 2
FIRST_RETRY_WAIT = 0.5
#: Every call (fail-over, `/usage`, retries included) ends within this many seconds.
DEFAULT_DEADLINE = 60.0
#: A call tries at most this many keys: a 5xx storm must not fan one call out to every key.
DEFAULT_MAX_KEYS_PER_CALL = 3
#: After this many upstream failures in a row (5xx, timeouts, no connection) the
#: whole router pauses for `cooldown_minutes`: Tavily is failing, not a key.
DEFAULT_BREAKER_THRESHOLD = 6
#: `/usage` is an optimisation: it may use at most this share of a call's time left.
USAGE_SHARE = 1 / 3
#: Seconds a `/usage` call being made keeps other searches from starting one
#: for the same key (its answer, or this much time, ends the claim).
USAGE_CLAIM = 30.0
#: State changes of served answers kept for a retry while the store fails.
MAX_PENDING = 1000
#: No single search costs more credits than this; a larger figure is not believed.
MAX_SEARCH_CREDITS = 100.0
#: Searches starting within this many seconds of the previous pick stay on its key.
STICKY_WINDOW = 2.0
#: How long a call may wait for a key with room before [`Throttled`][searchfuse.errors.Throttled].
DEFAULT_MAX_WAIT = 10.0
#: Pacing counts a request when it is decided; Tavily counts it when it arrives,
#: a little later. A second more than Tavily's window keeps the difference in
#: network delay between two requests from ever putting `rpm + 1` in its window.
PACE_MARGIN = 1.0
PACE_WINDOW = RATE_WINDOW + PACE_MARGIN
#: Figures older than this are refreshed from `/usage` (for the key in use only).
DEFAULT_SYNC_INTERVAL = 1800.0
#: The latest time a clock may report (the year 9999): a later one cannot be a date.
LAST_TIME = 253402300799.0

_ON_429 = ("stop", "retry", "failover")


def seconds(
    name: str, value: object, accepts: str, *, zero: bool = True, scale: float = 1.0
) -> float:
    """`value` as a float; TypeError unless it is a real number (not a bool, not
    text), ValueError unless finite (also times `scale`) and >= 0 (> 0 unless `zero`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be {accepts}, not {value!r}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number * scale) or number < 0 or (number == 0 and not zero):
        shown = f"{value!r}" if len(repr(value)) <= 40 else f"a {len(str(value))}-digit number"
        raise ValueError(f"{name} must be {accepts}, not {shown}")
    return number


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, not {value!r}")
    return value


def check_timeout(timeout: float | None) -> None:
    """A request's own `timeout=`: seconds > 0, or `None`."""
    if timeout is not None:
        seconds("timeout", timeout, "a finite number of seconds > 0", zero=False)


def _callable(name: str, value: object, what: str) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be {what}, not {value!r}")


@dataclass(frozen=True)
class RouterOptions:
    """Everything a [`Router`][searchfuse.Router] was told, validated once.

    Build it with `check` (each value is the constructor argument of the same
    name), then `cooled` (`cooldown_seconds` is `cooldown_minutes` * 60).
    """

    on_429: On429 = "stop"
    cooldown_seconds: float = 60.0
    timeout: httpx.Timeout | float | None = None
    sync_interval: float = DEFAULT_SYNC_INTERVAL
    pace: bool = True
    max_wait: float = DEFAULT_MAX_WAIT
    deadline: float | None = DEFAULT_DEADLINE
    max_keys_per_call: int = DEFAULT_MAX_KEYS_PER_CALL
    breaker_threshold: int = DEFAULT_BREAKER_THRESHOLD
    clock: Callable[[], float] | None = None
    sleep: Callable[[float], None] | None = None

    @classmethod
    def check(
        cls,
        *,
        on_429: On429 = "stop",
        timeout: httpx.Timeout | float | None = None,
        sync_interval: float = DEFAULT_SYNC_INTERVAL,
        pace: bool = True,
        max_wait: float = DEFAULT_MAX_WAIT,
        deadline: float | None = DEFAULT_DEADLINE,
        max_keys_per_call: int = DEFAULT_MAX_KEYS_PER_CALL,
        breaker_threshold: int = DEFAULT_BREAKER_THRESHOLD,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> RouterOptions:
        """The options, each checked: a bad one is a TypeError or ValueError naming
        it and what it accepts."""
        if on_429 not in _ON_429:
            raise ValueError(f"on_429 must be 'stop', 'retry' or 'failover', not {on_429!r}")
        if deadline is not None:
            seconds("deadline", deadline, "a finite number of seconds > 0, or None", zero=False)
        if timeout is not None and not isinstance(timeout, httpx.Timeout):
            accepts = "a finite number of seconds > 0, an httpx.Timeout, or None"
            seconds("timeout", timeout, accepts, zero=False)
        seconds("sync_interval", sync_interval, "a finite number of seconds >= 0")
        _callable("clock", clock, "a function returning time.time()-like seconds")
        _callable("sleep", sleep, "a function taking seconds")
        _whole("max_keys_per_call", max_keys_per_call)
        _whole("breaker_threshold", breaker_threshold)
        seconds("max_wait", max_wait, "a finite number of seconds >= 0")
        return cls(
            on_429=on_429,
            timeout=timeout,
            sync_interval=float(sync_interval),
            pace=bool(pace),
            max_wait=float(max_wait),
            deadline=None if deadline is None else float(deadline),
            max_keys_per_call=max_keys_per_call,
            breaker_threshold=breaker_threshold,
            clock=clock,
            sleep=sleep,
        )

    def cooled(self, cooldown_minutes: float) -> RouterOptions:
        """These options with the fallback cooldown `cooldown_minutes` (checked)."""
        minutes = seconds(
            "cooldown_minutes", cooldown_minutes, "a finite number of minutes >= 0", scale=60.0
        )
        # A float all the way: int(0.5) once turned a 30 s cooldown into none (incident 4).
        return dataclasses.replace(self, cooldown_seconds=minutes * 60.0)

    def now(self) -> float:
        """The router's clock (ValueError if it reports no usable time)."""
        if self.clock is None:
            return _clock.now()
        now = self.clock()
        if isinstance(now, bool) or not isinstance(now, int | float) or not 0 <= now <= LAST_TIME:
            raise ValueError(
                f"the router's clock returned {now!r}: it must return seconds since "
                "the epoch like time.time() (a finite number, before the year 10000)"
            )
        return float(now)
