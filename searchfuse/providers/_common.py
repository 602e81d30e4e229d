"""What the providers beside Tavily share: reading Tavily-shaped parameters, once.

Every provider is driven with Tavily's parameters (`query`, `max_results`,
`time_range`, `include_domains`...). Each one translates what its API can
express and must refuse the rest: a search sent without `include_domains` or
`time_range` answers another question than the one asked, so a parameter
with no faithful translation is an [`Unsupported`][searchfuse.errors.Unsupported],
never dropped. [`Params`][searchfuse.providers._common.Params] keeps that
promise mechanically: a provider *takes* what it translates, and `finish`
refuses whatever was left, unless it asks for nothing beyond a plain search.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Hashable, Mapping
from typing import Any

from searchfuse._answers import (
    LONE_SURROGATE,
    Outcome,
    outcome_of_status,
    parse_retry_after,
    query_problem,
)
from searchfuse._wire import MAX_ERROR_TEXT, JSONBody, short_text, validate_base_url
from searchfuse.errors import BadRequest, Unsupported
from searchfuse.providers._base import (
    Answer,
    Classified,
    Figures,
    Observed,
    Provider,
    Rate,
    Request,
)

__all__ = [
    "PLAIN",
    "SEARCH",
    "TIME_RANGE_DAYS",
    "Params",
    "Searcher",
    "base_url",
    "classify",
    "encoded",
    "entries",
    "error_text",
    "first_text",
    "result",
    "since",
    "site_query",
    "tavily_shape",
]

#: The logical endpoint the router searches through (Tavily's name for it).
SEARCH = "/search"
#: Values of Tavily's parameters that ask for nothing beyond a plain web search:
#: any provider honours them by doing what it always does.
PLAIN: Mapping[str, frozenset[Any]] = {
    "topic": frozenset({"general"}),
    "search_depth": frozenset({"basic"}),
    "include_answer": frozenset({False}),
    "include_raw_content": frozenset({False}),
    "include_images": frozenset({False}),
    "include_image_descriptions": frozenset({False}),
    "include_favicon": frozenset({False}),
    "auto_parameters": frozenset({False}),
}
#: Parameters about Tavily's own bookkeeping: another provider reports its
#: cost its own way (Exa's `costDollars`, Serper's `credits`), so there is
#: nothing to honour.
BOOKKEEPING = frozenset({"include_usage"})
#: Tavily's `time_range` in days (its short forms `d`/`w`/`m`/`y` too).
TIME_RANGE_DAYS: Mapping[str, int] = {
    "day": 1,
    "d": 1,
    "week": 7,
    "w": 7,
    "month": 31,
    "m": 31,
    "year": 366,
    "y": 366,
}
#: Tavily's `time_range` spelled in full.
TIME_RANGES: Mapping[str, str] = {
    "d": "day",
    "w": "week",
    "m": "month",
    "y": "year",
    "day": "day",
    "week": "week",
    "month": "month",
    "year": "year",
}


class Searcher:
    """What the providers beside Tavily share: one search endpoint, a configured pace,
    a key in a header, and (unless a provider says otherwise) no free probe and
    nothing of the key's pace or quota in an answer's headers."""

    endpoints: tuple[str, ...] = (SEARCH,)
    probe_rate: Rate | None = None
    key_is_url = False
    _rate: Rate

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def rate(self, key: str) -> Rate:
        """The pace each key keeps: the provider's published default, unless configured."""
        return self._rate

    def probe(self) -> Request | None:
        """None: every request to this provider is a search, which costs."""
        return None

    def figures(self, answer: Answer) -> Figures | None:
        """Nothing: there is no probe to read."""
        return None

    def observe(self, answer: Answer, now: float) -> Observed | None:
        """Nothing: this provider's headers say nothing of a key's pace or quota."""
        return None


