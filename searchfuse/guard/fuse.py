"""The fuse: a hard stop on the first HTTP 429, and refusal while the cooldown runs.

A 429 means "this key (or account) is sending too fast". Retrying, moving to
the next key or switching to another search tool only spreads the burst:
that is how one parallel burst put four healthy Tavily keys into cooldown
within six seconds, and how one transient 429 pushed a whole agent session
to its weakest fallback provider without anyone noticing. So the guard does
none of that: the first 429 trips the fuse, the caller is told to stop, and
every uncached search is refused locally until the cooldown has passed.
"""

from __future__ import annotations

import threading

from searchfuse import _answers
from searchfuse.errors import CooldownActive

__all__ = ["DEFAULT_COOLDOWN", "Fuse", "cooldown_after", "is_rate_limit", "rate_limit_in"]

#: Seconds the fuse stays tripped after a 429 that carries no usable Retry-After.
DEFAULT_COOLDOWN = 60.0


def is_rate_limit(exc: BaseException) -> bool:
    """Whether `exc` stands for an HTTP 429.

    Recognises searchfuse's [`RateLimited`][searchfuse.errors.RateLimited] (from the router),
    `httpx.HTTPStatusError`, tavily-python's `UsageLimitExceededError` and
    any exception with a `status_code` or `response.status_code` of 429,
    also inside an exception group or as the explicit cause (`raise ... from`)
    of the tool's own error: see [`rate_limit_in`][searchfuse.guard.fuse.rate_limit_in].
    """
    return rate_limit_in(exc) is not None


def rate_limit_in(exc: BaseException) -> BaseException | None:
    """The 429 that `exc` stands for, or `None`: `exc` itself, one of an exception
    group's errors (an async tool's `TaskGroup`), or the explicit cause of a tool's
    own error (`raise SearchError(...) from http_error`), at any depth.

    A 429 wrapped by the tool is still the backend saying "stop": missing it would
    let the burst go on.
    """
    pending = [exc]
    seen: set[int] = set()
    while pending:
        error = pending.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if _answers.status_of(error) == 429:
            return error
        if isinstance(error, BaseExceptionGroup):
            pending.extend(reversed(error.exceptions))
        cause = error.__cause__
        if cause is not None:
            pending.append(cause)
    return None


def cooldown_after(exc: BaseException, *, now: float, default: float) -> float:
    """How long to stay tripped after the 429 `exc`: Retry-After (clamped), else `default`.

    Retry-After is read from a `retry_after` attribute (the router's
    [`RateLimited`][searchfuse.errors.RateLimited] carries the cooldown it applied) or from
    the response headers, as delta-seconds or an HTTP date, and clamped to
    `searchfuse._answers.MAX_PARK` (an hour).
    """
    retry_after = _answers.retry_after_of(exc, now)
    if retry_after is None:
        return default
    return _answers.clamp_park(retry_after)


class Fuse:
    """Tripped by a 429, it refuses searches until its cooldown ends.

    Every guard owns one unless it is given one with `guard(fuse=...)`. Give
    several guarded tools that use the same backend (or the same keys) the
    same `Fuse`, and a 429 seen by one of them stops all of them. Times are
    epoch seconds from the guard's clock; the fuse has no clock of its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cooldown_until: float | None = None
        self._cause = "rate limit"

    def __repr__(self) -> str:
        return f"<Fuse cooldown_until={self._cooldown_until!r} cause={self._cause!r}>"

    @property
    def cooldown_until(self) -> float | None:
        """When the current (or last) cooldown ends, in epoch seconds; `None` if never tripped."""
        return self._cooldown_until

    @property
    def cause(self) -> str:
        """What tripped the fuse, in words for the model (`"rate limit"`)."""
        return self._cause

    def remaining(self, now: float) -> float:
        """Seconds of cooldown left at `now` (`0.0` when the fuse is not tripped)."""
        until = self._cooldown_until
        if until is None:
            return 0.0
        return max(0.0, until - now)

    def check(self, now: float) -> None:
        """Raise [`CooldownActive`][searchfuse.errors.CooldownActive] if a cooldown runs at
        `now`."""
        until = self._cooldown_until
        if until is None or until <= now:
            return  # the common case, on every search: no further call
        raise CooldownActive(until - now, cause=self._cause)

    def trip(self, seconds: float, *, now: float, cause: str = "rate limit") -> float:
        """Refuse searches for `seconds` from `now`; return the seconds actually left.

        A running cooldown is only ever extended, never shortened, so two
        tools sharing a fuse cannot cut each other's cooldown short.
        """
        seconds = max(0.0, seconds)
        until = now + seconds
        with self._lock:
            if self._cooldown_until is None or until > self._cooldown_until:
                self._cooldown_until = until
                self._cause = cause
                # Exactly what was asked, not `until - now`: epoch-sized
                # floats would turn a Retry-After of 0.3 into 0.29999995...
                return seconds
            return max(0.0, self._cooldown_until - now)

    def reset(self) -> None:
        """Close the fuse now (for an operator who knows the backend recovered)."""
        with self._lock:
            self._cooldown_until = None
