"""Exa: its published facts (request, reaction table, prices, rate), written once.

Source: Exa's API reference, https://exa.ai/docs/reference/search (`POST
/search`, the key in `x-api-key`, `query`, `numResults`, `includeDomains`,
`excludeDomains`, `startPublishedDate` / `endPublishedDate`, `category`,
`type`, `contents`), https://exa.ai/docs/admin/error-codes (errors as
`{"requestId", "error", "tag"}`; 400 bad request, 401 invalid key, 402
credits run out, 429 rate limit, 5xx), https://exa.ai/docs/reference/pricing
(pay as you go: $7 per 1,000 searches of up to 10 results, more results
billed on top) and Exa's rate-limit page (10 searches per second per key by
default).

Uncertain, so configurable on [`Exa`][searchfuse.providers.exa.Exa]: the
price of each result beyond the tenth (`extra_result_price`; the pricing page
gives none, only that they are billed, and the answer's `costDollars.total`
settles every search anyway), and whether a 429 carries `Retry-After` (read
when sent, else the router's fallback cooldown). Exa publishes no free way
to check a key: every probe costs a search.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from searchfuse import _clock
from searchfuse._answers import Outcome
from searchfuse._wire import figure
from searchfuse.errors import BadRequest
from searchfuse.providers._base import Answer, Classified, Rate, Request
from searchfuse.providers._common import (
    SEARCH,
    TIME_RANGE_DAYS,
    Params,
    Searcher,
    classify,
    encoded,
    entries,
    result,
    since,
    tavily_shape,
)
from searchfuse.providers._prices import MAX_STATED_USD

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_RATE",
    "EXA",
    "EXTRA_RESULT_PRICE",
    "INCLUDED_RESULTS",
    "MAX_RESULTS",
    "SEARCH_PRICE",
    "STATUS",
    "Exa",
]

DEFAULT_BASE_URL = "https://api.exa.ai"
#: Searches per second per key, as Exa publishes them for `/search`.
DEFAULT_RATE = Rate(10, 1.0)
#: `numResults` Exa accepts.
MAX_RESULTS = 100
#: USD per search of up to `INCLUDED_RESULTS` results ($7 per 1,000).
SEARCH_PRICE = 0.007
INCLUDED_RESULTS = 10
#: USD per result beyond the tenth: Exa bills them without a published figure
#: on the page cited above; an estimate until the answer's `costDollars` says.
EXTRA_RESULT_PRICE = 0.001
#: No search costs more than this many dollars; a larger `costDollars` is not believed
#: (by the key's counters here, and by the budgets in `_prices.stated_usd`).
MAX_SEARCH_DOLLARS = MAX_STATED_USD
#: Exa's own status: 402 means the account's credits (or the key's budget) ran out.
STATUS = {402: Outcome.EXHAUSTED}
#: Characters of page text asked for as a result's `content` (its snippet).
SNIPPET_CHARACTERS = 1000
#: Tavily's `search_depth` in Exa's `type`: "basic" is Exa's default (`auto`).
_TYPES = {"basic": None, "fast": "fast"}


def _date(name: str, value: Any, params: Params) -> str:
    """Tavily's `YYYY-MM-DD` as the ISO 8601 instant Exa reads (start of that day, UTC)."""
    try:
        day = dt.date.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        day = None
    if day is None:
        raise BadRequest(f"{name} must be a date as YYYY-MM-DD, not {value!r}", sent=False)
    return f"{day.isoformat()}T00:00:00.000Z"


