"""Reading an upstream answer: its HTTP status, its Retry-After, and the clamps.

Both halves need this: the guard to recognise a 429 from any search backend,
the router to classify Tavily's answers. It lives here, outside both, so the
guard never imports the router (and with it httpx and the Tavily client).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_PARK",
    "MAX_QUERY_LENGTH",
    "MAX_WAIT",
    "MIN_RETRY_AFTER",
    "TRANSIENT_4XX",
    "Outcome",
    "attribute",
    "clamp_park",
    "clamp_wait",
    "outcome_of_status",
    "parse_retry_after",
    "query_problem",
    "retry_after_of",
    "status_of",
]

#: The longest a key (or the guard's fuse) is parked for one answer, whatever Retry-After says.
MAX_PARK = 3600.0
#: The longest the caller is ever made to wait inside one call (`on_429="retry"`).
MAX_WAIT = 10.0
#: The longest query Tavily accepts, in characters.
MAX_QUERY_LENGTH = 400
#: Why a text with half a UTF-16 pair cannot be sent.
LONE_SURROGATE = (
    "the query or a parameter contains a lone surrogate (half of an emoji or "
    "other character); remove it or send the whole character"
)
#: The shortest Retry-After believed. The header counts whole seconds, so "0"
#: (or "0.01") can only mean "under a second"; taken literally it would switch
#: the router's hold and the guard's fuse off while the server is refusing us.
MIN_RETRY_AFTER = 1.0


class Outcome(enum.StrEnum):
    """The row of the router's reaction table an upstream answer falls into."""

    OK = "ok"
    BAD_REQUEST = "bad_request"
    AUTH = "auth"
    RATE_LIMITED = "rate_limited"
    EXHAUSTED = "exhausted"
    UPSTREAM = "upstream"
    #: A redirect or a 404/405 from a search: the base URL does not point at
    #: the provider's API. A configuration problem, not the key's fault.
    MISCONFIGURED = "misconfigured"


#: 4xx answers about the moment, not the request: 408 Request Timeout (the
#: server gave up waiting for it) and 425 Too Early. Like a 5xx: another key, later.
TRANSIENT_4XX = frozenset({408, 425})


def outcome_of_status(status: int | None, specific: Mapping[int, Outcome] | None = None) -> Outcome:
    """What an HTTP status means for a key; `None` is a timeout or connection error.

    `specific` holds a provider's own codes (Tavily's 432/433: out of credits),
    read before the meaning HTTP gives every status.
    """
    if status is None:
        return Outcome.UPSTREAM
    if specific:
        own = specific.get(status)
        if own is not None:
            return own
    if 200 <= status < 300:
        return Outcome.OK
    if status in (401, 403):
        return Outcome.AUTH
    if status == 429:
        return Outcome.RATE_LIMITED
    if status >= 500 or status in TRANSIENT_4XX:
        return Outcome.UPSTREAM
    if 300 <= status < 400 or status in (404, 405):
        # An API never redirects a search and always has its search path: the address is wrong.
        return Outcome.MISCONFIGURED
    # 400 and every other 4xx: the request is wrong, not the key.
    return Outcome.BAD_REQUEST


#: Delta-seconds as servers send it: ASCII digits, at most one decimal point.
_DELTA_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def parse_retry_after(value: object, now: float) -> float | None:
    """Seconds to wait from a `Retry-After` value, or `None` if it says nothing usable.

    Accepts delta-seconds as a number, a numeric string (`"60"`, `" 0.5 "`)
    or a `decimal.Decimal`; a `datetime.timedelta`; an absolute time as an
    aware `datetime.datetime` or an HTTP date; and any object that converts
    to a number (`__float__` or `__index__`). Negative, non-finite,
    malformed and unknown values count as absent (never an error); values
    below `MIN_RETRY_AFTER` are raised to it. The result is not clamped from
    above: see `clamp_park` and `clamp_wait`.
    """
    try:
        seconds = _seconds(value, now)
    except Exception:  # an exotic object whose conversion fails: absent, never an error
        return None
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return None
    return max(seconds, MIN_RETRY_AFTER)


def _seconds(value: object, now: float) -> float | None:
    """`value` as seconds from `now` (unchecked), or `None` when it is no time at all."""
    import datetime

    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            return None  # a naive time could be any zone
        return _until(value.timestamp() - now)
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        if _DELTA_SECONDS.fullmatch(text):
            return float(text)
        # Anything else that Python would read as a number ("1_0", "1e1", "+30",
        # digits of other scripts) is no Retry-After: absent, not believed.
        import email.utils  # HTTP dates are rare; the import is not

        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None or when.tzinfo is None:
            return None
        return _until(when.timestamp() - now)
    if hasattr(type(value), "__float__"):  # Decimal, Fraction, numpy numbers
        return float(value)  # type: ignore[arg-type]
    if hasattr(type(value), "__index__"):
        return float(value.__index__())  # type: ignore[attr-defined]
    return None


def _until(seconds: float) -> float | None:
    # A date in the past means "now": absent, not negative.
    return None if seconds < 0 else seconds


def query_problem(query: object) -> str | None:
    """Why Tavily cannot be sent `query` (so it never is), or `None` when it can be.

    The router refuses such a query before sending it; the guard spends no
    turn budget on it.
    """
    if not isinstance(query, str) or not query.strip():
        return "query must be a non-empty string"
    if len(query) > MAX_QUERY_LENGTH:
        return f"query is {len(query)} characters; Tavily accepts at most {MAX_QUERY_LENGTH}"
    try:
        query.encode("utf-8")
    except UnicodeEncodeError:
        return LONE_SURROGATE
    return None


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
    """An HTTP status from an int, an int-like object (`HTTPStatus`, `__index__`) or `"429"`."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        return int(text) if len(text) == 3 and text.isascii() and text.isdigit() else None
    index = getattr(type(value), "__index__", None)
    if index is not None:
        return int(index(value))
    return None


def attribute(obj: object, name: str) -> Any:
    """`getattr(obj, name, None)` that never raises.

    A backend's exception is read to classify it (its status, its
    Retry-After); a property that raises while being read must never
    replace the backend's own error, so it reads as absent.
    """
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception stands for, if any.

    Recognises searchfuse's own errors, `httpx.HTTPStatusError` (through
    its `response`, without importing httpx), tavily-python's errors, and
    any exception carrying `status_code` or `response.status_code` (an
    int, an int-like object or a numeric string). Reading never raises: an
    attribute that fails to read counts as absent.
    """
    try:
        code = _int_status(attribute(exc, "status_code"))
        if code is not None:
            return code
        code = _int_status(attribute(attribute(exc, "response"), "status_code"))
        if code is not None:
            return code
        return _tavily_python_status(exc)
    except Exception:  # an int-like status whose conversion fails, a str() that raises
        return None


def retry_after_of(exc: BaseException, now: float) -> float | None:
    """The Retry-After an exception carries (attribute, header), unclamped, or `None`.

    Reading never raises: attributes or headers that fail to read, or hold
    something that is no time, count as absent.
    """
    for attr in ("retry_after", "retry_after_seconds"):
        parsed = parse_retry_after(attribute(exc, attr), now)
        if parsed is not None:
            return parsed
    headers = attribute(attribute(exc, "response"), "headers")
    if headers is not None:
        try:
            value = headers.get("retry-after")
        except Exception:  # an exotic headers object: treat as absent
            value = None
        return parse_retry_after(value, now)
    return None
