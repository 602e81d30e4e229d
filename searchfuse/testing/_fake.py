"""A simulated Tavily API: one model, served in-process (httpx transport) or on loopback.

[`FakeTavily`][searchfuse.testing.FakeTavily] answers `POST /search`, `/extract`, `/crawl`,
`/map` and `GET /usage` the way Tavily does: bearer authentication, request
validation, a per-key requests-per-minute window, the rate-limited `/usage`
endpoint, credit accounting per key and per account (plan, then
pay-as-you-go), and Tavily's error bodies and status codes (400, 401, 429 with
`Retry-After`, 432, 433). Tests can inject faults (any status, timeouts,
connection errors, slow answers), revoke keys and set usage
figures, and read back every request it received (keys as fingerprints only).

Its numbers (credits per depth, rate limits, query length) are kept here on
purpose rather than borrowed from the client code: a model that shares the
client's constants would agree with the client's mistakes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import quote

import httpx

from searchfuse._secrets import fingerprint, mask
from searchfuse.testing._simulator import (
    Fault,
    RecordedRequest,
    Simulator,
    retry_after_header,
)

__all__ = [
    "CREDITS_PER_DEPTH",
    "DEFAULT_MAX_RESULTS",
    "DEFAULT_PLAN",
    "DEFAULT_PLAN_LIMIT",
    "DEV_KEY_PREFIX",
    "DEV_RPM",
    "MAX_QUERY_LENGTH",
    "MAX_RESULTS",
    "PROD_RPM",
    "RATE_WINDOW",
    "TOPICS",
    "USAGE_REQUESTS_PER_WINDOW",
    "USAGE_WINDOW",
    "Account",
    "FakeTavily",
    "Fault",
    "RecordedRequest",
]

# --- Tavily's rules, one place -------------------------------------------------

#: Credits a search costs, by `search_depth`.
CREDITS_PER_DEPTH: dict[str, int] = {"basic": 1, "fast": 1, "ultra-fast": 1, "advanced": 2}
#: Accepted values of `topic`.
TOPICS = frozenset({"general", "news", "finance"})
MAX_QUERY_LENGTH = 400
#: `max_results` must lie in 0..MAX_RESULTS.
MAX_RESULTS = 20
DEFAULT_MAX_RESULTS = 5
#: `/extract`: at most this many URLs per request; a basic extraction costs
#: 1 credit per `URLS_PER_CREDIT` successful URLs (advanced: 2).
MAX_EXTRACT_URLS = 20
URLS_PER_CREDIT = 5
EXTRACT_DEPTHS = {"basic": 1, "advanced": 2}
#: `/map` costs 1 credit per `PAGES_PER_CREDIT` pages (2 with
#: `instructions`); `/crawl` costs the map plus the extraction of its pages.
PAGES_PER_CREDIT = 10
#: `/crawl` and `/map` defaults and ranges (max_depth 1..5).
DEFAULT_MAX_DEPTH = 1
MAX_DEPTH = 5
DEFAULT_MAX_BREADTH = 20
DEFAULT_LIMIT = 50
#: Links the simulated site has per page (so a crawl finds a bounded number of pages).
LINKS_PER_PAGE = 3
#: Development keys get `DEV_RPM` requests per minute, all others `PROD_RPM`.
DEV_KEY_PREFIX = "tvly-dev-"
DEV_RPM = 100
PROD_RPM = 1000
#: The requests-per-minute window, in seconds (sliding).
RATE_WINDOW = 60.0
#: `/usage` allows this many requests per key per `USAGE_WINDOW` seconds.
USAGE_REQUESTS_PER_WINDOW = 10
USAGE_WINDOW = 600.0
#: What an account gets unless told otherwise: Tavily's free plan.
DEFAULT_PLAN = "Researcher"
DEFAULT_PLAN_LIMIT = 1000

#: Error texts, by status. Each answer is `{"detail": {"error": text}}`.
MESSAGES: dict[int, str] = {
    400: "Bad request.",
    401: "Unauthorized: missing or invalid API key.",
    403: "Forbidden: this API key is not allowed to make this request.",
    404: "Not Found",
    405: "Method Not Allowed",
    429: (
        "Your request has been blocked due to excessive requests. "
        "Please reduce the rate of requests."
    ),
    432: (
        "This request exceeds your plan's set usage limit. "
        "Please upgrade your plan or contact support."
    ),
    433: (
        "This request exceeds the pay-as-you-go limit. "
        "You can increase your limit on the Tavily dashboard."
    ),
    500: "Internal server error.",
    502: "Bad gateway.",
    503: "Service unavailable.",
    504: "Gateway timeout.",
}
_KEY_LIMIT_MESSAGE = (
    "This request exceeds this API key's set usage limit. "
    "Raise the key's limit on the Tavily dashboard or use another key."
)
#: Reason phrases for the statuses Tavily invented (the standard ones come from httpx).
REASONS: dict[int, str] = {432: "Plan Limit Exceeded", 433: "Pay-As-You-Go Limit Exceeded"}

_DOMAINS = ("example.com", "example.org", "example.net", "docs.example.com", "news.example.org")
_WHITESPACE = re.compile(r"\s+")

Json = dict[str, Any]


def _normalise(query: str) -> str:
    """Case-folded, whitespace-collapsed: queries that differ only so get the same results."""
    return _WHITESPACE.sub(" ", query).strip().casefold()


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()


def _error_response(
    status: int, detail: str | None = None, retry_after: float | str | None = None
) -> httpx.Response:
    """An error answer in Tavily's shape: `{"detail": {"error": ...}}`."""
    headers = {}
    if retry_after is not None:
        headers["Retry-After"] = retry_after_header(retry_after)
    body = {"detail": {"error": detail or MESSAGES.get(status, "Error.")}}
    return httpx.Response(status, json=body, headers=headers)


