"""The HTTP side of the router: Tavily's `POST` endpoints and `GET /usage` over httpx.

One connection pool per router (a lazily created `httpx.Client` and
`httpx.AsyncClient`). Keys travel only in the `Authorization: Bearer`
header, never in a body, a URL or a log line.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import os
import ssl
import threading
import time
import urllib.parse
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from searchfuse._secrets import redact
from searchfuse.errors import ConfigError, SearchFailed
from searchfuse.providers.tavily import (
    DEFAULT_BASE_URL,
    DEV_KEY_PREFIX,
    DEV_RPM,
    ENDPOINTS,
    MAX_QUERY_LENGTH,
    PROD_RPM,
    RATE_WINDOW,
    SEARCH_CREDITS,
    USAGE_CALLS_PER_WINDOW,
    USAGE_WINDOW,
)

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

#: Connect fast, allow a search a while: advanced searches take seconds.
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
#: The most of a successful answer that is read (20 results with raw content
#: stay far below it; a 300 MB answer is not Tavily).
MAX_BODY_BYTES = 16 * 1024 * 1024
#: The most of an error answer that is read.
MAX_ERROR_BYTES = 64 * 1024
#: Error text kept (in the state, in exceptions, in status tables): one short line.
MAX_ERROR_TEXT = 300
#: Credit figures above this are not believed (Tavily's largest plans are far below).
MAX_FIGURE = 1e12


def resolve_base_url(base_url: str | None, environ: Mapping[str, str] | None = None) -> str:
    """`base_url` if given, else `TAVILY_BASE_URL`, else Tavily's public API.

    Raises [`ConfigError`][searchfuse.errors.ConfigError] for anything that is not an
    `http(s)://host[:port][/path]`
    address: a typo here would otherwise look like Tavily failing for every key.
    """
    if base_url:
        return validate_base_url(base_url, "base_url")
    env = (os.environ if environ is None else environ).get("TAVILY_BASE_URL")
    if env:
        return validate_base_url(env, "TAVILY_BASE_URL")
    return DEFAULT_BASE_URL


def validate_base_url(url: str, source: str) -> str:
    """`url` without a trailing slash, or [`ConfigError`][searchfuse.errors.ConfigError] naming
    `source` and the fix."""
    fix = f"set {source} to Tavily's address, {DEFAULT_BASE_URL}, or to an http(s) URL of a proxy"

    def bad(problem: str) -> ConfigError:
        return ConfigError("environment" if source.isupper() else source, source, problem, fix)

    if not isinstance(url, str):
        raise bad(f"expected a URL string, got {type(url).__name__}")
    text = url.strip()
    if not text.isascii() or any(ch.isspace() or not ch.isprintable() for ch in text):
        raise bad(f"{text[:80]!r} contains spaces or characters a URL cannot hold")
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise bad(f"{text[:80]!r} is not a usable URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise bad(
            f"{text[:80]!r} has no http:// or https:// scheme"
            if not parts.scheme or "." in parts.scheme
            else f"{text[:80]!r} uses {parts.scheme}://; only http and https work"
        )
    if not parts.hostname:
        raise bad(f"{text[:80]!r} names no host")
    if port == 0:
        raise bad(f"{text[:80]!r} has port 0")
    if parts.username or parts.password:
        raise bad("the URL holds a user name or password; keys travel in a header, not the URL")
    if parts.query or parts.fragment:
        raise bad(f"{text[:80]!r} has a query or fragment; give only scheme, host, port and path")
    return text.rstrip("/")


def short_text(text: str) -> str:
    """One line of printable text, at most `MAX_ERROR_TEXT` characters (error texts)."""
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    if len(text) > MAX_ERROR_TEXT:
        text = text[: MAX_ERROR_TEXT - 1] + "…"
    return text


def error_detail(response: Reply) -> str:
    """Tavily's error text from `{"detail": {"error": "..."}}` (or the raw body), one short line.

    Bounded to `MAX_ERROR_TEXT` characters: error text is stored in the
    state and shown in status tables, and a server may send megabytes.
    """
    try:
        data = response.json()
    except ValueError:
        return short_text(response.text[: MAX_ERROR_TEXT * 2])
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
        text = response.text[: MAX_ERROR_TEXT * 2]
    return short_text(text)


def figure(value: Any) -> float | None:
    """A credit figure from a server, or `None` when it is not a plausible one.

    Servers are not trusted: booleans, strings, negatives, NaN, infinities and
    numbers beyond `MAX_FIGURE` all count as absent.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    if not math.isfinite(number) or number < 0 or number > MAX_FIGURE:
        return None
    return number


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
class Usage:
    """The figures of one `/usage` answer."""

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


