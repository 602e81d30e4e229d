"""What an upstream answer means for a key: the reaction table.

This module is the one place that turns an HTTP status (or an exception from a
search function) into a reaction. Reading the answer itself (its status,
Retry-After, the clamps) lives in `searchfuse._answers`, which the guard
shares without importing the router; the names are re-exported here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import httpx

from searchfuse._answers import (
    MAX_PARK,
    MAX_WAIT,
    TRANSIENT_4XX,
    Outcome,
    clamp_park,
    clamp_wait,
    outcome_of_status,
    parse_retry_after,
    retry_after_of,
    status_of,
)
from searchfuse.providers.tavily import STATUS as TAVILY_STATUS

__all__ = [
    "AUTH_COOLDOWN",
    "DEFAULT_COOLDOWN_MINUTES",
    "MAX_PARK",
    "MAX_WAIT",
    "REACTIONS",
    "TRANSIENT_4XX",
    "Outcome",
    "Park",
    "Reaction",
    "clamp_park",
    "clamp_wait",
    "classify_exception",
    "classify_status",
    "parse_retry_after",
    "reaction",
    "retry_after_of",
    "status_of",
]

DEFAULT_COOLDOWN_MINUTES = 1.0
#: 401/403 park a key for an hour, never for ever: keys recover (rotation,
#: account reactivation, monthly rollover) -- incident 7.
AUTH_COOLDOWN = 3600.0


class Park(enum.StrEnum):
    """What an answer does to the key's cooldown."""

    #: Success: the key's error and cooldown are cleared.
    CLEAR = "clear"
    #: The key is left as it was (the request or the configuration is wrong).
    NONE = "none"
    #: `AUTH_COOLDOWN` (401/403 are never permanent, incident 7).
    AUTH = "auth"
    #: Retry-After, else the router's `cooldown_minutes`.
    RETRY_AFTER = "retry_after"
    #: The router's `cooldown_minutes`.
    FALLBACK = "fallback"
    #: Soft skip until `/usage` shows headroom or the month rolls.
    EXHAUSTED = "exhausted"
    #: `AUTH_COOLDOWN`: an instance whose settings refuse the search (a configuration
    #: does not change by the minute; asked again after the park, never at every call).
    CONFIG = "config"


@dataclass(frozen=True)
class Reaction:
    """What the router does after an answer of one kind. The router reads these fields;
    it does not restate the table in if-chains.

    - `park`: what happens to the key's cooldown (`Park`);
    - `failover`: whether the same call moves on to the next key (`None`:
      the router's `on_429` policy decides);
    - `penalises_key`: whether the key's error is recorded against it;
    - `holds_router`: whether the whole router is held for the park (unless
      `on_429="failover"`): a burst that 429s one key 429s them all (incident 1);
    - `trips_breaker`: whether the answer counts as Tavily failing, for the
      router-wide breaker.
    """

    outcome: Outcome
    park: Park
    failover: bool | None
    penalises_key: bool
    holds_router: bool = False
    trips_breaker: bool = False

    @property
    def cooldown(self) -> str:
        """The park kind as a string (older name of `park`)."""
        return str(self.park)

    def park_seconds(self, retry_after: float | None, fallback: float) -> float:
        """How long the key is parked: clamped to `MAX_PARK`; 0.0 for no park."""
        if self.park is Park.AUTH or self.park is Park.CONFIG:
            return AUTH_COOLDOWN
        if self.park is Park.RETRY_AFTER:
            return clamp_park(retry_after if retry_after is not None else fallback)
        if self.park is Park.FALLBACK:
            return clamp_park(fallback)
        return 0.0


#: The reaction table of DESIGN.md, row by row.
REACTIONS: dict[Outcome, Reaction] = {
    Outcome.OK: Reaction(Outcome.OK, Park.CLEAR, failover=False, penalises_key=False),
    Outcome.BAD_REQUEST: Reaction(
        Outcome.BAD_REQUEST, Park.NONE, failover=False, penalises_key=False
    ),
    Outcome.AUTH: Reaction(Outcome.AUTH, Park.AUTH, failover=True, penalises_key=True),
    Outcome.RATE_LIMITED: Reaction(
        Outcome.RATE_LIMITED, Park.RETRY_AFTER, failover=None, penalises_key=True, holds_router=True
    ),
    Outcome.EXHAUSTED: Reaction(
        Outcome.EXHAUSTED, Park.EXHAUSTED, failover=True, penalises_key=True
    ),
    Outcome.UPSTREAM: Reaction(
        Outcome.UPSTREAM, Park.FALLBACK, failover=True, penalises_key=True, trips_breaker=True
    ),
    Outcome.MISCONFIGURED: Reaction(
        Outcome.MISCONFIGURED, Park.NONE, failover=False, penalises_key=False
    ),
}


#: A misconfigured answer from a provider whose key is its address (a SearXNG instance
#: with JSON output off, or an address that is not SearXNG): the instance is the fault,
#: so it is parked and the next instance tried. (Another provider's base URL is the
#: router's own configuration: its row above stops the call.)
MISCONFIGURED_INSTANCE = Reaction(
    Outcome.MISCONFIGURED, Park.CONFIG, failover=True, penalises_key=True
)


def reaction(outcome: Outcome, key_is_url: bool = False) -> Reaction:
    """The table's row for `outcome`, for a provider whose keys are addresses or not."""
    if outcome is Outcome.MISCONFIGURED and key_is_url:
        return MISCONFIGURED_INSTANCE
    return REACTIONS[outcome]


def classify_status(status: int | None) -> Outcome:
    """The table row for an HTTP status from Tavily; `None` is a timeout or connection error."""
    return outcome_of_status(status, TAVILY_STATUS)


def classify_exception(exc: BaseException) -> Outcome | None:
    """The table row for an exception raised by a search function, or `None` if unknown.

    Timeouts and connection errors (httpx's, tavily-python's, the builtin
    `TimeoutError` and `ConnectionError`) are upstream failures.
    """
    status = status_of(exc)
    if status is not None:
        return classify_status(status)
    if isinstance(exc, httpx.TransportError | TimeoutError | ConnectionError):
        return Outcome.UPSTREAM
    if type(exc).__module__.split(".")[0] == "tavily" and type(exc).__name__ == "TimeoutError":
        return Outcome.UPSTREAM
    return None