# --- the model's pieces ----------------------------------------------------------


@dataclass
class Account:
    """A Tavily account: a monthly plan shared by all its keys, and optional pay-as-you-go.

    `plan_limit=None` means an unlimited plan. `paygo_limit` is the
    pay-as-you-go cap in credits; `None` (or 0) means pay-as-you-go is off, so
    a spent plan answers 432; with it on, credits beyond the plan come from
    pay-as-you-go and a spent cap answers 433.
    """

    name: str
    current_plan: str = DEFAULT_PLAN
    plan_limit: int | None = DEFAULT_PLAN_LIMIT
    paygo_limit: int | None = None
    plan_usage: int = 0
    paygo_usage: int = 0
    search_usage: int = 0
    extract_usage: int = 0
    crawl_usage: int = 0
    map_usage: int = 0

    def to_usage(self) -> Json:
        """The `account` half of a `/usage` answer."""
        return {
            "current_plan": self.current_plan,
            "plan_usage": self.plan_usage,
            "plan_limit": self.plan_limit,
            "paygo_usage": self.paygo_usage,
            "paygo_limit": self.paygo_limit,
            "search_usage": self.search_usage,
            "extract_usage": self.extract_usage,
            "crawl_usage": self.crawl_usage,
            "map_usage": self.map_usage,
            "research_usage": 0,
        }


@dataclass(eq=False)
class _Key:
    """One API key's state. The raw key lives only in
    [`FakeTavily`][searchfuse.testing.FakeTavily]'s key table."""

    fingerprint: str
    masked: str
    account: str
    limit: int | None
    rpm: int
    usage: int = 0
    search_usage: int = 0
    extract_usage: int = 0
    crawl_usage: int = 0
    map_usage: int = 0
    revoked: bool = False
    #: Every `POST` this key made (all endpoints share the per-minute limit).
    search_times: deque[float] = field(default_factory=deque)
    usage_times: deque[float] = field(default_factory=deque)

    def to_usage(self) -> Json:
        return {
            "usage": self.usage,
            "limit": self.limit,
            "search_usage": self.search_usage,
            "extract_usage": self.extract_usage,
            "crawl_usage": self.crawl_usage,
            "map_usage": self.map_usage,
            "research_usage": 0,
        }


# --- the fake ----------------------------------------------------------------------


