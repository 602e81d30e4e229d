"""The router's HTTP side: one connection pool per provider, every read bounded.

A lazily created `httpx.Client` (shared by threads) and one `httpx.AsyncClient`
per event loop. Keys travel only in the headers the provider names, never in a
URL or a log line. Every read is bounded: at most `MAX_BODY_BYTES` of an
answer, at most `MAX_ERROR_BYTES` of an error, nothing past the call's deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from searchfuse._wire import JSONBody, encode_json
from searchfuse.errors import ResponseTooLarge
from searchfuse.providers._base import Request
from searchfuse.router import _deadline
from searchfuse.router._deadline import DeadlineExceeded

__all__ = ["DEFAULT_TIMEOUT", "HTTP", "MAX_BODY_BYTES", "MAX_ERROR_BYTES", "Reply"]

#: Connect fast, allow a search a while: advanced searches take seconds.
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
#: The most of a successful answer that is read (20 results with raw content
#: stay far below it; a 300 MB answer is not a search result).
MAX_BODY_BYTES = 16 * 1024 * 1024
#: The most of an error answer that is read.
MAX_ERROR_BYTES = 64 * 1024


@dataclass(frozen=True)
class Reply:
    """An answer, read in full but within `MAX_BODY_BYTES`."""

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


class _Jarless(httpx.Cookies):
    """A cookie jar that keeps nothing."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None

    def set(self, name: str, value: str, domain: str = "", path: str = "/") -> None:
        return None


class _WithoutCookies:
    """An httpx client that keeps no cookies.

    The providers' APIs set none; a jar shared by every key would send a cookie
    one key's answer set with another key's requests, and parsing each answer
    for cookies was a tenth of the client's work per request.
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

#: The TLS context every pool of this process verifies with, per CA location.
_TLS: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
_TLS_LOCK = threading.Lock()


def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (certifi's CAs, or `SSL_CERT_FILE` / `SSL_CERT_DIR`), made
    once per process and CA location.

    Loading the CA bundle costs about 20 ms of CPU; httpx does it for every
    client it makes, and a router makes one per provider and one per event
    loop (each `asyncio.run`). A context is safe to share between threads and
    connections.
    """
    where = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    context = _TLS.get(where)
    if context is None:
        with _TLS_LOCK:
            context = _TLS.get(where)
            if context is None:
                context = _TLS[where] = httpx.create_ssl_context()
    return context


class HTTP:
    """One provider's address and connection pools, sync and async.

    `headers(key)` gives the headers that carry a key (the provider's auth
    scheme). An `httpx.AsyncClient` is bound to the loop it first ran on, so
    a router used from `asyncio.run` twice does not reuse the first loop's
    connections. `transport` / `async_transport` are the test seam
    (`httpx.MockTransport` or anything else httpx accepts).
    """

    def __init__(
        self,
        base_url: str,
        headers: Callable[[str], Mapping[str, str]],
        *,
        timeout: httpx.Timeout | float | None = None,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        url_keyed: bool = False,
    ) -> None:
        self.base_url = base_url
        #: The "key" is the address itself (a SearXNG instance): requests go to it.
        self.url_keyed = url_keyed
        self.timeout = DEFAULT_TIMEOUT if timeout is None else httpx.Timeout(timeout)
        self._auth = headers
        self._transport = transport
        self._async_transport = async_transport
        self._client: httpx.Client | None = None
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient]
        self._aclients = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        #: Each path's absolute URL, made once: httpx parses and joins a relative
        #: path on every request, which costs more than the rest of building it.
        self._urls: dict[str, httpx.URL] = {}
        #: Each key's request headers: the client's own and the key's, merged once.
        self._key_headers: dict[str, httpx.Headers] = {}

    def __repr__(self) -> str:
        return f"HTTP({self.base_url!r})"

    def _url(
        self, client: httpx.Client | httpx.AsyncClient, request: Request, key: str
    ) -> httpx.URL:
        if self.url_keyed:
            keyed = httpx.URL(key.rstrip("/") + request.path)
            return keyed if request.params is None else keyed.copy_merge_params(request.params)
        url = self._urls.get(request.path)
        if url is None:
            # The URL httpx itself makes of the base URL and the path.
            url = self._urls[request.path] = client.build_request("GET", request.path).url
        return url if request.params is None else url.copy_merge_params(request.params)

    def _build(
        self,
        client: httpx.Client | httpx.AsyncClient,
        key: str,
        request: Request,
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
            headers.update(self._auth(key))
            if len(self._key_headers) < 10_000:
                self._key_headers[key] = headers
        body = request.body
        content = None if body is None else body.content if isinstance(body, JSONBody) else None
        if body is not None and content is None:
            content = encode_json(body)
        return httpx.Request(
            request.method,
            self._url(client, request, key),
            content=content,
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
                        transport=self._transport or _deadline.bounded_transport(tls_context()),
                        verify=tls_context(),  # for the proxies httpx mounts from the environment
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
                        verify=tls_context(),
                        follow_redirects=False,
                    )
                    self._aclients[loop] = client
        return client

    def _timeout(self, deadline: float | None, base: httpx.Timeout | None = None) -> httpx.Timeout:
        t = base or self.timeout
        if deadline is None:
            return t
        rest = max(_deadline.left(deadline), 0.001)

        def cut(value: float | None) -> float:
            return rest if value is None else min(value, rest)

        return httpx.Timeout(
            connect=cut(t.connect), read=cut(t.read), write=cut(t.write), pool=cut(t.pool)
        )

    def _own(self, timeout: float | None) -> httpx.Timeout | None:
        """A request's own `timeout` replaces the pool's read, write and pool timeouts."""
        return None if timeout is None else httpx.Timeout(timeout, connect=self.timeout.connect)

    def send(
        self, key: str, request: Request, deadline: float | None, *, timeout: float | None = None
    ) -> Reply:
        """Send `request` with `key`; the answer read in full, by the deadline.

        `timeout` (seconds) bounds this request as a whole: a crawl may rightly
        take longer than a search.
        """
        deadline, base = _deadline.within(deadline, timeout), self._own(timeout)
        with _deadline.current(deadline):
            client = self.client
            response = client.send(self._build(client, key, request, deadline, base), stream=True)
            try:
                read = _Body(response.status_code)
                for chunk in response.iter_bytes():
                    if read.add(chunk):
                        break
                    if _deadline.past(deadline):
                        raise DeadlineExceeded("the call's deadline passed during the answer")
            finally:
                response.close()
        return Reply(response.status_code, response.headers, read.content())

    async def asend(
        self, key: str, request: Request, deadline: float | None, *, timeout: float | None = None
    ) -> Reply:
        """Async [`send`][searchfuse.router._http.HTTP.send]."""
        import anyio  # httpx's own dependency; only the async path needs it

        deadline, base = _deadline.within(deadline, timeout), self._own(timeout)
        client = self.aclient
        try:
            with anyio.fail_after(None if deadline is None else _deadline.left(deadline)):
                built = self._build(client, key, request, deadline, base)
                response = await client.send(built, stream=True)
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