@dataclass(frozen=True)
class Reply:
    """An answer from Tavily, read in full but within `MAX_BODY_BYTES`."""

    status_code: int
    headers: httpx.Headers
    content: bytes

    def json(self) -> Any:
        """The body as JSON; `ValueError` when it is not JSON (or absurdly nested)."""
        try:
            return json.loads(self.content)
        except RecursionError:
            raise ValueError("the JSON is nested too deeply") from None

    @property
    def text(self) -> str:
        """The body as text (undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")


class DeadlineExceeded(httpx.TimeoutException):
    """The call's deadline passed while a request was still running."""


class ResponseTooLarge(SearchFailed):
    """The answer was larger than `MAX_BODY_BYTES`; it was not read."""

    def __init__(self, status_code: int, limit: int) -> None:
        super().__init__(
            f"the answer to this search was larger than {limit // (1024 * 1024)} MB and was "
            "not read; that is not what Tavily sends (check base_url / TAVILY_BASE_URL)",
            status_code=status_code,
            detail="response too large",
        )


#: The deadline of the call running in this thread or task (a `time.monotonic()` instant).
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "searchfuse_deadline", default=None
)


def _bounded(timeout: float | None) -> float | None:
    """`timeout` cut to what is left of the current call's deadline."""
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every read and write ends by the call's deadline.

    httpx's timeouts bound each socket operation; a server dripping one byte
    per 0.1 s never trips them. Cutting each operation to the deadline does.
    """

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, _bounded(timeout))
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(
            host, port, _bounded(timeout), local_address, socket_options
        )
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(
            self._inner.connect_unix_socket(path, _bounded(timeout), socket_options)
        )

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _deadline_transport() -> httpx.BaseTransport:
    """httpx's own transport, with every socket operation bounded by the call's deadline."""
    transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.NetworkBackend):
        pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    # Otherwise (another httpx layout) the body loop still checks the deadline per chunk.
    return transport


class _Body:
    """An answer's body, collected chunk by chunk within its size limit.

    A success larger than `MAX_BODY_BYTES` raises `ResponseTooLarge`;
    an error answer is cut at `MAX_ERROR_BYTES` (its start says enough).
    """

    def __init__(self, status_code: int) -> None:
        self.status_code = status_code
        self.limit = MAX_BODY_BYTES if status_code < 300 else MAX_ERROR_BYTES
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, chunk: bytes) -> bool:
        """Keep `chunk`; True when the rest of the body is not worth reading."""
        room = self.limit - self.size
        self.size += len(chunk)
        if len(chunk) <= room:
            self.chunks.append(chunk)
            return False
        if self.status_code < 300:
            raise ResponseTooLarge(self.status_code, self.limit)
        self.chunks.append(chunk[:room])
        return True

    def content(self) -> bytes:
        return b"".join(self.chunks)


def encode_json(body: dict[str, Any]) -> bytes:
    """`body` as the JSON text sent to Tavily (UTF-8, no NaN or infinity).

    Raises `ValueError`, `TypeError` or `UnicodeEncodeError` for what JSON
    cannot carry.
    """
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(
        "utf-8"
    )


class JSONBody(dict[str, Any]):
    """A request body checked once, with its JSON text (`content`) encoded then.

    The router encodes a body when it checks it, before any key is granted;
    the request sends that text instead of encoding the body again.
    """

    __slots__ = ("content",)

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body)
        self.content = encode_json(self)


class _Jarless(httpx.Cookies):
    """A cookie jar that keeps nothing."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None

    def set(self, name: str, value: str, domain: str = "", path: str = "/") -> None:
        return None


