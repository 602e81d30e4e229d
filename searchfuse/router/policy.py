"""What an upstream answer means for a key: the reaction table, Retry-After, clamps.

This module is the one place that turns an HTTP status (or an exception from a
search function) into a reaction. The router, the guard and the integrations
all ask it, so a 429 means the same thing everywhere.
"""

from __future__ import annotations

import email.utils
import enum
import math
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = [
    "AUTH_COOLDOWN",
    "DEFAULT_COOLDOWN_MINUTES",
    "MAX_PARK",
    "MAX_WAIT",
    "REACTIONS",
    "Outcome",
    "Reaction",
    "clamp_park",
    "clamp_wait",
    "classify_exception",
    "classify_status",
    "parse_retry_after",
    "retry_after_of",
    "status_of",
]

DEFAULT_COOLDOWN_MINUTES = 1.0
#: 401/403 park a key for an hour, never for ever: keys recover (rotation,
#: account reactivation, monthly rollover) -- incident 7.
AUTH_COOLDOWN = 3600.0
#: The longest a key is parked for one answer, whatever Retry-After says.
MAX_PARK = 3600.0
#: The longest the caller is ever made to wait inside one call (``on_429="retry"``).
MAX_WAIT = 10.0


class Outcome(enum.StrEnum):
    """The row of the reaction table an upstream answer falls into."""

    OK = "ok"
    BAD_REQUEST = "bad_request"
    AUTH = "auth"
    RATE_LIMITED = "rate_limited"
    EXHAUSTED = "exhausted"
    UPSTREAM = "upstream"


@dataclass(frozen=True)
class Reaction:
    """What the router does with a key after an answer of one kind.

    ``cooldown`` is ``"clear"`` (remove error and cooldown), ``"none"`` (leave the
    key alone), ``"auth"`` (:data:`AUTH_COOLDOWN`), ``"retry_after"``
    (Retry-After, else ``cooldown_minutes``), ``"fallback"`` (``cooldown_minutes``)
    or ``"exhausted"`` (soft skip until ``/usage`` shows headroom or the month
    rolls). ``failover`` says whether the same search moves on to the next key;
    for 429 the router's ``on_429`` policy decides instead.
    """

    outcome: Outcome
    cooldown: str
    failover: bool | None
    penalises_key: bool


#: The reaction table of DESIGN.md, row by row.
REACTIONS: dict[Outcome, Reaction] = {
    Outcome.OK: Reaction(Outcome.OK, "clear", failover=False, penalises_key=False),
    Outcome.BAD_REQUEST: Reaction(Outcome.BAD_REQUEST, "none", failover=False, penalises_key=False),
    Outcome.AUTH: Reaction(Outcome.AUTH, "auth", failover=True, penalises_key=True),
    Outcome.RATE_LIMITED: Reaction(
        Outcome.RATE_LIMITED, "retry_after", failover=None, penalises_key=True
    ),
    Outcome.EXHAUSTED: Reaction(Outcome.EXHAUSTED, "exhausted", failover=True, penalises_key=True),
    Outcome.UPSTREAM: Reaction(Outcome.UPSTREAM, "fallback", failover=True, penalises_key=True),
}


def classify_status(status: int | None) -> Outcome:
    """The table row for an HTTP status; ``None`` is a timeout or connection error."""
    if status is None:
        return Outcome.UPSTREAM
    if 200 <= status < 300:
        return Outcome.OK
    if status in (401, 403):
        return Outcome.AUTH
    if status == 429:
        return Outcome.RATE_LIMITED
    if status in (432, 433):
        return Outcome.EXHAUSTED
    if status >= 500:
        return Outcome.UPSTREAM
    # 400 and every other 4xx: the request is wrong, not the key.
    return Outcome.BAD_REQUEST


def parse_retry_after(value: str | float | int | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value, or ``None`` if it says nothing usable.

    Accepts delta-seconds (``"60"``, ``"0.5"``) and HTTP dates. Negative,
    non-finite and malformed values count as absent. The result is not clamped:
    see :func:`clamp_park` and :func:`clamp_wait`.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip()
        if not text:
            return None
        try:
            seconds = float(text)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                return None
            if when is None or when.tzinfo is None:
                return None
            seconds = when.timestamp() - now
            # A date in the past means "now": absent, not negative.
            if seconds < 0:
                return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def clamp_park(seconds: float) -> float:
    """How long a key may be parked for one answer: 0 .. :data:`MAX_PARK`."""
    return min(max(seconds, 0.0), MAX_PARK)


def clamp_wait(seconds: float) -> float:
    """How long a caller may be made to wait inside one call: 0 .. :data:`MAX_WAIT`."""
    return min(max(seconds, 0.0), MAX_WAIT)


def _tavily_python_status(exc: BaseException) -> int | None:
    """Status codes behind tavily-python's exceptions (matched by name: it is optional)."""
    for cls in type(exc).__mro__:
        if cls.__module__.split(".")[0] != "tavily":
            continue
        if cls.__name__ == "UsageLimitExceededError":
            return 429
        if cls.__name__ == "InvalidAPIKeyError":
            return 401
        if cls.__name__ == "BadRequestError":
            return 400
        if cls.__name__ == "ForbiddenError":
            # tavily-python folds 403, 432 and 433 into one class; its text tells them apart.
            text = str(exc).lower()
            return 432 if ("limit" in text or "exceed" in text or "credit" in text) else 403
    return None


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception stands for, if any.

    Recognises searchfuse's own errors, ``httpx.HTTPStatusError``,
    tavily-python's errors, and any exception carrying ``status_code`` or
    ``response.status_code``.
    """
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code
    code = getattr(exc, "status_code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    return _tavily_python_status(exc)


def retry_after_of(exc: BaseException, now: float) -> float | None:
    """The Retry-After an exception carries (header, attribute), unclamped, or ``None``."""
    for attr in ("retry_after", "retry_after_seconds"):
        value: Any = getattr(exc, attr, None)
        if value is not None:
            parsed = parse_retry_after(value, now)
            if parsed is not None:
                return parsed
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is not None:
        try:
            value = headers.get("retry-after")
        except Exception:  # an exotic headers object: treat as absent
            value = None
        if isinstance(value, str):
            return parse_retry_after(value, now)
    return None


def classify_exception(exc: BaseException) -> Outcome | None:
    """The table row for an exception raised by a search function, or ``None`` if unknown.

    Timeouts and connection errors (httpx's, tavily-python's, the builtin
    ``TimeoutError`` and ``ConnectionError``) are upstream failures.
    """
    status = status_of(exc)
    if status is not None:
        return classify_status(status)
    if isinstance(exc, httpx.TransportError | TimeoutError | ConnectionError):
        return Outcome.UPSTREAM
    if type(exc).__module__.split(".")[0] == "tavily" and type(exc).__name__ == "TimeoutError":
        return Outcome.UPSTREAM
    return None
