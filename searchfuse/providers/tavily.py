"""Tavily: its published facts (parameters, prices, limits, addresses), written once.

The router, the guard's tools, the integrations, the CLI and the drop-ins
read these names; nothing else restates them. (The simulated Tavily in
`searchfuse.testing` keeps its own copy on purpose, so it cannot agree with a
mistake here.)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from searchfuse import _answers
from searchfuse._answers import (
    LONE_SURROGATE,
    Outcome,
    outcome_of_status,
    parse_retry_after,
    query_problem,
)
from searchfuse._secrets import redact
from searchfuse._wire import MAX_ERROR_TEXT, JSONBody, figure, short_text, validate_base_url
from searchfuse.errors import BadRequest
from searchfuse.providers._base import Answer, Classified, Figures, Observed, Rate, Request

__all__ = [
    "DEFAULT_BASE_URL",
    "DEV_KEY_PREFIX",
    "DEV_RPM",
    "ENDPOINTS",
    "MAX_CREDITS",
    "MAX_QUERY_LENGTH",
    "MAX_RESULTS",
    "PROD_RPM",
    "RATE_WINDOW",
    "SEARCH_CREDITS",
    "SEARCH_DEPTHS",
    "STATUS",
    "TAVILY",
    "TIME_RANGES",
    "TOPICS",
    "USAGE_CALLS_PER_WINDOW",
    "USAGE_WINDOW",
    "Depth",
    "Tavily",
    "TimeRange",
    "Topic",
    "Usage",
    "error_detail",
    "key_left",
    "plan_left",
    "resolve_base_url",
]

DEFAULT_BASE_URL = "https://api.tavily.com"
#: `search_depth`: how hard Tavily looks, and what it costs.
Depth = Literal["basic", "advanced", "fast", "ultra-fast"]
#: `topic`: the kind of search.
Topic = Literal["general", "news", "finance"]
#: `time_range`: how recent the results must be.
TimeRange = Literal["day", "week", "month", "year"]
SEARCH_DEPTHS: tuple[str, ...] = get_args(Depth)
TOPICS: tuple[str, ...] = get_args(Topic)
TIME_RANGES: tuple[str, ...] = get_args(TimeRange)
#: Credits per search by depth (Tavily: basic 1, advanced 2).
SEARCH_CREDITS = {"basic": 1, "fast": 1, "ultra-fast": 1, "advanced": 2}
#: No single search costs more credits than this; a larger figure is not believed.
MAX_CREDITS = 100.0
#: `max_results` Tavily accepts.
MAX_RESULTS = 20
MAX_QUERY_LENGTH = _answers.MAX_QUERY_LENGTH
#: The `POST` endpoints a router sends requests to, all with the same key
#: selection, reactions and fail-over. Their cost is read from the answer's
#: `usage.credits` (the router always asks for it).
ENDPOINTS = ("/search", "/extract", "/crawl", "/map")
#: Requests per minute per key, as Tavily publishes them: development keys
#: (`tvly-dev-`) 100, production keys 1000, in any sliding 60-second window.
DEV_KEY_PREFIX = "tvly-dev-"
DEV_RPM = 100
PROD_RPM = 1000
RATE_WINDOW = 60.0
#: `/usage` is itself rate-limited: 10 requests per 10 minutes (incident 3).
USAGE_CALLS_PER_WINDOW = 10
USAGE_WINDOW = 600.0
#: Tavily's own status codes: 432 (a key's or plan's credits) and 433 (the
#: pay-as-you-go limit) mean out of credits; every other code means what HTTP says.
STATUS = {432: Outcome.EXHAUSTED, 433: Outcome.EXHAUSTED}


def resolve_base_url(base_url: str | None, environ: Mapping[str, str] | None = None) -> str:
    """`base_url` if given, else `TAVILY_BASE_URL`, else Tavily's public API.

    Raises [`ConfigError`][searchfuse.errors.ConfigError] for anything that is not an
    `http(s)://host[:port][/path]` address: a typo here would otherwise look like
    Tavily failing for every key.
    """
    if base_url:
        return validate_base_url(base_url, "base_url")
    env = (os.environ if environ is None else environ).get("TAVILY_BASE_URL")
    if env:
        return validate_base_url(env, "TAVILY_BASE_URL")
    return DEFAULT_BASE_URL


def error_detail(answer: Answer) -> str:
    """Tavily's error text from `{"detail": {"error": "..."}}` (or the raw body), one short line.

    Bounded to `MAX_ERROR_TEXT` characters: error text is stored in the
    state and shown in status tables, and a server may send megabytes.
    """
    try:
        data = answer.json()
    except ValueError:
        return short_text(answer.text[: MAX_ERROR_TEXT * 2])
    text: str | None = None
    if isinstance(data, dict):
        detail = data.get("detail")
        if isinstance(detail, dict) and isinstance(detail.get("error"), str):
            text = detail["error"]
        elif isinstance(detail, str):
            text = detail
        elif isinstance(data.get("error"), str):
            text = data["error"]
    if text is None:
        text = answer.text[: MAX_ERROR_TEXT * 2]
    return short_text(text)


def key_left(limit: float | None, used: float | None) -> float:
    """Credits left on a key (`inf` when it has no limit)."""
    if limit is None:
        return float("inf")
    return limit - (used or 0.0)


def plan_left(
    plan_limit: float | None,
    plan_used: float | None,
    paygo_limit: float | None = None,
    paygo_used: float | None = None,
) -> float:
    """Credits left on an account: the plan, then pay-as-you-go (`inf` when unknown)."""
    if plan_limit is None:
        return float("inf")
    left = plan_limit - (plan_used or 0.0)
    if paygo_limit is not None:
        left = max(left, 0.0) + max(paygo_limit - (paygo_used or 0.0), 0.0)
    return left


@dataclass(frozen=True)
class Usage(Figures):
    """The figures of one `/usage` answer."""

    @classmethod
    def from_json(cls, data: Any) -> Usage:
        """Parse Tavily's `/usage` body; missing parts become `None`."""
        key = data.get("key") if isinstance(data, dict) else None
        account = data.get("account") if isinstance(data, dict) else None
        key = key if isinstance(key, dict) else {}
        account = account if isinstance(account, dict) else {}
        plan = account.get("current_plan")
        return cls(
            key_usage=figure(key.get("usage")),
            key_limit=figure(key.get("limit")),
            search_usage=figure(key.get("search_usage")),
            current_plan=redact(short_text(plan), ())[:80] if isinstance(plan, str) else None,
            plan_usage=figure(account.get("plan_usage")),
            plan_limit=figure(account.get("plan_limit")),
            paygo_usage=figure(account.get("paygo_usage")),
            paygo_limit=figure(account.get("paygo_limit")),
        )

    def key_headroom(self) -> float:
        """Credits left on the key itself (`inf` when the key has no limit)."""
        return key_left(self.key_limit, self.key_usage)

    def plan_headroom(self) -> float:
        """Credits left on the account: plan, then pay-as-you-go (`inf` when unknown)."""
        return plan_left(self.plan_limit, self.plan_usage, self.paygo_limit, self.paygo_usage)


