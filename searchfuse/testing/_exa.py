"""A simulated Exa search API, written from Exa's public documentation.

What it follows: Exa's API reference (`POST /search` with the key in
`x-api-key`; a JSON body with `query`, `numResults` up to 100,
`includeDomains`, `excludeDomains`, `startPublishedDate`,
`endPublishedDate`, `category`, `type` and `contents`; results with `id`,
`title`, `url`, `publishedDate`, `author`, `score` and the page `text` when
asked; `costDollars.total`), its error codes (a body `{"requestId", "error",
"tag"}`: 400 a bad request, 401 a missing or invalid key, 402 credits run out
(`NO_MORE_CREDITS`), 429 too many requests) and its pricing and rate-limit
pages (a search of up to 10 results $0.007, more results billed on top; 10
requests a second per key).

Uncertain, so configurable: the price per result beyond the tenth
(`EXTRA_RESULT_PRICE`) and whether a 429 says how long to wait (it sends no
`Retry-After` unless `retry_after=` is given). The figures are this
module's own: a simulator that borrowed the client's would agree with its
mistakes.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import httpx

from searchfuse.testing._keyed import KeyedSimulator, digest, pages
from searchfuse.testing._simulator import Json, json_object, retry_after_header

__all__ = ["FakeExa"]

#: USD per search of up to `INCLUDED_RESULTS` results, and per result beyond.
SEARCH_PRICE = 0.007
INCLUDED_RESULTS = 10
EXTRA_RESULT_PRICE = 0.001
#: `numResults` when the body gives none, and the most it may ask.
DEFAULT_RESULTS = 10
MOST_RESULTS = 100
CATEGORIES = frozenset(
    {
        "company",
        "research paper",
        "news",
        "pdf",
        "github",
        "tweet",
        "personal site",
        "financial report",
        "people",
    }
)
TYPES = frozenset({"auto", "neural", "keyword", "fast", "deep"})
TAGS = {
    400: "INVALID_REQUEST_BODY",
    401: "INVALID_API_KEY",
    402: "NO_MORE_CREDITS",
    429: "RATE_LIMIT_EXCEEDED",
    500: "INTERNAL_ERROR",
}
MESSAGES = {
    400: "Invalid request body.",
    401: "Invalid API key.",
    402: "You have run out of credits. Top up at the dashboard.",
    429: "Rate limit exceeded. Slow down your requests.",
    500: "Internal server error.",
}


class FakeExa(KeyedSimulator):
    """A simulated Exa for tests: `POST /search`, keys in `x-api-key`, a balance in dollars.

    Example:
        ```python
        fake = FakeExa(keys=["00000000-0000-4000-8000-0000000e0001"])
        with fake.serve() as url:
            router = Router({"exa": fake.keys}, base_urls={"exa": url})
            assert router.search("q")["searchfuse"]["served_by"] == "exa"
        ```

    Args:
        keys: keys to accept, each paced at 10 requests a second with an
            unlimited balance (see `add_key`).
        clock: zero-argument callable returning epoch seconds (the rate
            windows read it); default searchfuse's clock.
        sleeper: how an in-process slow answer waits.
        retry_after: a `Retry-After` for rate-limit 429s (default: none sent).
    """

    default_url: ClassVar[str] = "https://api.exa.ai"
    header = "x-api-key"
    default_rate = 10
    default_window = 1.0

    def __init__(
        self,
        keys: Iterable[str] = (),
        *,
        clock: Callable[[], float] | None = None,
        sleeper: Callable[[float], None] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(keys, clock=clock, sleeper=sleeper)
        self.retry_after = retry_after

    def _error(
        self, status: int, detail: str | None = None, retry_after: float | str | None = None
    ) -> httpx.Response:
        body = {
            "requestId": uuid.uuid4().hex,
            "error": detail or MESSAGES.get(status, "Error."),
            "tag": TAGS.get(status, "ERROR"),
        }
        headers = {} if retry_after is None else {"Retry-After": retry_after_header(retry_after)}
        return httpx.Response(status, json=body, headers=headers)

    def _process(
        self, request: httpx.Request, key: str | None, raw: bytes, now: float
    ) -> tuple[httpx.Response, float]:
        if request.url.path != "/search":
            return self._error(404, "Not found."), 0
        if request.method.upper() != "POST":
            return self._error(405, "Method not allowed."), 0
        state = self._known(key)
        if state is None:
            return self._error(401), 0
        wait = self._admit(state, now)
        if wait is not None:
            return self._error(429, retry_after=self.retry_after), 0
        body = _checked(json_object(raw))
        if isinstance(body, str):
            return self._error(400, body), 0
        count = body.get("numResults", DEFAULT_RESULTS)
        cost = round(SEARCH_PRICE + max(count - INCLUDED_RESULTS, 0) * EXTRA_RESULT_PRICE, 6)
        if not self._affords(state, cost):
            return self._error(402), 0
        state.spent += cost
        self._request_number += 1
        return httpx.Response(200, json=_answer(body, count, cost, now)), cost


def _checked(body: Json | None) -> Json | str:
    """The body when Exa would take it, else the 400's text."""
    if body is None:
        return "The request body must be a JSON object."
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        return "query is required."
    count = body.get("numResults", DEFAULT_RESULTS)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MOST_RESULTS:
        return f"numResults must be a whole number from 1 to {MOST_RESULTS}."
    for name in ("includeDomains", "excludeDomains"):
        value = body.get(name, [])
        if not isinstance(value, list) or not all(isinstance(d, str) for d in value):
            return f"{name} must be a list of domains."
    for name in ("startPublishedDate", "endPublishedDate"):
        value = body.get(name)
        if value is not None and not _instant(value):
            return f"{name} must be an ISO 8601 date."
    if body.get("category") not in (None, *CATEGORIES):
        return f"category must be one of: {', '.join(sorted(CATEGORIES))}."
    if body.get("type") not in (None, *TYPES):
        return f"type must be one of: {', '.join(sorted(TYPES))}."
    return body


def _instant(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _answer(body: Json, count: int, cost: float, now: float) -> Json:
    contents = body.get("contents")
    text = contents.get("text") if isinstance(contents, dict) else None
    limit = text.get("maxCharacters") if isinstance(text, dict) else None
    found = pages(
        body["query"], count, body.get("includeDomains", []), body.get("excludeDomains", [])
    )
    published = dt.datetime.fromtimestamp(now, dt.UTC) - dt.timedelta(days=1)
    results = []
    for page in found:
        item: Json = {
            "id": page.url,
            "title": page.title,
            "url": page.url,
            "publishedDate": published.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "author": None,
            "score": page.score,
        }
        if text:
            full = f"{page.text} Full text of {page.url}."
            item["text"] = full[:limit] if isinstance(limit, int) else full
        results.append(item)
    return {
        "requestId": digest("exa", body["query"], now)[:32],
        "resolvedSearchType": body.get("type") or "neural",
        "results": results,
        "searchTime": 0.4,
        "costDollars": {"total": cost, "search": {"neural": cost}},
    }
