"""Tavily: its published facts (parameters, prices, limits, addresses), written once.

The router, the guard's tools, the integrations, the CLI and the drop-ins
read these names; nothing else restates them. (The simulated Tavily in
`searchfuse.testing` keeps its own copy on purpose, so it cannot agree with a
mistake here.)
"""

from __future__ import annotations

from typing import Literal, get_args

from searchfuse import _answers

__all__ = [
    "DEFAULT_BASE_URL",
    "DEV_KEY_PREFIX",
    "DEV_RPM",
    "ENDPOINTS",
    "MAX_QUERY_LENGTH",
    "MAX_RESULTS",
    "PROD_RPM",
    "RATE_WINDOW",
    "SEARCH_CREDITS",
    "SEARCH_DEPTHS",
    "TIME_RANGES",
    "TOPICS",
    "USAGE_CALLS_PER_WINDOW",
    "USAGE_WINDOW",
    "Depth",
    "TimeRange",
    "Topic",
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
