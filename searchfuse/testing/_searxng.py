"""A simulated SearXNG instance, written from SearXNG's public documentation.

What it follows: SearXNG's search API (`GET /search` with `q`,
`format=json`, `categories`, `time_range` of `day`, `month` or `year`,
`pageno`; a format the instance has not enabled in `search.formats` answers
403 Forbidden), its JSON answer (`results[]` with `url`, `title`,
`content`, `engine`, `engines`, `score`, `category`; `unresponsive_engines`
as `[name, why]` pairs), `GET /healthz` answering `OK`, and its limiter
(429 Too Many Requests, off unless `limiter=` is given).

An instance has no key: requests carry no credential and are recorded
without one. Its engines can be made to fail (`fail_engines`): a search
then gets no results from them and names them in `unresponsive_engines`;
with every engine failing, the answer is empty although the web is not.
`nothing_for` makes queries genuinely empty: every engine answers, with no
result.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import ClassVar

import httpx

from searchfuse.testing._keyed import pages
from searchfuse.testing._simulator import Json, Simulator, sliding_window

__all__ = ["FakeSearXNG"]

ENGINES = ("duckduckgo", "brave", "wikipedia")
TIME_RANGES = frozenset({"day", "month", "year"})
PAGE_SIZE = 10


class FakeSearXNG(Simulator):
    """A simulated SearXNG instance for tests: `GET /search?format=json` and `GET /healthz`.

    Args:
        clock: zero-argument callable returning epoch seconds; default searchfuse's clock.
        sleeper: how an in-process slow answer waits.
        engines: the engines the instance asks.
        json_enabled: whether `json` is among the instance's `search.formats`
            (`False`: every `format=json` search answers 403).
        limiter: `(requests, window)`: the instance's limiter answers 429 past
            that many searches in any `window` seconds (`None`: off).
    """

    default_url: ClassVar[str] = "http://127.0.0.1:8888"

    def __init__(
        self,
        *,
        clock: Callable[[], float] | None = None,
        sleeper: Callable[[float], None] | None = None,
        engines: Iterable[str] = ENGINES,
        json_enabled: bool = True,
        limiter: tuple[int, float] | None = None,
    ) -> None:
        super().__init__(clock=clock, sleeper=sleeper)
        self.engines = tuple(engines)
        self.json_enabled = json_enabled
        self.limiter = limiter
        self._failing: dict[str, str] = {}
        self._empty: set[str] = set()
        self._times: deque[float] = deque()

    def fail_engines(self, *names: str, why: str = "timeout") -> None:
        """Make engines `names` (all of them when none is named) fail until `heal_engines`."""
        with self._lock:
            for name in names or self.engines:
                self._failing[name] = why

    def heal_engines(self) -> None:
        """Every engine answers again."""
        with self._lock:
            self._failing.clear()

    def nothing_for(self, *queries: str) -> None:
        """Every engine answers `queries` with no result (a genuinely empty search)."""
        with self._lock:
            self._empty.update(q.strip().casefold() for q in queries)

    def _key_of(self, request: httpx.Request) -> str | None:
        return None  # an instance takes no credential

    def _error(
        self, status: int, detail: str | None = None, retry_after: float | str | None = None
    ) -> httpx.Response:
        # SearXNG's errors are its web server's pages, not JSON.
        text = detail or httpx.codes.get_reason_phrase(status) or "Error"
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        return httpx.Response(status, text=text, headers=headers)

    def _process(
        self, request: httpx.Request, key: str | None, raw: bytes, now: float
    ) -> tuple[httpx.Response, float]:
        path, method = request.url.path, request.method.upper()
        if path == "/healthz" and method == "GET":
            return httpx.Response(200, text="OK"), 0
        if path != "/search":
            return self._error(404), 0
        if method not in ("GET", "POST"):
            return self._error(405), 0
        if self.limiter is not None and sliding_window(self._times, *self.limiter, now) is not None:
            return self._error(429, "Too Many Requests"), 0
        params = dict(request.url.params)
        if params.get("format") == "json" and not self.json_enabled:
            return self._error(403, "Forbidden"), 0
        query = params.get("q", "").strip()
        if not query:
            return self._error(400, "Bad Request: q is required"), 0
        if params.get("time_range") not in (None, "", *TIME_RANGES):
            return self._error(400, "Bad Request: invalid time_range"), 0
        return httpx.Response(200, json=self._results(query, params)), 0

    def _results(self, query: str, params: dict[str, str]) -> Json:
        answering = [e for e in self.engines if e not in self._failing]
        found = [] if query.casefold() in self._empty or not answering else pages(query, PAGE_SIZE)
        category = "news" if params.get("categories") == "news" else "general"
        results = [
            {
                "url": page.url,
                "title": page.title,
                "content": page.text,
                "engine": answering[i % len(answering)],
                "engines": answering,
                "score": page.score,
                "category": category,
            }
            for i, page in enumerate(found)
        ]
        return {
            "query": query,
            "number_of_results": len(results),
            "results": results,
            "answers": [],
            "corrections": [],
            "infoboxes": [],
            "suggestions": [],
            "unresponsive_engines": [[name, why] for name, why in self._failing.items()],
        }

    def __repr__(self) -> str:
        with self._lock:
            return f"FakeSearXNG(engines={list(self.engines)}, requests={len(self._records)})"
