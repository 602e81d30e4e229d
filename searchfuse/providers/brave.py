"""Brave Search: its published facts (request, reaction table, rate headers), written once.

Sources: Brave's quick start and web search reference,
https://api-dashboard.search.brave.com/documentation/quickstart (`GET
/res/v1/web/search` with the key in `X-Subscription-Token`; `q`, `count`
up to 20, `freshness` as `pd`/`pw`/`pm`/`py` or `YYYY-MM-DDtoYYYY-MM-DD`;
results under `web.results[]` with `title`, `url`, `description`), and its
rate-limiting guide,
https://api-dashboard.search.brave.com/documentation/guides/rate-limiting
(every answer carries `X-RateLimit-Limit`, `-Policy`, `-Remaining` and
`-Reset`, one figure per window, the per-second window first and the month
second, e.g. `1, 15000`; a month limit of 0 means unlimited; over the limit
the answer is 429).

How searchfuse reads them: the per-second figures set the key's pace and the
month's figures its quota (`observe`); a month remaining of 0 makes the key
exhausted until the month's reset (`X-RateLimit-Reset`'s second figure: Brave's
month is the key's own cycle, not the calendar's), without waiting for a 402 (the status
Brave uses for a plan out of quota). Its error body is `{"type":
"ErrorResponse", "error": {"status", "code", "detail", "meta"}}`; the code
says what the status does not: an unknown key answers 422
`SUBSCRIPTION_TOKEN_INVALID` (read as a rejected key, not a bad request),
and a spent month's 429 carries `QUOTA_LIMITED`. Uncertain: whether a spent
month answers 429 or 402 (both are read as out of quota) and whether a 429
carries `Retry-After` (read when sent, else the per-second reset). Brave
offers no free request to check a key, but every answer's headers are free
figures.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from searchfuse._answers import Outcome
from searchfuse.errors import BadRequest
from searchfuse.providers._base import Answer, Classified, Figures, Observed, Rate, Request
from searchfuse.providers._common import (
    Params,
    Searcher,
    classify,
    entries,
    result,
    site_query,
    tavily_shape,
)

__all__ = ["BRAVE", "DEFAULT_BASE_URL", "DEFAULT_RATE", "MAX_RESULTS", "STATUS", "Brave"]

DEFAULT_BASE_URL = "https://api.search.brave.com"
#: The web search path behind the router's `/search`.
PATH = "/res/v1/web/search"
#: One request a second: the free plan's pace, until an answer's headers say more.
DEFAULT_RATE = Rate(1, 1.0)
#: `count` Brave accepts.
MAX_RESULTS = 20
#: Brave's own status: 402 means the plan's quota is spent.
STATUS = {402: Outcome.EXHAUSTED}
#: Brave's error codes (`error.code`) that say more than their status: an unknown
#: key is a 422, like a bad parameter; a spent month is a 429, like going too fast.
CODES = {"SUBSCRIPTION_TOKEN_INVALID": Outcome.AUTH, "QUOTA_LIMITED": Outcome.EXHAUSTED}
#: Tavily's `time_range` as Brave's `freshness`.
FRESHNESS = {"day": "pd", "week": "pw", "month": "pm", "year": "py"}
#: The month's window in seconds when `X-RateLimit-Policy` does not say.
MONTH = 30 * 86400.0
#: Brave's longest window is its month: a window or a reset beyond this is not
#: believed (a key parked for centuries, or a date past any clock, is a server's slip).
LONGEST_WINDOW = 32 * 86400.0
#: Digits a figure may have: more is no count of requests.
MAX_DIGITS = 15
_TAG = re.compile(r"<[^>]+>")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _figures(value: str | None) -> list[float]:
    """`"1, 15000"` as numbers (an unreadable list counts as absent)."""
    if not value:
        return []
    numbers = []
    for part in value.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()) or len(part) > MAX_DIGITS:
            return []
        numbers.append(float(part))
    return numbers


def _code(answer: Answer) -> str | None:
    """Brave's error code (`{"error": {"code": ...}}`), if the body has one."""
    try:
        data = answer.json()
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def _windows(policy: str | None, count: int) -> list[float]:
    """Each window's length in seconds, from `X-RateLimit-Policy` (`1;w=1, 15000;w=2592000`)."""
    found = re.findall(r"w=(\d+)", policy or "", re.ASCII)
    # A window of 0 is no pace; one beyond a month is no window of Brave's.
    if len(found) == count and all(0 < int(w) <= LONGEST_WINDOW for w in found):
        return [float(w) for w in found]
    return [1.0, MONTH][:count] if count <= 2 else []