class Params:
    """A provider's reading of one Tavily-shaped request.

    `take(name)` hands out a parameter the provider translates; `finish()`
    raises [`Unsupported`][searchfuse.errors.Unsupported] for the first one
    left that asks for more than a plain search. `None` always means "not
    given".
    """

    def __init__(self, provider: str, endpoint: str, body: Mapping[str, Any]) -> None:
        if not isinstance(body, Mapping):
            raise TypeError(f"body must be a mapping, not {type(body).__name__}")
        if "api_key" in body:
            raise TypeError(
                "pass keys to the Router, not in the request: api_key is not a parameter"
            )
        if endpoint != SEARCH:
            raise Unsupported(provider, endpoint, f"{provider} only searches ({SEARCH})")
        self.provider = provider
        self._left = {k: v for k, v in body.items() if v is not None}
        problem = query_problem(self._left.get("query"))
        if problem is not None:
            raise BadRequest(problem, sent=False)
        self.query: str = self._left.pop("query")

    def take(self, name: str) -> Any:
        """The value of `name` (`None`: not given), now the provider's to honour."""
        return self._left.pop(name, None)

    def refuse(self, name: str, value: Any, why: str) -> Unsupported:
        """The error for a value of `name` the provider cannot express."""
        return Unsupported(self.provider, f"{name}={value!r}", why)

    def count(self, name: str, low: int, high: int) -> int | None:
        """`name` as a whole number in `low..high` (a `BadRequest` otherwise)."""
        value = self.take(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise BadRequest(
                f"{name} must be a whole number from {low} to {high} for {self.provider}, "
                f"not {value!r}",
                sent=False,
            )
        return value

    def time_range(self) -> str | None:
        """Tavily's `time_range` spelled in full (`"day"`...), or `None`."""
        value = self.take("time_range")
        if value is None:
            return None
        full = TIME_RANGES.get(value) if isinstance(value, str) else None
        if full is None:
            raise BadRequest(
                f"time_range must be one of day, week, month, year, not {value!r}", sent=False
            )
        return full

    def domains(self) -> tuple[list[str], list[str]]:
        """`include_domains` and `exclude_domains`, each a list of names."""
        return self._domains("include_domains"), self._domains("exclude_domains")

    def _domains(self, name: str) -> list[str]:
        value = self.take(name)
        if value is None:
            return []
        # A list (a tuple from Python): a string, a number or an object is no list of
        # names, however it iterates (an object's keys are not domains the caller named).
        if not isinstance(value, list | tuple) or not all(
            isinstance(d, str) and d.strip() and not any(c.isspace() for c in d.strip())
            for d in value
        ):
            raise BadRequest(f"{name} must be a list of domain names, not {value!r}", sent=False)
        return [d.strip() for d in value]

    def finish(self) -> None:
        """Refuse the first parameter left that asks for more than a plain search."""
        for name, value in self._left.items():
            if name in BOOKKEEPING:
                continue
            plain = PLAIN.get(name, frozenset())
            if isinstance(value, Hashable) and value in plain and not _is_true_number(value):
                continue
            raise self.refuse(name, value, f"{self.provider}'s API has no equivalent")


def _is_true_number(value: Any) -> bool:
    # `1 in {False}` is false, but `0 in {False}` is true; a 0 is not `False`.
    return not isinstance(value, bool) and isinstance(value, int | float)


def base_url(
    provider: Provider, given: str | None, environ: Mapping[str, str] | None = None
) -> str:
    """`given` if set, else the provider's `*_BASE_URL` variable, else its public
    address; a [`ConfigError`][searchfuse.errors.ConfigError] naming the source for
    anything that is not an http(s) URL."""
    default = provider.default_base_url
    if given:
        return validate_base_url(given, f"base_urls[{provider.name!r}]", provider.title, default)
    env = (os.environ if environ is None else environ).get(provider.base_url_env)
    if env:
        return validate_base_url(env, provider.base_url_env, provider.title, default)
    return default


def site_query(query: str, include: list[str], exclude: list[str]) -> str:
    """`query` with the domains as search operators (`site:` / `-site:`), the way
    Google and Brave read them."""
    parts = [query]
    if len(include) == 1:
        parts.append(f"site:{include[0]}")
    elif include:
        parts.append("(" + " OR ".join(f"site:{d}" for d in include) + ")")
    parts.extend(f"-site:{d}" for d in exclude)
    return " ".join(parts)


def since(days: int, now: float) -> str:
    """The ISO 8601 instant `days` before `now` (UTC, milliseconds, `Z`)."""
    start = dt.datetime.fromtimestamp(now, dt.UTC) - dt.timedelta(days=days)
    return start.strftime("%Y-%m-%dT%H:%M:%S.") + f"{start.microsecond // 1000:03d}Z"


def encoded(body: dict[str, Any]) -> JSONBody:
    """`body` encoded once as the JSON that is sent (a `BadRequest` if it cannot be)."""
    try:
        return JSONBody(body)
    except UnicodeEncodeError:
        raise BadRequest(LONE_SURROGATE, sent=False) from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadRequest(f"the parameters cannot be sent as JSON ({exc})", sent=False) from None


def first_text(data: Any, *paths: tuple[str, ...]) -> str | None:
    """The first string found at one of `paths` into `data` (nested objects)."""
    for path in paths:
        node = data
        for name in path:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, str) and node.strip():
            return node
    return None


def classify(
    answer: Answer, now: float, table: Mapping[int, Outcome], *paths: tuple[str, ...]
) -> Classified:
    """The reaction-table row for `answer`: HTTP's meaning, then the provider's own
    codes (`table`), with the server's Retry-After and its error text (read at
    `paths`)."""
    status = answer.status_code
    outcome = outcome_of_status(status, table)
    if outcome is Outcome.OK:
        return Classified(outcome, status, "", None)  # a Retry-After says nothing here
    retry_after = parse_retry_after(answer.headers.get("retry-after"), now)
    return Classified(outcome, status, error_text(answer, *paths), retry_after)


def error_text(answer: Answer, *paths: tuple[str, ...]) -> str:
    """An error answer's text, from the first of `paths` that holds one (else the
    raw body), one short line."""
    try:
        data = answer.json()
    except ValueError:
        data = None
    text = first_text(data, *paths)
    return short_text(text if text is not None else answer.text[: MAX_ERROR_TEXT * 2])


def result(title: Any, url: Any, content: Any, score: Any = None) -> dict[str, Any] | None:
    """One result in Tavily's shape, or `None` for an entry without a usable URL."""
    if not isinstance(url, str) or not url.strip():
        return None
    number = score if isinstance(score, int | float) and not isinstance(score, bool) else None
    return {
        "title": title if isinstance(title, str) else "",
        "url": url,
        "content": content if isinstance(content, str) else "",
        "score": None if number is None else float(number),
        "raw_content": None,
    }


def entries(data: Any, *path: str) -> list[Any]:
    """The list at `path` into `data` (`[]` when absent or not a list)."""
    node = data
    for name in path:
        node = node.get(name) if isinstance(node, dict) else None
    return node if isinstance(node, list) else []


def tavily_shape(
    query: str, items: list[dict[str, Any] | None], data: dict[str, Any], limit: int | None = None
) -> dict[str, Any]:
    """A normalised answer: Tavily's fields, the provider's JSON under `"raw"`."""
    kept = [item for item in items if item is not None]
    return {
        "query": query,
        "answer": None,
        "images": [],
        "results": kept if limit is None else kept[:limit],
        "raw": data,
    }
