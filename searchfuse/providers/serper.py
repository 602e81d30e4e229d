"""Serper (Google results): its published facts (request, reaction table, credits), written once.

Source: Serper's API as its OpenAPI description and playground publish it,
https://serper.dev and https://google.serper.dev (`POST /search` with the
key in `X-API-KEY`; a JSON body `q`, `num`, `tbs` — Google's `qdr:d|w|m|y`
for the last day, week, month or year —, `gl`, `hl`, `page`; results under
`organic[]` with `title`, `link`, `snippet`, `position`; the answer's
`credits` is what the search cost).

Serper answers 429 both when a key goes too fast and when the account's
credits have run out, and sends no header to tell them apart: the reaction
table says so (`Classified.alternative` is `EXHAUSTED` beside the
`RATE_LIMITED` outcome), so the router can park a key longer after each 429
that a pause did not cure. Uncertain, so configurable: the default pace
(50 requests a second here; Serper advertises far more for paid plans) and
the credits a search costs before its answer says (1; more results may cost
more, and the answer's `credits` settles it). Serper has no free request
that checks a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from searchfuse._answers import Outcome
from searchfuse._wire import figure
from searchfuse.providers._base import Answer, Classified, Rate, Request
from searchfuse.providers._common import (
    SEARCH,
    Params,
    Searcher,
    classify,
    encoded,
    entries,
    result,
    site_query,
    tavily_shape,
)

__all__ = [
    "AMBIGUOUS_429",
    "DEFAULT_BASE_URL",
    "DEFAULT_RATE",
    "MAX_RESULTS",
    "SEARCH_CREDITS",
    "SERPER",
    "Serper",
]

DEFAULT_BASE_URL = "https://google.serper.dev"
#: Requests per second per key until configured otherwise.
DEFAULT_RATE = Rate(50, 1.0)
#: `num` Serper accepts.
MAX_RESULTS = 100
#: Credits a search is expected to cost before its answer says.
SEARCH_CREDITS = 1.0
#: No search costs more credits than this; a larger `credits` is not believed.
MAX_CREDITS = 100.0
#: What a Serper 429 means, said once (diagnosis and status show it).
AMBIGUOUS_429 = "a rate limit or credits run out (Serper answers 429 for both)"
#: Tavily's `time_range` as Google's `tbs`.
TBS = {"day": "qdr:d", "week": "qdr:w", "month": "qdr:m", "year": "qdr:y"}


class Serper(Searcher):
    """Serper as the router drives it: `X-API-KEY`, JSON bodies, credits.

    Args:
        rate: the requests per window each key may send.
        search_credits: what a search is expected to cost before its answer says.
    """

    name = "serper"
    title = "Serper"
    default_base_url = DEFAULT_BASE_URL
    base_url_env = "SERPER_BASE_URL"
    unit = "credits"

    def __init__(self, *, rate: Rate = DEFAULT_RATE, search_credits: float = SEARCH_CREDITS):
        self._rate = rate
        self.search_credits = search_credits

    def headers(self, key: str) -> dict[str, str]:
        """`X-API-KEY: <key>`: never the key in a body or a URL."""
        return {"X-API-KEY": key, "Content-Type": "application/json"}

    def check(self, endpoint: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Tavily's parameters in Serper's words, encoded once; an
        [`Unsupported`][searchfuse.errors.Unsupported] for what Serper cannot express."""
        params = Params(self.title, endpoint, body)
        include, exclude = params.domains()
        # Google reads `site:` and `-site:` in the query: the domains stay honoured.
        sent: dict[str, Any] = {"q": site_query(params.query, include, exclude)}
        count = params.count("max_results", 1, MAX_RESULTS)
        if count is not None:
            sent["num"] = count
        time_range = params.time_range()
        if time_range is not None:
            sent["tbs"] = TBS[time_range]
        topic = params.take("topic")
        if topic not in (None, "general"):
            raise params.refuse("topic", topic, "Serper serves news and other topics elsewhere")
        params.finish()
        return encoded(sent)

    def build(self, endpoint: str, body: Mapping[str, Any]) -> Request:
        """`POST /search` with the checked body."""
        return Request("POST", SEARCH, body)

    def classify(self, answer: Answer, now: float) -> Classified:
        """HTTP's meaning; a 429 is a rate limit *or* credits run out, and says so."""
        row = classify(answer, now, {}, ("message",), ("error",))
        if row.outcome is not Outcome.RATE_LIMITED:
            return row
        detail = f"{AMBIGUOUS_429}: {row.detail}" if row.detail else AMBIGUOUS_429
        return replace(row, detail=detail, alternative=Outcome.EXHAUSTED)

    def normalize(
        self, endpoint: str, data: dict[str, Any], body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Serper's organic results as Tavily's: `link` is the URL, `snippet` the content."""
        items = [
            result(entry.get("title"), entry.get("link"), entry.get("snippet"))
            for entry in entries(data, "organic")
            if isinstance(entry, dict)
        ]
        query = (body or {}).get("q")
        return tavily_shape(query if isinstance(query, str) else "", items, data)

    def cost(self, endpoint: str, body: Mapping[str, Any], data: dict[str, Any] | None) -> float:
        """Credits: the answer's `credits` when plausible, else the expected figure."""
        credits = figure(data.get("credits")) if data is not None else None
        if credits is not None and credits <= MAX_CREDITS:
            return credits
        return self.search_credits


#: The Serper provider with its published figures.
SERPER = Serper()
