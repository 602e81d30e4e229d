"""What an upstream answer means for a key: the reaction table.

This module is the one place that turns an HTTP status (or an exception from a
search function) into a reaction. Reading the answer itself (its status,
Retry-After, the clamps) lives in :mod:`searchfuse._answers`, which the guard
shares without importing the router; the names are re-exported here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import httpx

from searchfuse._answers import (
    MAX_PARK,
    MAX_WAIT,
    clamp_park,
    clamp_wait,
    parse_retry_after,
    retry_after_of,
    status_of,
)

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
