"""The HTTP side of the router: Tavily's ``POST /search`` and ``GET /usage`` over httpx.

One connection pool per router (a lazily created ``httpx.Client`` and
``httpx.AsyncClient``). Keys travel only in the ``Authorization: Bearer``
header, never in a body, a URL or a log line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_TIMEOUT",
    "MAX_QUERY_LENGTH",
    "SEARCH_CREDITS",
    "USAGE_CALLS_PER_WINDOW",
    "USAGE_WINDOW",
    "TavilyHTTP",
    "Usage",
    "error_detail",
    "key_left",
    "plan_left",
    "resolve_base_url",
]

DEFAULT_BASE_URL = "https://api.tavily.com"
#: Connect fast, allow a search a while: advanced searches take seconds.
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
MAX_QUERY_LENGTH = 400
#: Credits per search by depth (Tavily: basic 1, advanced 2).
SEARCH_CREDITS = {"basic": 1, "fast": 1, "ultra-fast": 1, "advanced": 2}
#: ``/usage`` is itself rate-limited: 10 requests per 10 minutes (incident 3).
USAGE_CALLS_PER_WINDOW = 10
USAGE_WINDOW = 600.0


def resolve_base_url(base_url: str | None) -> str:
    """``base_url`` if given, else ``TAVILY_BASE_URL``, else Tavily's public API."""
    url = base_url or os.environ.get("TAVILY_BASE_URL") or DEFAULT_BASE_URL
    return url.rstrip("/")


def error_detail(response: httpx.Response) -> str:
    """Tavily's error text from ``{"detail": {"error": "..."}}`` (or the raw body, shortened)."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:200].strip()
    if isinstance(data, dict):
        detail = data.get("detail")
        if isinstance(detail, dict) and isinstance(detail.get("error"), str):
            return str(detail["error"])
        if isinstance(detail, str):
            return detail
        if isinstance(data.get("error"), str):
            return str(data["error"])
    return str(data)[:200]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def key_left(limit: float | None, used: float | None) -> float:
    """Credits left on a key (``inf`` when it has no limit)."""
    if limit is None:
        return float("inf")
    return limit - (used or 0.0)


def plan_left(
    plan_limit: float | None,
    plan_used: float | None,
    paygo_limit: float | None = None,
    paygo_used: float | None = None,
) -> float:
    """Credits left on an account: the plan, then pay-as-you-go (``inf`` when unknown)."""
    if plan_limit is None:
        return float("inf")
    left = plan_limit - (plan_used or 0.0)
    if paygo_limit is not None:
        left = max(left, 0.0) + max(paygo_limit - (paygo_used or 0.0), 0.0)
    return left


@dataclass(frozen=True)
class Usage:
    """The figures of one ``/usage`` answer."""

    key_usage: float | None
    key_limit: float | None
    search_usage: float | None
    current_plan: str | None
    plan_usage: float | None
    plan_limit: float | None
    paygo_usage: float | None
    paygo_limit: float | None

    @classmethod
    def from_json(cls, data: Any) -> Usage:
        """Parse Tavily's ``/usage`` body; missing parts become ``None``."""
        key = data.get("key") if isinstance(data, dict) else None
        account = data.get("account") if isinstance(data, dict) else None
        key = key if isinstance(key, dict) else {}
        account = account if isinstance(account, dict) else {}
        plan = account.get("current_plan")
        return cls(
            key_usage=_number(key.get("usage")),
            key_limit=_number(key.get("limit")),
            search_usage=_number(key.get("search_usage")),
            current_plan=plan if isinstance(plan, str) else None,
            plan_usage=_number(account.get("plan_usage")),
            plan_limit=_number(account.get("plan_limit")),
            paygo_usage=_number(account.get("paygo_usage")),
            paygo_limit=_number(account.get("paygo_limit")),
        )

    def key_headroom(self) -> float:
        """Credits left on the key itself (``inf`` when the key has no limit)."""
        return key_left(self.key_limit, self.key_usage)

    def plan_headroom(self) -> float:
        """Credits left on the account: plan, then pay-as-you-go (``inf`` when unknown)."""
        return plan_left(self.plan_limit, self.plan_usage, self.paygo_limit, self.paygo_usage)


class TavilyHTTP:
    """The two Tavily endpoints the router uses, sync and async, over one pool each.

    ``transport`` / ``async_transport`` are the test seam (``httpx.MockTransport``
    or anything else httpx accepts).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout: httpx.Timeout | float | None = None,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = resolve_base_url(base_url)
        self.timeout = DEFAULT_TIMEOUT if timeout is None else httpx.Timeout(timeout)
        self._transport = transport
        self._async_transport = async_transport
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"TavilyHTTP({self.base_url!r})"

    @staticmethod
    def _headers(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    @property
    def client(self) -> httpx.Client:
        """The shared sync client (created on first use)."""
        if self._client is None:
            self._client = httpx.Client(
                base_url=self.base_url, timeout=self.timeout, transport=self._transport
            )
        return self._client

    @property
    def aclient(self) -> httpx.AsyncClient:
        """The shared async client (created on first use)."""
        if self._aclient is None:
            self._aclient = httpx.AsyncClient(
                base_url=self.base_url, timeout=self.timeout, transport=self._async_transport
            )
        return self._aclient

    def search(self, key: str, body: dict[str, Any]) -> httpx.Response:
        """``POST /search`` with ``key``."""
        return self.client.post("/search", json=body, headers=self._headers(key))

    def usage(self, key: str) -> httpx.Response:
        """``GET /usage`` for ``key``."""
        return self.client.get("/usage", headers=self._headers(key))

    async def asearch(self, key: str, body: dict[str, Any]) -> httpx.Response:
        """Async ``POST /search``."""
        return await self.aclient.post("/search", json=body, headers=self._headers(key))

    async def ausage(self, key: str) -> httpx.Response:
        """Async ``GET /usage``."""
        return await self.aclient.get("/usage", headers=self._headers(key))

    def close(self) -> None:
        """Close the sync pool."""
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        """Close both pools."""
        self.close()
        if self._aclient is not None:
            await self._aclient.aclose()
            self._aclient = None
