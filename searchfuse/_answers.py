"""Reading an upstream answer: its HTTP status, its Retry-After, and the clamps.

Both halves need this: the guard to recognise a 429 from any search backend,
the router to classify Tavily's answers. It lives here, outside both, so the
guard never imports the router (and with it httpx and the Tavily client).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "MAX_PARK",
    "MAX_WAIT",
    "MIN_RETRY_AFTER",
    "clamp_park",
    "clamp_wait",
    "parse_retry_after",
    "retry_after_of",
    "status_of",
]

#: The longest a key (or the guard's fuse) is parked for one answer, whatever Retry-After says.
MAX_PARK = 3600.0
#: The longest the caller is ever made to wait inside one call (`on_429="retry"`).
MAX_WAIT = 10.0
#: The shortest Retry-After believed. The header counts whole seconds, so "0"
#: (or "0.01") can only mean "under a second"; taken literally it would switch
#: the router's hold and the guard's fuse off while the server is refusing us.
MIN_RETRY_AFTER = 1.0


def parse_retry_after(value: str | float | int | None, now: float) -> float | None:
    """Seconds to wait from a `Retry-After` value, or `None` if it says nothing usable.

    Accepts delta-seconds (`"60"`, `"0.5"`) and HTTP dates. Negative,
    non-finite and malformed values count as absent; values below
    `MIN_RETRY_AFTER` are raised to it. The result is not clamped from
    above: see `clamp_park` and `clamp_wait`.
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
            import email.utils  # HTTP dates are rare; the import is not

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
    return max(seconds, MIN_RETRY_AFTER)


def clamp_park(seconds: float) -> float:
    """How long a key may be parked for one answer: 0 .. `MAX_PARK`."""
    return min(max(seconds, 0.0), MAX_PARK)


def clamp_wait(seconds: float) -> float:
    """How long a caller may be made to wait inside one call: 0 .. `MAX_WAIT`."""
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


def _int_status(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception stands for, if any.

    Recognises searchfuse's own errors, `httpx.HTTPStatusError` (through
    its `response`, without importing httpx), tavily-python's errors, and
    any exception carrying `status_code` or `response.status_code`.
    """
    code = _int_status(getattr(exc, "status_code", None))
    if code is not None:
        return code
    code = _int_status(getattr(getattr(exc, "response", None), "status_code", None))
    if code is not None:
        return code
    return _tavily_python_status(exc)


def retry_after_of(exc: BaseException, now: float) -> float | None:
    """The Retry-After an exception carries (header, attribute), unclamped, or `None`."""
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