def _checked(body: Mapping[str, Any]) -> JSONBody:
    """The body as sent: `None` values left out, usage asked for, encoded once."""
    sent = {k: v for k, v in body.items() if v is not None}
    # Count credits locally instead of asking /usage before every request (incident 3).
    sent.setdefault("include_usage", True)
    try:
        return JSONBody(sent)
    except UnicodeEncodeError:
        # A lone surrogate: half an emoji, cut off in a model's JSON tool call.
        raise BadRequest(LONE_SURROGATE, sent=False) from None
    except RecursionError:
        raise BadRequest(
            "the parameters are nested too deeply to be sent as JSON", sent=False
        ) from None
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"the parameters cannot be sent as JSON ({exc})", sent=False) from None


class Tavily:
    """Tavily as the router drives it: `Authorization: Bearer`, JSON bodies, credits.

    See DESIGN's Tavily facts: `POST /search` (and `/extract`, `/crawl`,
    `/map`), errors as `{"detail": {"error": ...}}`, 429 with `Retry-After`,
    432/433 out of credits, `GET /usage` as a free probe (10 per 10 minutes).
    """

    name = "tavily"
    title = "Tavily"
    default_base_url = DEFAULT_BASE_URL
    base_url_env = "TAVILY_BASE_URL"
    endpoints: tuple[str, ...] = ENDPOINTS
    probe_rate: Rate | None = Rate(USAGE_CALLS_PER_WINDOW, USAGE_WINDOW)
    unit = "credits"
    key_is_url = False

    def __repr__(self) -> str:
        return "Tavily()"

    def headers(self, key: str) -> dict[str, str]:
        """`Authorization: Bearer <key>`: never the key in a body or a URL."""
        return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def check(self, endpoint: str, body: Mapping[str, Any]) -> JSONBody:
        """`body` for `endpoint`, checked and encoded once (see the module docstring)."""
        if endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {', '.join(ENDPOINTS)}, not {endpoint!r}")
        if not isinstance(body, Mapping):
            raise TypeError(f"body must be a mapping, not {type(body).__name__}")
        if "api_key" in body:
            raise TypeError(
                "pass keys to the Router, not in the request: api_key is not a parameter"
            )
        if endpoint == "/search":
            problem = query_problem(body.get("query"))
            if problem is not None:
                raise BadRequest(problem, sent=False)
            count = body.get("max_results")
            if (
                isinstance(count, int)
                and not isinstance(count, bool)
                and not 0 <= count <= MAX_RESULTS
            ):
                # Tavily would answer 400; in a chain another provider may honour it.
                raise BadRequest(
                    f"max_results must be a whole number from 0 to {MAX_RESULTS} for Tavily, "
                    f"not {count!r}",
                    sent=False,
                )
        return _checked(body)

    def build(self, endpoint: str, body: Mapping[str, Any]) -> Request:
        """`POST` the checked body to `endpoint`."""
        return Request("POST", endpoint, body)

    def classify(self, answer: Answer, now: float) -> Classified:
        """Tavily's reaction table: HTTP's meaning, 432/433 out of credits."""
        status = answer.status_code
        outcome = outcome_of_status(status, STATUS)
        if outcome is Outcome.OK:
            return Classified(outcome, status, "", None)  # a Retry-After says nothing here
        retry_after = parse_retry_after(answer.headers.get("retry-after"), now)
        return Classified(outcome, status, error_detail(answer), retry_after)

    def normalize(
        self, endpoint: str, data: dict[str, Any], body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Tavily's answer is already in Tavily's shape."""
        return data

    def cost(self, endpoint: str, body: Mapping[str, Any], data: dict[str, Any] | None) -> float:
        """Credits: the answer's `usage.credits` when plausible, else the price
        known in advance (a search by its depth; the other endpoints' cost
        depends on the pages, count one)."""
        if data is not None:
            usage = data.get("usage")
            credits = figure(usage.get("credits")) if isinstance(usage, dict) else None
            if credits is not None and not (endpoint == "/search" and credits > MAX_CREDITS):
                return credits
        if endpoint != "/search":
            return 1.0
        return float(SEARCH_CREDITS.get(str(body.get("search_depth", "basic")), 1))

    def rate(self, key: str) -> Rate:
        """100 requests a minute for a development key (`tvly-dev-`), else 1000."""
        return Rate(DEV_RPM if key.startswith(DEV_KEY_PREFIX) else PROD_RPM, RATE_WINDOW)

    def probe(self) -> Request:
        """`GET /usage`: free, but limited to 10 per 10 minutes per key."""
        return Request("GET", "/usage")

    def figures(self, answer: Answer) -> Usage | None:
        """The key's and account's figures from a `/usage` answer."""
        try:
            return Usage.from_json(answer.json())
        except ValueError:
            return None

    def observe(self, answer: Answer, now: float) -> Observed | None:
        """Tavily's headers say nothing of a key's pace or quota."""
        return None


#: The Tavily provider (it keeps no state: one instance serves every router).
TAVILY = Tavily()