class _WithoutCookies:
    """An httpx client that keeps no cookies.

    Tavily's API sets none; a jar shared by every key would send a cookie one
    key's answer set with another key's requests, and parsing each answer for
    cookies was a tenth of the client's work per request.
    """

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        raise TypeError("the router's HTTP client keeps no cookies")


class _Client(_WithoutCookies, httpx.Client):
    pass


class _AsyncClient(_WithoutCookies, httpx.AsyncClient):
    pass


_NO_COOKIES = _Jarless()


def _over(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


class TavilyHTTP:
    """The Tavily endpoints the router uses, sync and async.

    One sync pool per router, created once under a lock (threads share it),
    and one async pool per event loop: an `httpx.AsyncClient` is bound to
    the loop it first ran on, so a router used from `asyncio.run` twice must
    not reuse the first loop's connections.

    Every read is bounded: at most `MAX_BODY_BYTES` of an answer, at
    most `MAX_ERROR_BYTES` of an error, and nothing past the call's
    deadline (`deadline=`, a `time.monotonic()` instant).

    `transport` / `async_transport` are the test seam (`httpx.MockTransport`
    or anything else httpx accepts).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout: httpx.Timeout | float | None = None,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.base_url = resolve_base_url(base_url, environ)
        self.timeout = DEFAULT_TIMEOUT if timeout is None else httpx.Timeout(timeout)
        self._transport = transport
        self._async_transport = async_transport
        self._client: httpx.Client | None = None
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient]
        self._aclients = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        #: Each endpoint's absolute URL, made once: httpx parses and joins a
        #: relative path on every request, which costs more than the rest of
        #: building it.
        self._urls: dict[str, httpx.URL] = {}
        #: Each key's request headers: the client's own and ours, merged once.
        self._key_headers: dict[str, httpx.Headers] = {}

    def __repr__(self) -> str:
        return f"TavilyHTTP({self.base_url!r})"

    @staticmethod
    def _headers(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    @staticmethod
    def _content(body: dict[str, Any] | None) -> bytes | None:
        if body is None:
            return None
        if isinstance(body, JSONBody):
            return body.content
        return encode_json(body)

    def _url(self, client: httpx.Client | httpx.AsyncClient, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:
            # The URL httpx itself makes of the base URL and `path`.
            url = self._urls[path] = client.build_request("GET", path).url
        return url

    def _build(
        self,
        client: httpx.Client | httpx.AsyncClient,
        method: str,
        path: str,
        key: str,
        body: dict[str, Any] | None,
        deadline: float | None,
        base: httpx.Timeout | None,
    ) -> httpx.Request:
        """The request `client.build_request` would make, without merging the
        client's headers, URL and cookies anew each time."""
        headers = self._key_headers.get(key)
        if headers is None:
            # The client was made without headers: its own are httpx's defaults,
            # the same for the sync and the async client.
            headers = httpx.Headers(client.headers)
            headers.update(self._headers(key))
            if len(self._key_headers) < 10_000:
                self._key_headers[key] = headers
        return httpx.Request(
            method,
            self._url(client, path),
            content=self._content(body),
            headers=headers,
            extensions={"timeout": self._timeout(deadline, base).as_dict()},
        )

    @property
    def client(self) -> httpx.Client:
        """The shared sync client (created once, on first use, by whichever thread comes first)."""
        client = self._client
        if client is None:
            with self._lock:
                client = self._client
                if client is None:
                    client = self._client = _Client(
                        base_url=self.base_url,
                        timeout=self.timeout,
                        transport=self._transport or _deadline_transport(),
                        follow_redirects=False,
                    )
        return client

    @property
    def aclient(self) -> httpx.AsyncClient:
        """The async client of the running event loop (one per loop, created on first use)."""
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            with self._lock:
                client = self._aclients.get(loop)
                if client is None:
                    client = _AsyncClient(
                        base_url=self.base_url,
                        timeout=self.timeout,
                        transport=self._async_transport,
                        follow_redirects=False,
                    )
                    self._aclients[loop] = client
        return client

    def _timeout(self, deadline: float | None, base: httpx.Timeout | None = None) -> httpx.Timeout:
        t = base or self.timeout
        if deadline is None:
            return t
        left = max(deadline - time.monotonic(), 0.001)

        def cut(value: float | None) -> float:
            return left if value is None else min(value, left)

        return httpx.Timeout(
            connect=cut(t.connect), read=cut(t.read), write=cut(t.write), pool=cut(t.pool)
        )

    def _request(
        self,
        method: str,
        path: str,
        key: str,
        body: dict[str, Any] | None,
        deadline: float | None,
        base: httpx.Timeout | None = None,
    ) -> Reply:
        token = _deadline.set(deadline)
        try:
            client = self.client
            request = self._build(client, method, path, key, body, deadline, base)
            response = client.send(request, stream=True)
            try:
                read = _Body(response.status_code)
                for chunk in response.iter_bytes():
                    if read.add(chunk):
                        break
                    if _over(deadline):
                        raise DeadlineExceeded("the call's deadline passed during the answer")
            finally:
                response.close()
        finally:
            _deadline.reset(token)
        return Reply(response.status_code, response.headers, read.content())

    async def _arequest(
        self,
        method: str,
        path: str,
        key: str,
        body: dict[str, Any] | None,
        deadline: float | None,
        base: httpx.Timeout | None = None,
    ) -> Reply:
        import anyio  # httpx's own dependency; only the async path needs it

        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        client = self.aclient
        try:
            with anyio.fail_after(left):
                request = self._build(client, method, path, key, body, deadline, base)
                response = await client.send(request, stream=True)
                try:
                    read = _Body(response.status_code)
                    async for chunk in response.aiter_bytes():
                        if read.add(chunk):
                            break
                finally:
                    await response.aclose()
        except TimeoutError:
            raise DeadlineExceeded("the call's deadline passed during the request") from None
        return Reply(response.status_code, response.headers, read.content())

    def search(self, key: str, body: dict[str, Any], deadline: float | None = None) -> Reply:
        """`POST /search` with `key`."""
        return self._request("POST", "/search", key, body, deadline)

    def post(
        self,
        key: str,
        path: str,
        body: dict[str, Any],
        deadline: float | None = None,
        *,
        timeout: float | None = None,
    ) -> Reply:
        """`POST` `body` to `path` (one of `ENDPOINTS`) with `key`.

        `timeout` (seconds) replaces the pool's read, write and pool timeouts
        for this request and bounds it as a whole: a crawl may rightly take
        longer than a search.
        """
        deadline, base = self._within(deadline, timeout)
        return self._request("POST", path, key, body, deadline, base)

    def _within(
        self, deadline: float | None, timeout: float | None
    ) -> tuple[float | None, httpx.Timeout | None]:
        if timeout is None:
            return deadline, None
        until = time.monotonic() + timeout
        deadline = until if deadline is None else min(deadline, until)
        return deadline, httpx.Timeout(timeout, connect=self.timeout.connect)

    def usage(self, key: str, deadline: float | None = None) -> Reply:
        """`GET /usage` for `key`."""
        return self._request("GET", "/usage", key, None, deadline)

    async def asearch(self, key: str, body: dict[str, Any], deadline: float | None = None) -> Reply:
        """Async `POST /search`."""
        return await self._arequest("POST", "/search", key, body, deadline)

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
        deadline, base = self._within(deadline, timeout)
        return await self._arequest("POST", path, key, body, deadline, base)

    async def ausage(self, key: str, deadline: float | None = None) -> Reply:
        """Async `GET /usage`."""
        return await self._arequest("GET", "/usage", key, None, deadline)

    def close(self) -> None:
        """Close the sync pool."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close the sync pool and this loop's async pool (other loops' pools are dropped)."""
        self.close()
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._aclients.pop(loop, None)
            self._aclients.clear()
        if client is not None:
            await client.aclose()
