"""What the gateway answers for each refusal and failure: one table, Tavily's codes.

Clients handle Tavily's statuses already (tavily-python raises
`UsageLimitExceededError` for 429, `ForbiddenError` for 432, `BadRequestError`
for 400), so the gateway answers in those terms. Every body is Tavily's
`{"detail": {"error": message}}`, with the model-facing message of the refusal:
never operator text (paths, commands, diagnoses), never a key.

The table is read top to bottom and the first row that matches wins. A row
matches an exception class, or a refusal's `reason`, so a refusal class
added elsewhere is answered by its reason without a change here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from searchfuse.errors import (
    BadRequest,
    ConfigError,
    CooldownActive,
    NoKeyAvailable,
    RateLimited,
    SearchFailed,
    SearchRefused,
    StoreUnavailable,
    Throttled,
    TurnLimitReached,
)

__all__ = ["ERRORS", "MESSAGES", "Answer", "Row", "answer_for"]

#: Texts of the answers the gateway gives on its own account (not a refusal's).
MESSAGES: dict[int, str] = {
    # Tavily's own texts, so clients that match on them keep working.
    400: "Bad request.",
    401: "Unauthorized: missing or invalid API key.",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Request body too large: at most {limit} bytes are accepted.",
    500: (
        "Search failed: the search gateway hit an internal error. Do not retry now; answer "
        "from what you already have and tell the user that web search failed."
    ),
    502: (
        "Search failed: the search backend sent an answer that could not be used. Do not "
        "retry now; answer from what you already have and tell the user that web search failed."
    ),
    503: (
        "Search refused: the search gateway cannot serve right now. Do not retry at once; "
        "answer from what you already have, or tell the user that web search is unavailable."
    ),
    504: (
        "Search failed: the search took longer than the gateway allows. "
        "Do not retry the same request at once; answer from what you already have or ask "
        "for less (fewer results, a smaller crawl)."
    ),
}
BUSY = (
    "Search refused: the search gateway is serving as many requests as it can. Wait a "
    "moment and try once more, or answer from what you already have."
)


@dataclass(frozen=True)
class Answer:
    """One error answer: status, the body's message, and `Retry-After` seconds (or none)."""

    status: int
    message: str
    retry_after: float | None = None

    @property
    def headers(self) -> dict[str, str]:
        """`Retry-After` in whole seconds (at least 1), when the answer has one."""
        if self.retry_after is None or not math.isfinite(self.retry_after):
            return {}
        return {"Retry-After": str(max(1, math.ceil(self.retry_after)))}

    @property
    def body(self) -> dict[str, dict[str, str]]:
        """Tavily's error shape."""
        return {"detail": {"error": self.message}}


@dataclass(frozen=True)
class Row:
    """One row of `ERRORS`: what it matches, and how it is answered.

    `match` is an exception class, or a refusal's `reason` (a string);
    `when` narrows it further. `own_message`: answer the exception's own
    model-facing message, else the status's text from `MESSAGES`.
    `retry_after`: send `Retry-After` when the exception carries it.
    """

    match: type[BaseException] | str
    status: int
    retry_after: bool = False
    own_message: bool = True
    when: Callable[[BaseException], bool] | None = None

    def matches(self, exc: BaseException) -> bool:
        """Whether this row answers `exc`."""
        if isinstance(self.match, str):
            hit = isinstance(exc, SearchRefused) and exc.reason == self.match
        else:
            hit = isinstance(exc, self.match)
        return hit and (self.when is None or self.when(exc))


def _exhausted(exc: BaseException) -> bool:
    diagnosis = getattr(exc, "diagnosis", None)
    return diagnosis is not None and diagnosis.verdict == "exhausted"


def _timed_out(exc: BaseException) -> bool:
    return getattr(exc, "timed_out", False) is True


#: Exceptions the router and the guard raise, and the answers they get, first match wins.
ERRORS: tuple[Row, ...] = (
    # A spend budget is used up (BudgetExhausted): Tavily's "limit exceeded".
    Row("budget", 432, retry_after=True),
    # A turn's searches are spent: 429, and no Retry-After (the next turn may search).
    Row(TurnLimitReached, 429),
    Row(RateLimited, 429, retry_after=True),
    Row(CooldownActive, 429, retry_after=True),
    Row(Throttled, 429, retry_after=True),
    # Every key's quota is spent: what Tavily answers for one spent key.
    Row(NoKeyAvailable, 432, when=_exhausted),
    # The call's deadline passed, or no key answered in time.
    Row(NoKeyAvailable, 504, own_message=False, when=_timed_out),
    Row(NoKeyAvailable, 503, retry_after=True),
    Row(BadRequest, 400),
    # The operator's problems (a store down, a misconfigured address): the client
    # gets the short 503; the detail goes to the gateway's log.
    Row(StoreUnavailable, 503, own_message=False),
    Row(ConfigError, 503, own_message=False),
    Row(SearchRefused, 503, retry_after=True),
    Row(SearchFailed, 502, own_message=False),
)


def answer_for(exc: BaseException) -> Answer:
    """The answer for `exc`: its row's status and message; 500 for anything unforeseen."""
    for row in ERRORS:
        if row.matches(exc):
            if row.own_message:
                message = exc.message if isinstance(exc, SearchRefused) else str(exc)
            else:
                message = MESSAGES[row.status]
            seconds = getattr(exc, "retry_after", None) if row.retry_after else None
            if isinstance(seconds, bool) or not isinstance(seconds, int | float):
                seconds = None
            return Answer(row.status, message, seconds)
    return Answer(500, MESSAGES[500])
