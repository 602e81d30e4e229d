"""A simulated Brave Search API, written from Brave's public documentation.

What it follows: Brave's web search reference (`GET /res/v1/web/search` with
the key in `X-Subscription-Token`; `q`, `count` up to 20, `freshness` as
`pd`/`pw`/`pm`/`py` or `YYYY-MM-DDtoYYYY-MM-DD`; results under
`web.results[]` with `title`, `url`, `description`, its matches marked up
with `<strong>`), its response headers (every answer carries
`X-RateLimit-Limit`, `-Policy`, `-Remaining` and `-Reset`, the per-second
window first and the month second: `1, 2000`; only successful requests are
counted), and its error body `{"type": "ErrorResponse", "error": {"id",
"status", "code", "detail", "meta"}, "time"}`: 422 with
`SUBSCRIPTION_TOKEN_INVALID` for an unknown key, 422 `VALIDATION` for a bad
parameter, 429 `RATE_LIMITED` over the per-second rate.

Uncertain: the answer once the month's quota is spent. Here it is a 429 whose
code is `QUOTA_LIMITED` and whose headers say 0 left in the month. A new
key gets the free plan (1 request a second, 2,000 a month); `add_key` takes
any other.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from typing import ClassVar

import httpx

from searchfuse.testing._keyed import KeyedSimulator, _Key, pages, site_operators
from searchfuse.testing._simulator import Json

__all__ = ["FakeBrave"]

PATH = "/res/v1/web/search"
#: The month's window in seconds, as `X-RateLimit-Policy` states it.
MONTH = 2_592_000
DEFAULT_COUNT = 20
MOST_COUNT = 20
FRESHNESS = re.compile(r"p[dwmy]|\d{4}-\d{2}-\d{2}to\d{4}-\d{2}-\d{2}")
DETAILS = {
    "SUBSCRIPTION_TOKEN_INVALID": "The provided subscription token is invalid.",
    "RATE_LIMITED": "Request rate limit exceeded for plan.",
    "QUOTA_LIMITED": "Request quota limit exceeded for plan.",
    "VALIDATION": "Unable to validate request parameter(s).",
}
CODES = {401: "SUBSCRIPTION_TOKEN_INVALID", 422: "VALIDATION", 429: "RATE_LIMITED"}


class FakeBrave(KeyedSimulator):
    """A simulated Brave Search for tests: `GET /res/v1/web/search`, keys in
    `X-Subscription-Token`, a per-second rate and a monthly quota in every answer's headers.

    Args:
        keys: keys to accept, each on the free plan: 1 request a second and
            2,000 a month (`add_key(key, rate=20, balance=20_000_000)` for another).
        clock: zero-argument callable returning epoch seconds; default searchfuse's clock.
        sleeper: how an in-process slow answer waits.
    """

    default_url: ClassVar[str] = "https://api.search.brave.com"
    search_path: ClassVar[str] = PATH
    header = "x-subscription-token"
    default_rate = 1
    default_window = 1.0
    default_balance = 2000.0

    def __init__(
        self,
        keys: Iterable[str] = (),
        *,
        clock: Callable[[], float] | None = None,
        sleeper: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(keys, clock=clock, sleeper=sleeper)
        #: When the month's window began (the quota's reset counts from it).
        self.month_started = self._clock()

    def reset_month(self) -> None:
        """Start a new month: every key's quota is whole again."""
        with self._lock:
            self.month_started = self._clock()
            for state in self._keys.values():
                state.spent = 0.0

    def _error(
        self,
        status: int,
        detail: str | None = None,
        retry_after: float | str | None = None,
        code: str | None = None,
    ) -> httpx.Response:
        code = code or CODES.get(status, "ERROR")
        body = {
            "type": "ErrorResponse",
            "error": {
                "id": str(uuid.uuid4()),
                "status": status,
                "code": code,
                "detail": detail or DETAILS.get(code, "Error."),
                "meta": {"component": "rate_limiter" if status == 429 else "api"},
            },
            "time": int(self._clock()),
        }
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        return httpx.Response(status, json=body, headers=headers)

    def _process(
        self, request: httpx.Request, key: str | None, raw: bytes, now: float
    ) -> tuple[httpx.Response, float]:
        if request.url.path != PATH:
            return self._error(404, "Not found."), 0
        if request.method.upper() != "GET":
            return self._error(405, "Method not allowed."), 0
        state = self._known(key)
        if state is None:
            return self._error(422, code="SUBSCRIPTION_TOKEN_INVALID"), 0
        params = dict(request.url.params)
        problem = _problem(params)
        if problem is not None:
            return self._with_limits(self._error(422, problem), state, now), 0
        if not self._affords(state, 1.0):
            return self._with_limits(self._error(429, code="QUOTA_LIMITED"), state, now), 0
        if self._admit(state, now) is not None:
            return self._with_limits(self._error(429), state, now), 0
        state.spent += 1.0
        return self._with_limits(httpx.Response(200, json=_answer(params)), state, now), 1.0

    def _with_limits(self, response: httpx.Response, state: _Key, now: float) -> httpx.Response:
        """`response` with Brave's four `X-RateLimit-*` headers for the key."""
        while state.times and state.times[0] <= now - state.window:
            state.times.popleft()
        second_left = max(state.rate - len(state.times), 0)
        second_reset = (
            max(int(state.times[0] + state.window - now + 0.999), 1) if state.times else 1
        )
        month = int(state.balance) if state.balance is not None else 0
        month_left = max(month - int(state.spent), 0)
        month_reset = max(int(self.month_started + MONTH - now), 0)
        response.headers["X-RateLimit-Limit"] = f"{state.rate}, {month}"
        response.headers["X-RateLimit-Policy"] = (
            f"{state.rate};w={int(state.window)}, {month};w={MONTH}"
        )
        response.headers["X-RateLimit-Remaining"] = f"{second_left}, {month_left}"
        response.headers["X-RateLimit-Reset"] = f"{second_reset}, {month_reset}"
        return response


def _problem(params: dict[str, str]) -> str | None:
    """What Brave's validation says of the parameters (`None`: they pass)."""
    query = params.get("q", "").strip()
    if not query or len(query) > 400:
        return "q is required and at most 400 characters."
    count = params.get("count")
    if count is not None and not (count.isdigit() and 1 <= int(count) <= MOST_COUNT):
        return f"count must be a whole number from 1 to {MOST_COUNT}."
    freshness = params.get("freshness")
    if freshness is not None and not FRESHNESS.fullmatch(freshness):
        return "freshness must be pd, pw, pm, py or a range YYYY-MM-DDtoYYYY-MM-DD."
    return None


def _answer(params: dict[str, str]) -> Json:
    query = params["q"]
    include, exclude = site_operators(query)
    count = int(params.get("count", DEFAULT_COUNT))
    results = [
        {
            "type": "search_result",
            "title": page.title,
            "url": page.url,
            "description": page.text.replace("Simulated", "<strong>Simulated</strong>", 1),
            "age": "1 day ago" if params.get("freshness") else None,
        }
        for page in pages(query, count, include, exclude)
    ]
    return {
        "type": "search",
        "query": {"original": query},
        "web": {"type": "search", "results": results},
    }
