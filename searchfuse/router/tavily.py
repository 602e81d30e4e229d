"""Tavily over HTTP, by the names this module has always had.

The facts live in `searchfuse.providers.tavily`, the HTTP machinery in the
router's private `_http`, `_deadline` and `searchfuse._wire`; `TavilyHTTP` is
the HTTP client already set up for Tavily's endpoints and its bearer header.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from searchfuse._wire import (
    MAX_ERROR_TEXT,
    MAX_FIGURE,
    JSONBody,
    encode_json,
    figure,
    short_text,
    validate_base_url,
)
from searchfuse.errors import ResponseTooLarge
from searchfuse.providers._base import Request
from searchfuse.providers.tavily import (
    DEFAULT_BASE_URL,
    DEV_KEY_PREFIX,
    DEV_RPM,
    ENDPOINTS,
    MAX_QUERY_LENGTH,
    PROD_RPM,
    RATE_WINDOW,
    SEARCH_CREDITS,
    TAVILY,
    USAGE_CALLS_PER_WINDOW,
    USAGE_WINDOW,
    Usage,
    error_detail,
    key_left,
    plan_left,
    resolve_base_url,
)
from searchfuse.router._deadline import DeadlineExceeded
from searchfuse.router._http import DEFAULT_TIMEOUT, HTTP, MAX_BODY_BYTES, MAX_ERROR_BYTES, Reply

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_TIMEOUT",
    "DEV_KEY_PREFIX",
    "DEV_RPM",
    "ENDPOINTS",
    "MAX_BODY_BYTES",
    "MAX_ERROR_BYTES",
    "MAX_ERROR_TEXT",
    "MAX_FIGURE",
    "MAX_QUERY_LENGTH",
    "PROD_RPM",
    "RATE_WINDOW",
    "SEARCH_CREDITS",
    "USAGE_CALLS_PER_WINDOW",
    "USAGE_WINDOW",
    "DeadlineExceeded",
    "JSONBody",
    "Reply",
    "ResponseTooLarge",
    "TavilyHTTP",
    "Usage",
    "encode_json",
    "error_detail",
    "figure",
    "key_left",
    "plan_left",
    "resolve_base_url",
    "short_text",
    "validate_base_url",
]


class TavilyHTTP(HTTP):
    """Tavily's endpoints over one connection pool, sync and async (see `HTTP`)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout: httpx.Timeout | float | None = None,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            resolve_base_url(base_url, environ),
            TAVILY.headers,
            timeout=timeout,
            transport=transport,
            async_transport=async_transport,
        )

    def __repr__(self) -> str:
        return f"TavilyHTTP({self.base_url!r})"

    def post(
        self,
        key: str,
        path: str,
        body: dict[str, Any],
        deadline: float | None = None,
        *,
        timeout: float | None = None,
    ) -> Reply:
        """`POST` `body` to `path` (one of `ENDPOINTS`) with `key`."""
        return self.send(key, Request("POST", path, body), deadline, timeout=timeout)

    def search(self, key: str, body: dict[str, Any], deadline: float | None = None) -> Reply:
        """`POST /search` with `key`."""
        return self.post(key, "/search", body, deadline)

    def usage(self, key: str, deadline: float | None = None) -> Reply:
        """`GET /usage` for `key`."""
        return self.send(key, Request("GET", "/usage"), deadline)

    async def apost(
        self,
        key: str,
        path: str,
        body: dict[str, Any],
        deadline: float | None = None,
        *,
        timeout: float | None = None,
    ) -> Reply:
        """Async `post`."""
        return await self.asend(key, Request("POST", path, body), deadline, timeout=timeout)

    async def asearch(self, key: str, body: dict[str, Any], deadline: float | None = None) -> Reply:
        """Async `POST /search`."""
        return await self.apost(key, "/search", body, deadline)

    async def ausage(self, key: str, deadline: float | None = None) -> Reply:
        """Async `GET /usage`."""
        return await self.asend(key, Request("GET", "/usage"), deadline)
