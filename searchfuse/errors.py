"""Every exception searchfuse raises, in one place.

The hierarchy:
    ```text
    SearchFuseError
    ├── ConfigError            a config file or environment that cannot be used
    ├── SearchRefused          no search happened (or it stopped): tell the model why
    │   ├── TurnLimitReached   this assistant turn already spent its searches
    │   ├── CooldownActive     a cooldown is running; nothing was sent
    │   ├── RateLimited        the backend answered 429; the fuse is tripped
    │   ├── Throttled          pacing: sending now would exceed a key's rate; nothing was sent
    │   ├── BudgetExhausted    a spend budget is used up; nothing was sent
    │   └── NoKeyAvailable     no key can serve right now; carries the diagnosis
    └── SearchFailed           the backend answered with an error the caller must see
        ├── BadRequest         400: the request is wrong, not the key
        │   └── Unsupported    a parameter this provider cannot honour; nothing was sent
        ├── ResponseTooLarge   the answer was larger than any search result; it was not read
        └── StoreUnavailable   the state store cannot be reached or stayed locked
    ```

Every [`SearchRefused`][searchfuse.errors.SearchRefused] carries `reason` (a short
machine-readable code), `retry_after` (seconds until the caller may try again, or `None`) and
`message`, a sentence written for a language model: what happened and what
to do next. `str(exc)` is that message.

No exception text ever contains a raw API key: keys appear masked
(`tvly-dev-…a1b2`) or as a fingerprint.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from searchfuse._format import amount, duration
from searchfuse._secrets import redact_userinfo

if TYPE_CHECKING:
    from searchfuse._spend import Budget
    from searchfuse.router.diagnose import Diagnosis

__all__ = [
    "BadRequest",
    "BudgetExhausted",
    "ConfigError",
    "CooldownActive",
    "NoKeyAvailable",
    "RateLimited",
    "ResponseTooLarge",
    "SearchFailed",
    "SearchFuseError",
    "SearchRefused",
    "StoreUnavailable",
    "Throttled",
    "TurnLimitReached",
    "Unsupported",
]


class SearchFuseError(Exception):
    """Base class of every searchfuse error."""


class ConfigError(SearchFuseError):
    """A config file, or the environment, cannot be used as it is.

    The message names the file (or variable), the field and the fix.
    """

    def __init__(self, source: str, field: str | None, problem: str, fix: str) -> None:
        # A refused value is quoted: never with the password of a URL in it.
        source, problem, fix = (redact_userinfo(t) for t in (source, problem, fix))
        self.source = source
        self.field = field
        self.problem = problem
        self.fix = fix
        where = f"{source}: field {field!r}" if field else source
        super().__init__(f"{where}: {problem}. Fix: {fix}")


def _duration(value: float, *, more: bool = False) -> str:
    """`"1 second"`, `"45 seconds"` (`more`: `"1 more second"`), for people and models.

    Rounded up to whole seconds, at least one, so "0 seconds" never says "now" too early.
    """
    n = max(1, math.ceil(value)) if math.isfinite(value) else 1
    unit = "second" if n == 1 else "seconds"
    return f"{n} more {unit}" if more else f"{n} {unit}"


class SearchRefused(SearchFuseError):
    """No search happened, or the search was stopped. `message` tells the model why."""

    reason: str = "refused"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        self.message = message
        self.retry_after = retry_after
        super().__init__(message)

    def to_dict(self) -> dict[str, Any]:
        """The refusal as JSON-friendly data (what an agent framework returns as the result)."""
        return {
            "error": self.reason,
            "message": self.message,
            "retry_after": self.retry_after,
        }


class TurnLimitReached(SearchRefused):
    """This assistant turn already made its allowed searches."""

    reason = "turn_limit"

    def __init__(
        self, per_turn: int = 1, message: str | None = None, *, failed: bool = False
    ) -> None:
        self.per_turn = per_turn
        #: Every search this turn spent failed (the backend answered with an error).
        self.failed = failed
        if message is None and per_turn == 0:
            message = (
                "Search refused: web search is switched off for this tool; no search may "
                "reach the backend. Answer from what you already have or from local data."
            )
        plural = "search" if per_turn == 1 else "searches"
        if message is None and failed:
            message = (
                f"Search refused: this reply already used its {per_turn} web {plural}, and "
                f"{'it' if per_turn == 1 else 'each'} failed: no search result came back. "
                "Do not search again in this reply. "
                "Answer from what you already have or from local data, or tell the user "
                "that the web search failed; search again in your next reply if still needed."
            )
        if message is None:
            message = (
                f"Search refused: this reply already used its {per_turn} web {plural}. "
                "Do not search again in this reply. Use the result of that search (it "
                "comes back in this reply's tool results), or combine what you still "
                "need into one query for your next reply, or answer from local data."
            )
        super().__init__(message, retry_after=None)


class CooldownActive(SearchRefused):
    """A cooldown is running: refused locally, no request was sent."""

    reason = "cooldown"

    def __init__(self, retry_after: float, cause: str = "rate limit", message: str | None = None):
        self.cause = cause
        if message is None:
            message = (
                f"Search refused: the search backend is cooling down after a {cause} for "
                f"{_duration(retry_after, more=True)}. Do not retry now. Answer from what "
                "you already have or from local data, or tell the user that web search is "
                f"paused for {_duration(retry_after)} and ask whether to wait."
            )
        super().__init__(message, retry_after=retry_after)


class RateLimited(SearchRefused):
    """The backend answered HTTP 429. The fuse is tripped for `retry_after` seconds."""

    reason = "rate_limited"
    status_code = 429

    def __init__(
        self,
        retry_after: float,
        key: str | None = None,
        message: str | None = None,
    ) -> None:
        self.key = key
        if message is None:
            message = (
                "Search stopped: the search backend answered 429 (too many requests). "
                f"It is cooling down for {_duration(retry_after)}. Do not retry and "
                "do not switch to another search tool. Use the results you already have, "
                f"or tell the user that web search is paused for {_duration(retry_after)} "
                "and ask whether to wait."
            )
        super().__init__(message, retry_after=retry_after)


class Throttled(SearchRefused):
    """Pacing refused the search: every key's request rate is used up for now.

    Nothing was sent. `retry_after` is the time until a key has room again.
    """

    reason = "paced"

    def __init__(self, retry_after: float, message: str | None = None) -> None:
        if message is None:
            message = (
                "Search refused: every search key is at its request rate limit, so the "
                f"search was not sent. A key has room again in {_duration(retry_after)}. "
                "Do not retry at once: use the results you already have, combine "
                "what you still need into one query, or wait and try once more."
            )
        super().__init__(message, retry_after=retry_after)


class BudgetExhausted(SearchRefused):
    """A spend budget is used up: nothing was sent.

    `budget` is the [`Budget`][searchfuse.Budget] that refused, `used` and
    `limit` are in its unit, `retry_after` the seconds until its period
    resets (`None` for a budget without a period).
    """

    reason = "budget"
    #: Nothing reached the backend: a guard spends no turn budget on it.
    sent = False

    def __init__(
        self,
        budget: Budget,
        used: float,
        retry_after: float | None = None,
        message: str | None = None,
    ) -> None:
        self.budget = budget
        self.used = used
        self.limit = budget.limit
        if retry_after is not None and not math.isfinite(retry_after):
            retry_after = None
        if message is None:
            message = _budget_message(budget, retry_after)
        super().__init__(message, retry_after=retry_after)


_WHOSE = {
    "conversation": ("this conversation has", "its", " in this conversation"),
    "user": ("this user has", "their", " for this user"),
    "router": ("this search service has", "its", ""),
}
_AMOUNT = {"searches": "web searches", "credits": "search credits", "usd": "USD of web search"}


def _budget_message(budget: Budget, retry_after: float | None) -> str:
    """`"Search refused: this conversation has used its 10 web searches..."`."""
    who, its, where = _WHOSE[budget.per]
    limit = amount(budget.limit)
    if budget.unit == "usd":  # dollars and cents: 20.00, 0.50; a smaller price as it is
        whole, _, cents = limit.partition(".")
        limit = f"{whole}.{cents.ljust(2, '0')}"
    when = {None: "", "day": " for today", "month": " for this month"}[budget.period]
    text = (
        f"Search refused: {who} used {its} {limit} {_AMOUNT[budget.unit]}{when}, "
        "so no search was sent. "
    )
    if retry_after is None:
        return text + (
            f"Do not search again{where}: answer from what you have, and tell the user "
            "if the answer is incomplete because the search budget is spent."
        )
    return text + (
        f"The budget resets in {duration(retry_after)}. Do not retry before then: answer "
        "from what you have, and tell the user if the answer is incomplete because the "
        "search budget is spent."
    )


class NoKeyAvailable(SearchRefused):
    """No API key can serve right now.

    `reasons` maps each masked key to a short reason; `diagnosis` holds the
    verification-order diagnosis (local steps only) when the router made one.
    `timed_out` is True when every key the call tried did not answer in time,
    or the call's deadline passed (the tavily-python drop-in raises it as
    tavily-python's `TimeoutError` then).
    """

    reason = "no_key"

    def __init__(
        self,
        reasons: dict[str, str] | None = None,
        *,
        retry_after: float | None = None,
        diagnosis: Diagnosis | None = None,
        message: str | None = None,
        timed_out: bool = False,
    ) -> None:
        self.reasons = dict(reasons or {})
        self.diagnosis = diagnosis
        self.timed_out = timed_out
        found = getattr(diagnosis, "verdict", None)
        verdict = None if found is None else str(found)
        if verdict in _LASTING:
            # Waiting does not fix these: no wait is offered.
            retry_after = None
        if message is None:
            # The model gets a short refusal; the per-key reasons and the
            # diagnosis (file paths, CLI commands) are for people: `reasons`,
            # `diagnosis`, and the guard's log.
            message = "Search refused: " + (
                _LASTING.get(verdict or "") or "no API key can serve right now."
            )
            if retry_after is not None:
                message += (
                    f" Web search is available again in {_duration(retry_after)}; "
                    "do not retry now. Tell the user and ask whether to wait."
                )
            elif verdict not in _LASTING:
                message += (
                    " Do not retry. Answer from what you already have or from local data, "
                    "and tell the user that web search is unavailable."
                )
        super().__init__(message, retry_after=retry_after)


#: What the model is told when no key can serve for a reason time does not cure.
_LASTING = {
    "auth": (
        "the search service rejected every API key, so no search can be sent. "
        "Waiting will not fix this and retrying will not either. Answer from what you "
        "already have or from local data, and tell the user that a person must check "
        "the search API keys."
    ),
    "config": (
        "no search API key is enabled in the configuration, so no search can be sent. "
        "Retrying will not help. Answer from what you already have or from local data, "
        "and tell the user that a person must add or enable a search key (every key is "
        "disabled or none is configured)."
    ),
    "exhausted": (
        "every search API key is out of credits, so no search can be sent. Searching "
        "again will not help. Answer from what you already have or from local data, and "
        "tell the user that the search credits are used up."
    ),
}


class SearchFailed(SearchFuseError):
    """The backend answered with an error the caller has to see.

    `status_code` is the HTTP status, or `None` for a timeout or connection
    error; `detail` is Tavily's error text (keys removed).
    """

    def __init__(self, message: str, *, status_code: int | None = None, detail: str = ""):
        self.status_code = status_code
        self.detail = detail
        super().__init__(message)


class BadRequest(SearchFailed):
    """The request is wrong, not the key: the provider (`provider`, Tavily unless
    named) answered 400, or (`sent=False`) searchfuse refused it before sending
    it (an empty or overlong query, parameters JSON cannot carry). No key is
    penalised; `status_code` is the provider's status when it answered, `None`
    when nothing was sent.
    """

    def __init__(
        self, detail: str = "", *, sent: bool = True, status: int = 400, provider: str = "Tavily"
    ) -> None:
        self.sent = sent
        if sent:
            text = (
                f"{provider} rejected the request ({_status_text(status)}): "
                f"{detail or 'no detail given'}"
            )
        else:
            text = f"the request was not sent: {detail or 'it is malformed'}"
        # A detail that ends its own sentence ("... a list of URLs.") gets no second stop.
        super().__init__(
            f"{text.rstrip('.')}. Fix the search parameters; retrying the same request will "
            "fail again.",
            status_code=status if sent else None,
            detail=detail,
        )


class Unsupported(BadRequest):
    """A parameter `provider` cannot honour: the request was not sent to it.

    Raised by a provider's `check` before any key is granted, rather than
    sending the search without the parameter (a search that silently ignores
    `include_domains` or `time_range` answers another question). A chain of
    providers passes such a provider over for the call; alone, the caller
    sees this error. `provider` and `parameter` name what could not be sent.
    """

    def __init__(self, provider: str, parameter: str, why: str) -> None:
        self.provider = provider
        self.parameter = parameter
        super().__init__(f"{provider} cannot honour {parameter}: {why}", sent=False)


def _status_text(status: int) -> str:
    """`"400 Bad Request"`; the bare number for a status HTTP does not name."""
    import http

    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


class ResponseTooLarge(SearchFailed):
    """The answer was larger than `limit` bytes, which no search result is; it was
    not read (a wrong `base_url` is the usual cause)."""

    def __init__(self, status_code: int, limit: int) -> None:
        super().__init__(
            f"the answer to this search was larger than {limit // (1024 * 1024)} MB and was "
            "not read; that is not what Tavily sends (check base_url / TAVILY_BASE_URL)",
            status_code=status_code,
            detail="response too large",
        )


class StoreUnavailable(SearchFailed):
    """The router's state store cannot be used right now: Redis unreachable, or a
    lock held longer than the store's lock timeout. Nothing was sent upstream.

    `store` names the store (a Redis URL without its password, or a file name).
    """

    def __init__(self, store: str, problem: str, fix: str) -> None:
        self.store = store
        self.problem = problem
        self.fix = fix
        super().__init__(f"state store {store}: {problem}. {fix}")