class Brave(Searcher):
    """Brave Search as the router drives it: `X-Subscription-Token`, `GET` queries.

    Args:
        rate: the pace a key keeps until an answer's headers give Brave's own.
    """

    name = "brave"
    title = "Brave"
    default_base_url = DEFAULT_BASE_URL
    base_url_env = "BRAVE_BASE_URL"
    unit = "requests"

    def __init__(self, *, rate: Rate = DEFAULT_RATE) -> None:
        self._rate = rate

    def headers(self, key: str) -> dict[str, str]:
        """`X-Subscription-Token: <key>`: never the key in the URL."""
        return {"X-Subscription-Token": key, "Accept": "application/json"}

    def check(self, endpoint: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Tavily's parameters as Brave's query parameters; an
        [`Unsupported`][searchfuse.errors.Unsupported] for what Brave cannot express."""
        params = Params(self.title, endpoint, body)
        include, exclude = params.domains()
        # Brave reads Google's operators in the query: the domains stay honoured.
        sent = {"q": site_query(params.query, include, exclude)}
        count = params.count("max_results", 1, MAX_RESULTS)
        if count is not None:
            sent["count"] = str(count)
        freshness = self._freshness(params)
        if freshness is not None:
            sent["freshness"] = freshness
        topic = params.take("topic")
        if topic not in (None, "general"):
            raise params.refuse("topic", topic, "Brave serves news and other topics elsewhere")
        params.finish()
        return sent

    def _freshness(self, params: Params) -> str | None:
        time_range = params.time_range()
        start, end = params.take("start_date"), params.take("end_date")
        if time_range is not None and (start or end):
            raise BadRequest("give time_range or start_date/end_date, not both", sent=False)
        if time_range is not None:
            return FRESHNESS[time_range]
        if start is None and end is None:
            return None
        days = []
        for name, value in (("start_date", start), ("end_date", end)):
            if not (isinstance(value, str) and _DATE.fullmatch(value)):
                raise params.refuse(
                    name, value, "Brave needs both dates, each as YYYY-MM-DD, for a range"
                )
            try:
                days.append(dt.date.fromisoformat(value))
            except ValueError:
                raise BadRequest(f"{name} is not a date: {value!r}", sent=False) from None
        if days[0] > days[1]:
            raise BadRequest(f"start_date {start} is after end_date {end}", sent=False)
        return f"{start}to{end}"

    def build(self, endpoint: str, body: Mapping[str, Any]) -> Request:
        """`GET /res/v1/web/search` with the checked parameters."""
        return Request("GET", PATH, params=body)

    def classify(self, answer: Answer, now: float) -> Classified:
        """Brave's reaction table: HTTP's meaning, 402 out of quota, then its error
        codes (`CODES`: an unknown key answers 422); a 429 with the month's remainder
        at 0 is out of quota too. Out of quota lasts until the month's reset that the
        headers give (`until`), Brave's own cycle rather than the calendar's."""
        row = classify(answer, now, STATUS, ("error", "detail"), ("error", "code"), ("message",))
        if row.outcome is Outcome.OK:
            return row
        coded = CODES.get(_code(answer) or "")
        if coded is Outcome.AUTH:
            return replace(row, outcome=coded, retry_after=None)
        seen = self.observe(answer, now)
        until = seen.exhausted_until if seen is not None else None
        if row.outcome is Outcome.EXHAUSTED:
            return replace(row, until=until)
        if row.outcome is not Outcome.RATE_LIMITED:
            return row
        if until is not None:
            return replace(row, outcome=Outcome.EXHAUSTED, retry_after=until - now, until=until)
        if coded is Outcome.EXHAUSTED:
            return replace(row, outcome=coded)
        if row.retry_after is None:
            reset = _figures(answer.headers.get("x-ratelimit-reset"))
            if reset:
                return replace(row, retry_after=max(reset[0], 1.0))
        return row

    def observe(self, answer: Answer, now: float) -> Observed | None:
        """The per-second pace and the month's quota from the `X-RateLimit-*` headers."""
        headers = answer.headers
        limit = _figures(headers.get("x-ratelimit-limit"))
        remaining = _figures(headers.get("x-ratelimit-remaining"))
        reset = _figures(headers.get("x-ratelimit-reset"))
        if not limit or len(remaining) != len(limit):
            return None
        windows = _windows(headers.get("x-ratelimit-policy"), len(limit))
        if not windows:
            return None
        rate = Rate(int(limit[0]), windows[0]) if limit[0] >= 1 else None
        if len(limit) < 2 or limit[-1] == 0:  # no month figures, or an unlimited month
            return Observed(rate=rate)
        month_limit, month_left = limit[-1], remaining[-1]
        figures = Figures(key_limit=month_limit, key_usage=max(month_limit - month_left, 0.0))
        exhausted_until = None
        if month_left <= 0:
            wait = reset[-1] if len(reset) == len(limit) else windows[-1]
            exhausted_until = now + min(wait, windows[-1])  # a reset ends within its window
        return Observed(rate=rate, figures=figures, exhausted_until=exhausted_until)

    def normalize(
        self, endpoint: str, data: dict[str, Any], body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Brave's web results as Tavily's: `description` (its markup removed) is the content."""
        items = []
        for entry in entries(data, "web", "results"):
            if not isinstance(entry, dict):
                continue
            text = entry.get("description")
            plain = html.unescape(_TAG.sub("", text)) if isinstance(text, str) else None
            items.append(result(entry.get("title"), entry.get("url"), plain))
        query = (body or {}).get("q")
        return tavily_shape(query if isinstance(query, str) else "", items, data)

    def cost(self, endpoint: str, body: Mapping[str, Any], data: dict[str, Any] | None) -> float:
        """One request: Brave bills per request, whatever the count."""
        return 1.0


#: The Brave provider with Brave's published figures.
BRAVE = Brave()