class Exa(Searcher):
    """Exa as the router drives it: `x-api-key`, JSON bodies, prices in US dollars.

    Args:
        search_price: USD per search of up to ten results.
        extra_result_price: USD per result beyond the tenth (an estimate: see
            the module docstring).
        rate: the requests per window each key may send.
    """

    name = "exa"
    title = "Exa"
    default_base_url = DEFAULT_BASE_URL
    base_url_env = "EXA_BASE_URL"
    unit = "usd"

    def __init__(
        self,
        *,
        search_price: float = SEARCH_PRICE,
        extra_result_price: float = EXTRA_RESULT_PRICE,
        rate: Rate = DEFAULT_RATE,
    ) -> None:
        self.search_price = search_price
        self.extra_result_price = extra_result_price
        self._rate = rate

    def headers(self, key: str) -> dict[str, str]:
        """`x-api-key: <key>`: never the key in a body or a URL."""
        return {"x-api-key": key, "Content-Type": "application/json"}

    def check(self, endpoint: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Tavily's parameters in Exa's words, encoded once; an
        [`Unsupported`][searchfuse.errors.Unsupported] for what Exa cannot express."""
        params = Params(self.title, endpoint, body)
        sent: dict[str, Any] = {"query": params.query}
        count = params.count("max_results", 1, MAX_RESULTS)
        if count is not None:
            sent["numResults"] = count
        include, exclude = params.domains()
        if include:
            sent["includeDomains"] = include
        if exclude:
            sent["excludeDomains"] = exclude
        self._dates(params, sent)
        topic = params.take("topic")
        if topic == "news":
            sent["category"] = "news"
        elif topic not in (None, "general"):
            raise params.refuse("topic", topic, "Exa has no such category")
        depth = params.take("search_depth")
        if depth is not None:
            if not isinstance(depth, str) or depth not in _TYPES:
                raise params.refuse(
                    "search_depth", depth, "Exa's deeper search types are other products"
                )
            if _TYPES[depth] is not None:
                sent["type"] = _TYPES[depth]
        full_text = params.take("include_raw_content")
        if full_text not in (None, False, True):
            raise params.refuse("include_raw_content", full_text, "Exa returns plain text only")
        # The page text is the only place Exa gives a result's content: ask for a
        # snippet's worth, or all of it when the caller wants the raw content.
        sent["contents"] = {"text": True if full_text else {"maxCharacters": SNIPPET_CHARACTERS}}
        params.finish()
        return encoded(sent)

    def _dates(self, params: Params, sent: dict[str, Any]) -> None:
        """`time_range`, `days`, `start_date` and `end_date` as Exa's published dates."""
        time_range = params.time_range()
        days = params.count("days", 1, 3650)
        start, end = params.take("start_date"), params.take("end_date")
        if sum(x is not None for x in (time_range, days, start)) > 1:
            raise BadRequest("give one of time_range, days and start_date, not several", sent=False)
        if time_range is not None:
            sent["startPublishedDate"] = since(TIME_RANGE_DAYS[time_range], _clock.now())
        elif days is not None:
            sent["startPublishedDate"] = since(days, _clock.now())
        elif start is not None:
            sent["startPublishedDate"] = _date("start_date", start, params)
        if end is not None:
            sent["endPublishedDate"] = _date("end_date", end, params)

    def build(self, endpoint: str, body: Mapping[str, Any]) -> Request:
        """`POST /search` with the checked body."""
        return Request("POST", SEARCH, body)

    def classify(self, answer: Answer, now: float) -> Classified:
        """Exa's reaction table: HTTP's meaning, 402 out of credits."""
        return classify(answer, now, STATUS, ("error",), ("message",), ("tag",))

    def normalize(
        self, endpoint: str, data: dict[str, Any], body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Exa's results as Tavily's: `text` is the content, `score` kept when sent."""
        contents = (body or {}).get("contents")
        full = isinstance(contents, dict) and contents.get("text") is True
        items = []
        for entry in entries(data, "results"):
            if not isinstance(entry, dict):
                continue
            text = entry.get("text")
            item = result(entry.get("title"), entry.get("url"), text, entry.get("score"))
            if item is not None:
                if isinstance(text, str):
                    item["content"] = text[:SNIPPET_CHARACTERS]
                    item["raw_content"] = text if full else None
                if isinstance(entry.get("publishedDate"), str):
                    item["published_date"] = entry["publishedDate"]
            items.append(item)
        query = (body or {}).get("query")
        return tavily_shape(query if isinstance(query, str) else "", items, data)

    def cost(self, endpoint: str, body: Mapping[str, Any], data: dict[str, Any] | None) -> float:
        """US dollars: the answer's `costDollars.total` when plausible, else the list price."""
        if data is not None:
            dollars = data.get("costDollars")
            total = figure(dollars.get("total")) if isinstance(dollars, dict) else None
            if total is not None and total <= MAX_SEARCH_DOLLARS:
                return total
        count = body.get("numResults", INCLUDED_RESULTS)
        extra = max(int(count) - INCLUDED_RESULTS, 0) if isinstance(count, int) else 0
        return self.search_price + extra * self.extra_result_price


#: The Exa provider with Exa's published figures.
EXA = Exa()
