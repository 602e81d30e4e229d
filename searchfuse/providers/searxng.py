"""SearXNG (a self-hosted metasearch instance): its published facts, written once.

Source: SearXNG's search API, https://docs.searxng.org/dev/search_api
(`GET /search` with `q`, `format=json`, `categories`, `time_range` of
`day`, `month` or `year`, `pageno`; a format the instance has not enabled in
`settings.yml`'s `search.formats` answers 403 Forbidden), and its results as
`{"results": [{"title", "url", "content", "engine", "score"}],
"unresponsive_engines": [[name, why]]}`. The instance's limiter answers 429
(SearXNG issue #2310 shows it refusing `/healthz` too).

There is no key: a "key" is the instance's URL, requests go to it and carry
no credential. How searchfuse reads an answer: a 403 means the instance is
misconfigured (JSON output is off), not a bad key, and a redirect, 404 or 405 that
the address is not SearXNG's: either parks that instance as misconfigured (asked
again after an hour, not at every call) and the next instance serves; no results while engines
were unresponsive is an upstream failure ("silent empty": every engine it
asked failed), while no results with every engine answering is a genuine
empty result. SearXNG returns a page of whatever its engines found, so
`max_results` is honoured by cutting the list. It cannot limit results to
domains (it passes `site:` to engines, which may ignore it, as its own
documentation warns) nor to the last week: those are refused. `GET
/healthz` is a free probe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from searchfuse._answers import Outcome
from searchfuse._wire import short_text
from searchfuse.providers._base import Answer, Classified, Figures, Rate, Request
from searchfuse.providers._common import (
    SEARCH,
    Params,
    Searcher,
    classify,
    entries,
    result,
    tavily_shape,
)

__all__ = ["DEFAULT_RATE", "PROBE_RATE", "SEARXNG", "STATUS", "SearXNG", "silent_empty"]

#: Searches per minute per instance, unless configured (a self-hosted limiter varies).
DEFAULT_RATE = Rate(60, 60.0)
#: How often `/healthz` is asked per instance.
PROBE_RATE = Rate(10, 60.0)
#: SearXNG's own status: 403 is JSON output switched off in the instance's settings.
STATUS = {403: Outcome.MISCONFIGURED}
#: The `time_range` values SearXNG knows (no week).
TIME_RANGES = frozenset({"day", "month", "year"})
#: Parameters that stay here, applied to the answer rather than sent.
LOCAL = frozenset({"max_results"})
#: The most of the results read when nothing says otherwise.
MAX_RESULTS = 100


def silent_empty(data: Any) -> str | None:
    """Why an answer with no results is a failure (its engines did not answer), or `None`."""
    if not isinstance(data, dict) or entries(data, "results"):
        return None
    failed = [
        f"{e[0]}: {e[1]}" if len(e) > 1 else str(e[0])
        for e in entries(data, "unresponsive_engines")
        if isinstance(e, list) and e
    ]
    if not failed:
        return None
    return short_text("no results, and its engines did not answer (" + ", ".join(failed) + ")")


class SearXNG(Searcher):
    """A SearXNG instance as the router drives it: no credential, `GET` with `format=json`.

    Args:
        rate: the requests per window each instance may be sent.
    """

    name = "searxng"
    title = "SearXNG"
    default_base_url = "http://127.0.0.1:8888"
    base_url_env = "SEARXNG_URL"
    probe_rate: Rate | None = PROBE_RATE
    unit = "requests"
    key_is_url = True

    def __init__(self, *, rate: Rate = DEFAULT_RATE) -> None:
        self._rate = rate

    def headers(self, key: str) -> dict[str, str]:
        """No credential: the "key" is the instance's URL, and never a header."""
        return {"Accept": "application/json"}

    def check(self, endpoint: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Tavily's parameters as SearXNG's; an
        [`Unsupported`][searchfuse.errors.Unsupported] for what it cannot express."""
        params = Params(self.title, endpoint, body)
        sent: dict[str, Any] = {"q": params.query, "format": "json"}
        count = params.count("max_results", 1, MAX_RESULTS)
        if count is not None:
            sent["max_results"] = count
        include, exclude = params.domains()
        if include or exclude:
            name = "include_domains" if include else "exclude_domains"
            raise params.refuse(
                name, include or exclude, "SearXNG's engines may ignore site: operators"
            )
        time_range = params.time_range()
        if time_range is not None:
            if time_range not in TIME_RANGES:
                raise params.refuse("time_range", time_range, "SearXNG knows day, month, year")
            sent["time_range"] = time_range
        topic = params.take("topic")
        if topic == "news":
            sent["categories"] = "news"
        elif topic not in (None, "general"):
            raise params.refuse("topic", topic, "SearXNG has no such category by default")
        params.finish()
        return sent

    def build(self, endpoint: str, body: Mapping[str, Any]) -> Request:
        """`GET /search` with the checked parameters (the result count stays here)."""
        return Request("GET", SEARCH, params={k: str(v) for k, v in body.items() if k not in LOCAL})

    def classify(self, answer: Answer, now: float) -> Classified:
        """HTTP's meaning, 403 misconfigured; no results from unresponsive engines is
        an upstream failure."""
        row = classify(answer, now, STATUS, ("error",), ("message",))
        if row.outcome is Outcome.MISCONFIGURED and answer.status_code == 403:
            fix = "the instance refuses JSON: add json to search.formats in its settings.yml"
            return Classified(row.outcome, row.status, fix, None)
        if row.outcome is Outcome.MISCONFIGURED:  # a redirect, 404, 405: not SearXNG's API
            fix = "the address is not a SearXNG instance's (give its base URL, without /search)"
            return Classified(row.outcome, row.status, fix, None)
        if row.outcome is not Outcome.OK:
            return row
        try:
            why = silent_empty(answer.json())
        except ValueError:
            return row
        return row if why is None else Classified(Outcome.UPSTREAM, row.status, why, None)

    def normalize(
        self, endpoint: str, data: dict[str, Any], body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """SearXNG's results as Tavily's, cut to `max_results`."""
        items = [
            result(entry.get("title"), entry.get("url"), entry.get("content"), entry.get("score"))
            for entry in entries(data, "results")
            if isinstance(entry, dict)
        ]
        query = (body or {}).get("q")
        limit = (body or {}).get("max_results")
        return tavily_shape(
            query if isinstance(query, str) else "",
            items,
            data,
            limit if isinstance(limit, int) else None,
        )

    def cost(self, endpoint: str, body: Mapping[str, Any], data: dict[str, Any] | None) -> float:
        """One request: an instance bills nothing, but each request counts."""
        return 1.0

    def probe(self) -> Request:
        """`GET /healthz`: free."""
        return Request("GET", "/healthz")

    def figures(self, answer: Answer) -> Figures | None:
        """A healthy instance has no figures to give, only that it answered."""
        return Figures()


#: The SearXNG provider with its defaults.
SEARXNG = SearXNG()
