"""A simulated Serper (Google results) API, written from Serper's public documentation.

What it follows: Serper's API as its playground and OpenAPI description
publish it (`POST /search` with the key in `X-API-KEY`; a JSON body with
`q`, `num` up to 100, `tbs` as Google's `qdr:d|w|m|y`, `gl`, `hl`, `page`;
results under `organic[]` with `title`, `link`, `snippet`, `position`; the
answer's `credits`), and its errors as `{"message", "statusCode"}`: 400 a
bad request, 403 `Unauthorized.` for an unknown key, and 429 both when a key
goes too fast and when its credits have run out, with no header that tells
the two apart.

Uncertain, so configurable: the pace (50 requests a second here) and the
credits a search costs (1 for up to 10 results, 2 beyond, here).
"""

from __future__ import annotations

from typing import ClassVar

import httpx

from searchfuse.testing._keyed import KeyedSimulator, pages, site_operators
from searchfuse.testing._simulator import Json, json_object, retry_after_header

__all__ = ["FakeSerper"]

DEFAULT_NUM = 10
MOST_NUM = 100
TBS = frozenset({"qdr:h", "qdr:d", "qdr:w", "qdr:m", "qdr:y"})
MESSAGES = {
    400: "Bad request.",
    403: "Unauthorized.",
    429: "Too many requests.",
    500: "Internal server error.",
}
#: Serper's 429 when the credits are spent: the same status, another text.
NO_CREDITS = "Not enough credits."


class FakeSerper(KeyedSimulator):
    """A simulated Serper for tests: `POST /search`, keys in `X-API-KEY`, credits per key.

    Args:
        keys: keys to accept, each paced at 50 requests a second with an
            unlimited balance (`set_balance(key, 0)` spends it: then every search
            answers 429, as a rate limit does).
        clock: zero-argument callable returning epoch seconds; default searchfuse's clock.
        sleeper: how an in-process slow answer waits.
    """

    default_url: ClassVar[str] = "https://google.serper.dev"
    header = "x-api-key"
    default_rate = 50
    default_window = 1.0

    def _error(
        self, status: int, detail: str | None = None, retry_after: float | str | None = None
    ) -> httpx.Response:
        body = {"message": detail or MESSAGES.get(status, "Error."), "statusCode": status}
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
            return self._error(403), 0
        body = _checked(json_object(raw))
        if isinstance(body, str):
            return self._error(400, body), 0
        num = body.get("num", DEFAULT_NUM)
        credits = 1.0 if num <= 10 else 2.0
        if not self._affords(state, credits):
            return self._error(429, NO_CREDITS), 0
        if self._admit(state, now) is not None:
            return self._error(429), 0
        state.spent += credits
        return httpx.Response(200, json=_answer(body, num, credits)), credits


def _checked(body: Json | None) -> Json | str:
    if body is None:
        return "The request body must be a JSON object."
    query = body.get("q")
    if not isinstance(query, str) or not query.strip():
        return "Missing query parameter (q)."
    num = body.get("num", DEFAULT_NUM)
    if isinstance(num, bool) or not isinstance(num, int) or not 1 <= num <= MOST_NUM:
        return f"num must be a whole number from 1 to {MOST_NUM}."
    if body.get("tbs") not in (None, *TBS):
        return "tbs must be qdr:h, qdr:d, qdr:w, qdr:m or qdr:y."
    return body


def _answer(body: Json, num: int, credits: float) -> Json:
    query = body["q"]
    include, exclude = site_operators(query)
    organic = [
        {"title": page.title, "link": page.url, "snippet": page.text, "position": i + 1}
        for i, page in enumerate(pages(query, num, include, exclude))
    ]
    return {
        "searchParameters": {"q": query, "type": "search", "num": num, "engine": "google"},
        "organic": organic,
        "credits": credits,
    }
