"""Serve a simulated search API ([`FakeTavily`][searchfuse.testing.FakeTavily],
[`FakeExa`][searchfuse.testing.FakeExa]...) over real HTTP on 127.0.0.1.

For code that builds its own HTTP client (a subprocess, a CLI, a library that
cannot take an httpx transport): point it at the loopback URL, e.g. through
`TAVILY_BASE_URL`. Each request is turned into an `httpx.Request`, answered
by the same model as the in-process transport, and written back. Here time is
real: a slow answer really waits, and a timeout fault holds the connection
without answering, so clients with short timeouts see real timeouts.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from searchfuse.testing._simulator import Simulator

__all__ = ["LoopbackServer"]

#: Only ever the loopback interface: a fake API must not be reachable from elsewhere.
_HOST = "127.0.0.1"


class _Server(ThreadingHTTPServer):
    """A threaded HTTP server bound to 127.0.0.1 that knows its fake and its stop signal."""

    daemon_threads = True
    # The default backlog of 5 drops connections when a test fires a burst of
    # parallel searches, and a dropped SYN costs the client a one-second retry.
    request_queue_size = 128

    def __init__(self, fake: Simulator, port: int, timeout_hold: float) -> None:
        self.fake = fake
        self.timeout_hold = timeout_hold
        self.stopping = threading.Event()
        super().__init__((_HOST, port), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (getfqdn), which can
        # stall on a machine with slow DNS; a loopback server needs none of it.
        socketserver.TCPServer.server_bind(self)
        self.server_name = _HOST
        self.server_port = self.server_address[1]

    def handle_error(
        self,
        request: socket.socket | tuple[bytes, socket.socket],
        client_address: tuple[str, int] | str,
    ) -> None:
        # A client that hung up mid-answer (it timed out, as the test wanted)
        # is not an error worth a traceback on stderr.
        return


class _Handler(BaseHTTPRequestHandler):
    """Turns one HTTP request into the simulator's terms and writes the answer back."""

    server: _Server
    protocol_version = "HTTP/1.1"
    # A client that connects and never sends must not pin a thread for ever.
    timeout = 10

    def do_GET(self) -> None:
        """Serve a GET (`/usage`)."""
        self._dispatch()

    def do_POST(self) -> None:
        """Serve a POST (`/search`)."""
        self._dispatch()

    # Other methods reach the model too, which answers 405 or 404 as its API would.
    do_PUT = do_DELETE = do_PATCH = do_GET

    def log_message(self, format: str, *args: object) -> None:
        """Stay quiet: the fake records requests itself."""

    def _dispatch(self) -> None:
        # One request per connection: nothing lingers after the answer, so
        # stopping the server never waits for idle keep-alive connections.
        self.close_connection = True
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        request = httpx.Request(
            self.command,
            f"http://{_HOST}:{self.server.server_port}{self.path}",
            headers=list(self.headers.items()),
            content=body,
        )
        try:
            answer = self.server.fake._answer(request)
        except Exception as exc:  # a bug in the model must not look like a hang
            self._write(self.server.fake._error(500, f"simulator error: {type(exc).__name__}"))
            return
        if isinstance(answer.error, httpx.TimeoutException):
            # Hold the connection without answering, as an overloaded upstream
            # does; the client's own timeout ends it (or the server stopping).
            self.server.stopping.wait(self.server.timeout_hold)
            return
        if answer.error is not None:
            self._reset_connection()
            return
        if answer.delay and self.server.stopping.wait(answer.delay):
            return
        assert answer.response is not None
        self._write(answer.response)

    def _reset_connection(self) -> None:
        """Drop the connection with a TCP reset: the client sees a connection error."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # Closed before the orderly shutdown that follows a request, so the
            # peer gets a reset rather than an end-of-file.
            self.connection.close()
        except OSError:
            pass

    def _write(self, response: httpx.Response) -> None:
        status = response.status_code
        reason = self.server.fake._reason(status)
        try:
            self.send_response(status, reason)
            for name, value in response.headers.multi_items():
                if name.lower() not in ("connection", "transfer-encoding"):
                    self.send_header(name, value)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(response.content)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up first (its timeout was shorter than our delay).
            pass


class LoopbackServer:
    """A running loopback HTTP server for one simulated API.

    Usually reached through its `serve()`
    ([`FakeTavily.serve`][searchfuse.testing.FakeTavily.serve]); usable directly as a
    context manager:

    ```python
    with LoopbackServer(fake) as server:
        httpx.get(f"{server.url}/usage", headers=...)
    ```
    """

    def __init__(self, fake: Simulator, *, port: int = 0, timeout_hold: float = 30.0) -> None:
        """Bind 127.0.0.1:`port` (0 = any free port); `start` begins serving."""
        self._server = _Server(fake, port, timeout_hold)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            # Short polls make stop() prompt; the cost is a few idle wake-ups.
            kwargs={"poll_interval": 0.02},
            name=f"searchfuse-fake-api-{self.port}",
            daemon=True,
        )

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        return self._server.server_port

    @property
    def url(self) -> str:
        """The base URL, `http://127.0.0.1:<port>`."""
        return f"http://{_HOST}:{self.port}"

    def start(self) -> None:
        """Start serving in a daemon thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving, wake held and slow connections, and release the port."""
        self._server.stopping.set()
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()

    def __enter__(self) -> LoopbackServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