class FakeTavily(Simulator):
    """A simulated Tavily API for tests: `POST /search`, `/extract`, `/crawl`,
    `/map` and `GET /usage`.

    Example:
        ```python
        clock = FakeClock()
        fake = FakeTavily(keys=["tvly-dev-test0001", "tvly-dev-test0002"], clock=clock)
        client = httpx.Client(base_url="https://api.tavily.com", transport=fake.transport())
        r = client.post("/search", json={"query": "python"},
                        headers={"Authorization": "Bearer tvly-dev-test0001"})
        assert r.status_code == 200 and len(fake.searches) == 1
        ```

    Args:
        keys: keys to add, each in an account of its own (see
            [`add_key`][searchfuse.testing.FakeTavily.add_key]).
        clock: zero-argument callable returning epoch seconds; every rate
            window reads it. Defaults to `searchfuse._clock.now` (fake time
            under [`set_testing`][searchfuse.testing.set_testing], else real time).
        sleeper: how an in-process slow answer waits. Defaults to
            `clock.advance` when the clock has one (a
            [`FakeClock`][searchfuse.testing.FakeClock]), else `searchfuse._clock.sleep`.
        retry_after: a fixed `Retry-After` (seconds) for rate-limit 429s;
            `None` (default) answers the seconds until the window frees,
            rounded up.

    Only made-up keys belong in tests (`tvly-dev-test0001`...). All methods
    are thread-safe.
    """

    default_url: ClassVar[str] = "https://api.tavily.com"
    reasons: ClassVar[dict[int, str]] = REASONS

    def __init__(
        self,
        keys: Iterable[str] = (),
        *,
        clock: Callable[[], float] | None = None,
        sleeper: Callable[[float], None] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(clock=clock, sleeper=sleeper)
        self.retry_after = retry_after
        self._keys: dict[str, _Key] = {}
        self._accounts: dict[str, Account] = {}
        for key in keys:
            self.add_key(key)

    # -- set-up -------------------------------------------------------------------

    def add_account(
        self,
        name: str,
        *,
        plan_limit: int | None = DEFAULT_PLAN_LIMIT,
        paygo_limit: int | None = None,
        current_plan: str = DEFAULT_PLAN,
    ) -> Account:
        """Create the account `name` and return it (see
        [`Account`][searchfuse.testing.Account])."""
        with self._lock:
            if name in self._accounts:
                raise ValueError(f"account {name!r} already exists")
            account = Account(
                name, current_plan=current_plan, plan_limit=plan_limit, paygo_limit=paygo_limit
            )
            self._accounts[name] = account
            return account

    def add_key(
        self,
        key: str,
        *,
        account: str | None = None,
        limit: int | None = None,
        rpm: int | None = None,
    ) -> None:
        """Accept `key`.

        Args:
            account: the account it belongs to; created with default figures if
                it does not exist yet. `None` gives the key an account of its own.
            limit: the key's own credit limit (`None` = unlimited).
            rpm: requests per minute for `/search`; default 100 for
                `tvly-dev-` keys, 1000 for others.
        """
        if not key or key != key.strip() or any(c.isspace() for c in key):
            raise ValueError("a key must be a non-empty string without whitespace")
        with self._lock:
            if key in self._keys:
                raise ValueError(f"key {mask(key)} already exists")
            account_name = account if account is not None else f"account-{fingerprint(key)[:8]}"
            if account_name not in self._accounts:
                self.add_account(account_name)
            if rpm is None:
                rpm = DEV_RPM if key.startswith(DEV_KEY_PREFIX) else PROD_RPM
            self._keys[key] = _Key(
                fingerprint=fingerprint(key),
                masked=mask(key),
                account=account_name,
                limit=limit,
                rpm=rpm,
            )

    @property
    def keys(self) -> list[str]:
        """The keys this fake accepts (revoked ones included), in the order they were added."""
        with self._lock:
            return list(self._keys)

    def account(self, name: str) -> Account:
        """The account called `name` (the live object)."""
        with self._lock:
            return self._accounts[name]

    def account_of(self, key: str) -> Account:
        """The account `key` belongs to (the live object)."""
        with self._lock:
            return self._accounts[self._key(key).account]

    def _key(self, key: str) -> _Key:
        try:
            return self._keys[key]
        except KeyError:
            raise KeyError(f"unknown key {mask(key)}") from None

    def revoke(self, key: str) -> None:
        """Make `key` answer 401 from now on (until
        [`restore`][searchfuse.testing.FakeTavily.restore])."""
        with self._lock:
            self._key(key).revoked = True

    def restore(self, key: str) -> None:
        """Accept a revoked `key` again."""
        with self._lock:
            self._key(key).revoked = False

    def set_limit(self, key: str, limit: int | None) -> None:
        """Set `key`'s own credit limit (`None` = unlimited)."""
        with self._lock:
            self._key(key).limit = limit

    def set_rpm(self, key: str, rpm: int) -> None:
        """Set `key`'s requests-per-minute limit for `/search`."""
        with self._lock:
            self._key(key).rpm = rpm

    def set_usage(
        self,
        key: str,
        *,
        usage: int | None = None,
        search_usage: int | None = None,
        plan_usage: int | None = None,
        paygo_usage: int | None = None,
    ) -> None:
        """Set usage figures directly, e.g. a key at 37% of its limit.

        `usage` and `search_usage` are the key's figures (`search_usage`
        follows `usage` when not given: all credits went to searches);
        `plan_usage` and `paygo_usage` are its account's.

        Example:
            ```python
            fake.set_limit("tvly-dev-test0001", 1000)
            fake.set_usage("tvly-dev-test0001", usage=370)
            ```
        """
        with self._lock:
            state = self._key(key)
            account = self._accounts[state.account]
            if usage is not None:
                state.usage = usage
                state.search_usage = usage if search_usage is None else search_usage
            elif search_usage is not None:
                state.search_usage = search_usage
            if plan_usage is not None:
                account.plan_usage = plan_usage
            if paygo_usage is not None:
                account.paygo_usage = paygo_usage

    def reset_usage(self) -> None:
        """Zero every key's and account's usage, as Tavily's monthly reset does."""
        with self._lock:
            for state in self._keys.values():
                state.usage = state.search_usage = 0
                state.extract_usage = state.crawl_usage = state.map_usage = 0
            for account in self._accounts.values():
                account.plan_usage = account.paygo_usage = account.search_usage = 0
                account.extract_usage = account.crawl_usage = account.map_usage = 0

    def usage_of(self, key: str) -> Json:
        """What `GET /usage` would answer for `key`, without spending a `/usage` request."""
        with self._lock:
            state = self._key(key)
            return {"key": state.to_usage(), "account": self._accounts[state.account].to_usage()}

    # -- records -----------------------------------------------------------------

    @property
    def usage_requests(self) -> list[RecordedRequest]:
        """The `/usage` requests received so far."""
        return [r for r in self.requests if r.path == "/usage"]

    # -- what Tavily says ----------------------------------------------------------

    def _key_of(self, request: httpx.Request) -> str | None:
        return _bearer_key(request)

    def _error(
        self, status: int, detail: str | None = None, retry_after: float | str | None = None
    ) -> httpx.Response:
        return _error_response(status, detail, retry_after)

    # -- the model ----------------------------------------------------------------

    def _process(
        self, request: httpx.Request, key: str | None, raw: bytes, now: float
    ) -> tuple[httpx.Response, int]:
        """Route, authenticate, rate-limit and serve. Returns the response and its cost."""
        method, path = request.method.upper(), request.url.path
        allowed = "GET" if path == "/usage" else "POST" if path in _SERVED else None
        if allowed is None:
            return _error_response(404), 0
        if method != allowed:
            return _error_response(405), 0
        state = self._keys.get(key) if key else None
        if state is None or state.revoked:
            return _error_response(401), 0
        if path == "/usage":
            return self._usage(state, now), 0
        return self._post(state, path, raw, now)

    def _admit(
        self, window: deque[float], allowed: int, span: float, now: float
    ) -> httpx.Response | None:
        """Count a request in a sliding window, or answer 429 if the window is full.

        Refused requests are not counted: a client that waits for Retry-After
        gets through.
        """
        while window and window[0] <= now - span:
            window.popleft()
        if len(window) < allowed:
            window.append(now)
            return None
        if self.retry_after is not None:
            wait: float = self.retry_after
        else:
            wait = max(1, math.ceil(window[0] + span - now))
        return _error_response(429, retry_after=wait)

    def _usage(self, state: _Key, now: float) -> httpx.Response:
        refused = self._admit(state.usage_times, USAGE_REQUESTS_PER_WINDOW, USAGE_WINDOW, now)
        if refused is not None:
            return refused
        account = self._accounts[state.account]
        return httpx.Response(200, json={"key": state.to_usage(), "account": account.to_usage()})

    def _post(self, state: _Key, path: str, raw: bytes, now: float) -> tuple[httpx.Response, int]:
        refused = self._admit(state.search_times, state.rpm, RATE_WINDOW, now)
        if refused is not None:
            return refused, 0
        validate, serve = _SERVED[path]
        params = validate(raw)
        if isinstance(params, str):
            return _error_response(400, params), 0
        self._request_number += 1
        payload, credits = serve(params, self._request_number)
        refusal = self._charge(state, credits, path.strip("/"))
        if refusal is not None:
            self._request_number -= 1
            return refusal, 0
        if params.get("include_usage"):
            payload["usage"] = {"credits": credits}
        return httpx.Response(200, json=payload), credits

    def _charge(self, state: _Key, credits: int, kind: str = "search") -> httpx.Response | None:
        """Spend `credits` from the key, then the plan, then pay-as-you-go; or refuse."""
        account = self._accounts[state.account]
        if state.limit is not None and state.usage + credits > state.limit:
            return _error_response(432, _KEY_LIMIT_MESSAGE)
        if account.plan_limit is None:
            from_plan = credits
        else:
            from_plan = min(credits, max(0, account.plan_limit - account.plan_usage))
        from_paygo = credits - from_plan
        if from_paygo:
            if not account.paygo_limit:
                return _error_response(432)
            if account.paygo_usage + from_paygo > account.paygo_limit:
                return _error_response(433)
        counter = f"{kind}_usage"
        state.usage += credits
        setattr(state, counter, getattr(state, counter) + credits)
        account.plan_usage += from_plan
        account.paygo_usage += from_paygo
        setattr(account, counter, getattr(account, counter) + credits)
        return None

    def __repr__(self) -> str:
        with self._lock:
            keys = [state.masked for state in self._keys.values()]
            return f"FakeTavily(keys={keys}, requests={len(self._records)})"


# --- helpers -----------------------------------------------------------------------


def _bearer_key(request: httpx.Request) -> str | None:
    """The key from `Authorization: Bearer <key>`, or `None`."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def _json_object(raw: bytes) -> Json | str:
    """The body as a JSON object, or the 400 error text."""
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return "Invalid JSON in request body."
    if not isinstance(data, dict):
        return "The request body must be a JSON object."
    return data


def _validate_search(raw: bytes) -> Json | str:
    """The search parameters with defaults filled in, or the 400 error text."""
    data = _json_object(raw)
    if isinstance(data, str):
        return data
    query = data.get("query")
    if not isinstance(query, str) or not query.strip():
        return "Query is missing or empty."
    if len(query) > MAX_QUERY_LENGTH:
        return f"Query is too long. Max query length is {MAX_QUERY_LENGTH} characters."
    max_results = data.get("max_results", DEFAULT_MAX_RESULTS)
    if max_results is None:
        max_results = DEFAULT_MAX_RESULTS
    if (
        isinstance(max_results, bool)
        or not isinstance(max_results, int)
        or not 0 <= max_results <= MAX_RESULTS
    ):
        return f"max_results must be an integer between 0 and {MAX_RESULTS}."
    depth = data.get("search_depth") or "basic"
    if not isinstance(depth, str) or depth not in CREDITS_PER_DEPTH:
        allowed = ", ".join(CREDITS_PER_DEPTH)
        return f"Invalid search_depth {depth!r}. Must be one of: {allowed}."
    topic = data.get("topic") or "general"
    if not isinstance(topic, str) or topic not in TOPICS:
        return f"Invalid topic {topic!r}. Must be one of: general, news, finance."
    include_domains = data.get("include_domains") or []
    if not isinstance(include_domains, list) or not all(
        isinstance(d, str) for d in include_domains
    ):
        return "include_domains must be a list of strings."
    return {
        **data,
        "query": query,
        "max_results": max_results,
        "search_depth": depth,
        "topic": topic,
        "include_domains": include_domains,
    }


def _request_id(number: int) -> str:
    return str(uuid.UUID(bytes=bytes.fromhex(_digest("request", number)[:32]), version=4))


def _search_answer(params: Json, number: int) -> tuple[Json, int]:
    credits = CREDITS_PER_DEPTH[params["search_depth"]]
    return _search_payload(params, credits, number), credits


def _search_payload(params: Json, credits: int, number: int) -> Json:
    """A deterministic Tavily search answer for `params`."""
    query: str = params["query"]
    normalised = _normalise(query)
    seed = _digest("query", normalised)
    domains: list[str] = params["include_domains"] or list(_DOMAINS)
    slug = quote("-".join(normalised.split())[:60], safe="-")
    results = []
    for i in range(params["max_results"]):
        digest = _digest(normalised, i)
        domain = domains[(int(digest[:4], 16) + i) % len(domains)]
        title = f"{normalised} - result {i + 1}"
        content = (
            f"Simulated result {i + 1} for '{normalised}'. "
            f"Deterministic text derived from the query (ref {digest[:10]})."
        )
        results.append(
            {
                "title": title,
                "url": f"https://{domain}/{slug}/{digest[:10]}",
                "content": content,
                # Strictly decreasing: a 0.04 step beats a jitter below 0.03.
                "score": round(0.98 - 0.04 * i - int(digest[4:6], 16) / 255 * 0.03, 4),
                "raw_content": (
                    f"# {title}\n\n{content}\n\nFull page text of simulated result {i + 1}."
                    if params.get("include_raw_content")
                    else None
                ),
            }
        )
    images: list[Any] = []
    if params.get("include_images"):
        urls = [f"https://images.example.com/{seed[i * 8 : i * 8 + 12]}.jpg" for i in range(3)]
        if params.get("include_image_descriptions"):
            images = [{"url": u, "description": f"Image about '{normalised}'."} for u in urls]
        else:
            images = urls
    answer = (
        f"Simulated answer to '{normalised}' from {len(results)} sources."
        if params.get("include_answer")
        else None
    )
    payload: Json = {
        "query": query,
        "follow_up_questions": None,
        "answer": answer,
        "images": images,
        "results": results,
        "response_time": round(0.4 + int(seed[:4], 16) / 65535 + (credits - 1), 2),
        "request_id": _request_id(number),
    }
    return payload


# --- /extract, /crawl, /map -----------------------------------------------------


def _is_web_url(url: str) -> bool:
    return bool(re.match(r"^https?://[^/\s]+\.[^/\s]+", url))


def _validate_extract(raw: bytes) -> Json | str:
    data = _json_object(raw)
    if isinstance(data, str):
        return data
    urls = data.get("urls")
    if isinstance(urls, str):
        urls = [urls]
    if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
        return "urls is missing: give a URL or a list of URLs."
    if len(urls) > MAX_EXTRACT_URLS:
        return f"Too many URLs: at most {MAX_EXTRACT_URLS} per request."
    depth = data.get("extract_depth") or "basic"
    if not isinstance(depth, str) or depth not in EXTRACT_DEPTHS:
        return f"Invalid extract_depth {depth!r}. Must be one of: basic, advanced."
    return {**data, "urls": urls, "extract_depth": depth}


def _page_text(url: str, query: str | None = None) -> str:
    text = (
        f"# Simulated page {url}\n\nDeterministic text of {url} (ref {_digest('page', url)[:10]})."
    )
    if query:
        text += f"\n\nThe part about '{_normalise(query)}'."
    return text


def _extract_cost(pages: int, depth: str) -> int:
    return math.ceil(pages / URLS_PER_CREDIT) * EXTRACT_DEPTHS[depth]


def _extract_answer(params: Json, number: int) -> tuple[Json, int]:
    """Pages for every web URL; anything else lands in `failed_results`."""
    results: list[Json] = []
    failed: list[Json] = []
    for url in params["urls"]:
        if _is_web_url(url):
            result: Json = {"url": url, "raw_content": _page_text(url, params.get("query"))}
            if params.get("include_images"):
                result["images"] = [f"{url.rstrip('/')}/image.jpg"]
            if params.get("include_favicon"):
                result["favicon"] = f"{url.split('/', 3)[2]}/favicon.ico"
            results.append(result)
        else:
            failed.append({"url": url, "error": "Failed to fetch url"})
    payload: Json = {
        "results": results,
        "failed_results": failed,
        "response_time": round(0.2 + 0.1 * len(results), 2),
        "request_id": _request_id(number),
    }
    return payload, _extract_cost(len(results), params["extract_depth"])


def _validate_site(raw: bytes) -> Json | str:
    data = _json_object(raw)
    if isinstance(data, str):
        return data
    url = data.get("url")
    if not isinstance(url, str) or not url.strip():
        return "url is missing or empty."
    limits = {
        "max_depth": (DEFAULT_MAX_DEPTH, MAX_DEPTH),
        "max_breadth": (DEFAULT_MAX_BREADTH, None),
        "limit": (DEFAULT_LIMIT, None),
    }
    checked: Json = {}
    for name, (default, top) in limits.items():
        value = data.get(name)
        value = default if value is None else value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{name} must be a positive integer."
        if top is not None and value > top:
            return f"{name} must be at most {top}."
        checked[name] = value
    depth = data.get("extract_depth") or "basic"
    if not isinstance(depth, str) or depth not in EXTRACT_DEPTHS:
        return f"Invalid extract_depth {depth!r}. Must be one of: basic, advanced."
    base = url if "://" in url else f"https://{url}"
    return {**data, **checked, "url": base.rstrip("/"), "extract_depth": depth}


def _site_pages(params: Json) -> list[str]:
    """The pages a crawl of the simulated site reaches, breadth first, within the limits."""
    base: str = params["url"]
    pages = [base]
    level = [base]
    for _ in range(params["max_depth"]):
        following = []
        for page in level:
            links = [f"{page}/{_digest('link', page, i)[:6]}" for i in range(LINKS_PER_PAGE)]
            following.extend(links[: params["max_breadth"]])
        pages.extend(following)
        level = following
    return pages[: params["limit"]]


def _map_cost(params: Json, pages: int) -> int:
    return math.ceil(pages / PAGES_PER_CREDIT) * (2 if params.get("instructions") else 1)


def _map_answer(params: Json, number: int) -> tuple[Json, int]:
    pages = _site_pages(params)
    payload: Json = {
        "base_url": params["url"],
        "results": pages,
        "response_time": round(0.3 + 0.05 * len(pages), 2),
        "request_id": _request_id(number),
    }
    return payload, _map_cost(params, len(pages))


def _crawl_answer(params: Json, number: int) -> tuple[Json, int]:
    pages = _site_pages(params)
    results: list[Json] = []
    for page in pages:
        result: Json = {"url": page, "raw_content": _page_text(page, params.get("instructions"))}
        if params.get("include_favicon"):
            result["favicon"] = f"{page.split('/', 3)[2]}/favicon.ico"
        results.append(result)
    payload: Json = {
        "base_url": params["url"],
        "results": results,
        "response_time": round(0.5 + 0.1 * len(pages), 2),
        "request_id": _request_id(number),
    }
    credits = _map_cost(params, len(pages)) + _extract_cost(len(pages), params["extract_depth"])
    return payload, credits


#: The `POST` endpoints: how each validates its body and what it answers (and costs).
_SERVED: dict[
    str, tuple[Callable[[bytes], Json | str], Callable[[Json, int], tuple[Json, int]]]
] = {
    "/search": (_validate_search, _search_answer),
    "/extract": (_validate_extract, _extract_answer),
    "/crawl": (_validate_site, _crawl_answer),
    "/map": (_validate_site, _map_answer),
}
