"""A raw-socket HTTP server on 127.0.0.1 that misbehaves on purpose.

The simulator speaks correct HTTP; these faults need a server that does not:
drip a body byte by byte, reset mid-body, redirect, send a huge body, keep a
connection alive across event loops, or never answer at all. Each test hands
the server a ``behave(conn, request)`` function; the server reads one request
per call (keep-alive: several per connection) and counts what it received.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

__all__ = ["RawServer", "Request", "drip", "respond", "search_json", "usage_json"]


@dataclass
class Request:
    """One request as the server read it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def key(self) -> str:
        return self.headers.get("authorization", "").removeprefix("Bearer ")


def respond(
    conn: socket.socket,
    status: int,
    body: bytes | dict[str, Any] = b"",
    headers: dict[str, str] | None = None,
    *,
    keep_alive: bool = True,
) -> None:
    """Write one whole HTTP/1.1 answer."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(data)}"]
    if isinstance(body, dict):
        lines.append("Content-Type: application/json")
    if not keep_alive:
        lines.append("Connection: close")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)


def usage_json(usage: float = 10, limit: float | None = 1000) -> dict[str, Any]:
    return {
        "key": {"usage": usage, "limit": limit, "search_usage": usage},
        "account": {"current_plan": "Researcher", "plan_usage": usage, "plan_limit": 1000},
    }


def search_json(query: str = "q") -> dict[str, Any]:
    return {
        "query": query,
        "results": [{"title": "T", "url": "https://example.com", "content": "c", "score": 0.9}],
        "usage": {"credits": 1},
    }


Behave = Callable[[socket.socket, Request], bool | None]


@dataclass
class RawServer:
    """``with RawServer(behave) as server: ... server.url ...``

    ``behave(conn, request)`` answers (or not); returning ``False`` closes the
    connection, anything else keeps it alive for the next request.
    """

    behave: Behave
    requests: list[Request] = field(default_factory=list)
    connections: int = 0

    def __post_init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self._sock.settimeout(0.05)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def count(self, path: str) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.path == path)

    def __enter__(self) -> RawServer:
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket, buf: bytearray) -> Request | None:
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            buf += chunk
        head, _, rest = bytes(buf).partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        body = bytearray(rest)
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            body += chunk
        buf[:] = body[length:]
        return Request(method, path, headers, bytes(body[:length]))

    def _serve(self, conn: socket.socket) -> None:
        buf = bytearray()
        conn.settimeout(5.0)
        try:
            while not self._stop.is_set():
                request = self._read_request(conn, buf)
                if request is None:
                    return
                with self._lock:
                    self.requests.append(request)
                if self.behave(conn, request) is False:
                    return
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                conn.close()


def drip(
    conn: socket.socket, data: bytes, every: float, stop: threading.Event | None = None
) -> None:
    """Send ``data`` one byte every ``every`` seconds (stops when the client hangs up)."""
    for i in range(len(data)):
        if stop is not None and stop.is_set():
            return
        try:
            conn.sendall(data[i : i + 1])
        except OSError:
            return
        time.sleep(every)
