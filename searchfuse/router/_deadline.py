"""One deadline per call, for sync and async alike: every wait and every read ends by it.

A call's deadline is a `time.monotonic()` instant. The sync path bounds every
socket operation by it (httpx's own timeouts bound each operation; a server
dripping a byte every 0.1 s never trips them), the async path runs the whole
request under `anyio.fail_after`, and both check it between chunks. The
instants themselves are made and compared here only.
"""

from __future__ import annotations

import contextvars
import ssl
import time
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

__all__ = [
    "DeadlineExceeded",
    "bounded_transport",
    "deadline_after",
    "left",
    "past",
    "share",
    "within",
]


class DeadlineExceeded(httpx.TimeoutException):
    """The call's deadline passed while a request was still running."""


#: The deadline of the call running in this thread (a `time.monotonic()` instant).
_current: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "searchfuse_deadline", default=None
)


def deadline_after(seconds: float | None, at_least: float | None = None) -> float | None:
    """The instant by which a call starting now must end (`None`: no deadline).

    `at_least`: a request timeout the caller chose (a crawl may take
    minutes); the call's deadline never cuts it short.
    """
    if seconds is None:
        return None
    return time.monotonic() + (seconds if at_least is None else max(seconds, at_least))


def past(deadline: float | None, ahead: float = 0.0) -> bool:
    """Whether `deadline` has passed, `ahead` seconds from now."""
    return deadline is not None and time.monotonic() + ahead >= deadline


def left(deadline: float) -> float:
    """Seconds until `deadline` (0.0 once it passed)."""
    return max(deadline - time.monotonic(), 0.0)


def share(deadline: float | None, fraction: float) -> float | None:
    """A deadline `fraction` of the time left before `deadline`: an optional
    request (`/usage`) must leave the rest to the call's main one."""
    if deadline is None:
        return None
    return time.monotonic() + left(deadline) * fraction


def within(deadline: float | None, timeout: float | None) -> float | None:
    """`deadline`, or sooner when a request's own `timeout` ends first."""
    if timeout is None:
        return deadline
    until = time.monotonic() + timeout
    return until if deadline is None else min(deadline, until)


class current:
    """`with current(deadline):` the sync socket operations of this thread end by it."""

    __slots__ = ("deadline", "token")

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline

    def __enter__(self) -> None:
        self.token = _current.set(self.deadline)

    def __exit__(self, *exc: object) -> None:
        _current.reset(self.token)


def _bounded(timeout: float | None) -> float | None:
    """`timeout` cut to what is left of the current call's deadline."""
    deadline = _current.get()
    if deadline is None:
        return timeout
    rest = deadline - time.monotonic()
    if rest <= 0:
        raise httpcore.ReadTimeout("the call's deadline has passed")
    return rest if timeout is None else min(timeout, rest)


class _Stream(httpcore.NetworkStream):
    """A socket stream whose every read and write ends by the call's deadline."""

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
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _bounded(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
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
        return _Stream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(path, _bounded(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def bounded_transport(verify: ssl.SSLContext | bool = True) -> httpx.BaseTransport:
    """httpx's own transport, with every socket operation bounded by the call's deadline."""
    transport = httpx.HTTPTransport(verify=verify)
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.NetworkBackend):
        pool._network_backend = _Backend(backend)  # type: ignore[union-attr]
    # Otherwise (another httpx layout) the body loop still checks the deadline per chunk.
    return transport
