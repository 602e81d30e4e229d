"""Serving an ASGI app from the command line: where it may listen, who may call it, how it stops.

The rules every searchfuse server follows (the gateway now, a dashboard later):

- it listens on loopback unless told otherwise, and a host other than loopback
  needs client tokens: without them anyone who reaches the address could spend
  the pool's credits, so the server refuses to start ([`StartRefused`][]);
- a client proves who it is with a bearer token; tokens have names (for logs and
  budgets) and are compared in constant time, never logged, never shown;
- SIGTERM and Ctrl-C stop it gracefully: no new connections, and requests in
  flight finish within `shutdown_timeout` seconds.

Nothing here imports starlette or uvicorn until a server is run, so the command
line can parse and check its options without the `gateway` extra installed.
"""

from __future__ import annotations

import argparse
import errno
import hmac
import ipaddress
import math
import signal
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uvicorn

__all__ = [
    "LOOPBACK",
    "ClientTokens",
    "StartRefused",
    "add_listen_options",
    "bearer_token",
    "check_exposure",
    "check_listen",
    "is_loopback",
    "run",
    "running",
]

#: Where a server listens unless told otherwise: this machine only.
LOOPBACK = "127.0.0.1"


class StartRefused(Exception):
    """The server cannot start as configured; the message says why and what to do."""


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only: `localhost` (also `localhost.` and
    `*.localhost`), 127.0.0.0/8 or `::1`. By its name alone: nothing is resolved."""
    name = host.strip().strip("[]").lower()
    if name.removesuffix(".") == "localhost" or name.removesuffix(".").endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def check_exposure(host: str, *, protected: bool, what: str, fix: str) -> None:
    """Refuse to serve `what` on a host other than loopback unless it is `protected`.

    `fix` says how to protect it (the option that sets tokens).
    """
    if protected or (is_loopback(host) and _resolves_to_loopback(host)):
        return
    raise StartRefused(
        f"refusing to serve {what} on {host}: that address may be reachable from other "
        f"machines and no client tokens are configured, so anyone could use it. {fix}, "
        f"or listen on {LOOPBACK}"
    )


def _resolves_to_loopback(host: str) -> bool:
    """Whether every address `host` resolves to is loopback (a name such as
    `localhost` could be mapped elsewhere); one that does not resolve cannot be
    listened on either, which `check_listen` says."""
    try:
        infos = socket.getaddrinfo(host.strip().strip("[]"), None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return True
    return all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def check_listen(host: str, port: int, option: str = "--port") -> None:
    """Raise [`StartRefused`][] naming `host` and `port` when nothing could listen there.

    Checked before uvicorn starts, whose own answer is a log line and exit code 3.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise StartRefused(f"cannot listen on host {host!r}: it does not resolve ({exc})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise _bind_refused(exc, host, port, option) from None


def _bind_refused(exc: OSError, host: str, port: int, option: str) -> StartRefused:
    if exc.errno == errno.EADDRINUSE:
        return StartRefused(
            f"port {port} on {host} is already in use; choose another: {option} PORT"
        )
    return StartRefused(f"cannot listen on {host}:{port} ({exc.strerror or exc})")


def add_listen_options(parser: argparse.ArgumentParser, port: int) -> None:
    """`--host` (default loopback) and `--port` (default `port`), as every server takes them."""
    from searchfuse.cli import _number_in

    parser.add_argument("--host", default=LOOPBACK, help=f"where to listen (default {LOOPBACK})")
    parser.add_argument(
        "--port", type=_number_in(1, 65535, int), default=port, help=f"the port (default {port})"
    )


# -- client tokens ---------------------------------------------------------------------

_NAME_FORBIDDEN = frozenset("=,")


@dataclass(frozen=True)
class ClientTokens:
    """Named client tokens: `{"alice": "t1", "bob": "t2"}`. Empty means none are configured.

    `repr` and `str` show the names only.
    """

    tokens: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for name, token in self.tokens.items():
            _check_name(name)
            _check_token(name, token)
            if token in seen:
                raise ValueError(f"clients {seen[token]!r} and {name!r} have the same token")
            seen[token] = name

    @classmethod
    def parse(cls, entries: Iterable[str], source: str = "--client-token") -> ClientTokens:
        """Tokens from `NAME=TOKEN` entries; a name given twice is an error."""
        tokens: dict[str, str] = {}
        for entry in entries:
            name, sep, token = entry.partition("=")
            if not sep:
                raise ValueError(f"{source}: {_shown_entry(entry)} is not NAME=TOKEN")
            name = name.strip()
            if name in tokens:
                raise ValueError(f"{source}: the client {name!r} is named twice")
            tokens[name] = token.strip()
        return cls(tokens)

    @classmethod
    def from_text(cls, text: str, source: str = "SEARCHFUSE_GATEWAY_TOKENS") -> ClientTokens:
        """Tokens from `"alice=t1,bob=t2"` (blank entries are skipped)."""
        return cls.parse((part for part in text.split(",") if part.strip()), source)

    def merged(self, other: ClientTokens) -> ClientTokens:
        """Both sets of tokens; a name in both is an error (which one is meant?)."""
        both = set(self.tokens) & set(other.tokens)
        if both:
            raise ValueError(f"the client {sorted(both)[0]!r} is given a token twice")
        return ClientTokens({**self.tokens, **other.tokens})

    def __bool__(self) -> bool:
        return bool(self.tokens)

    @property
    def names(self) -> tuple[str, ...]:
        """The clients' names, in the order given."""
        return tuple(self.tokens)

    def identify(self, token: str | None) -> str | None:
        """The name of the client whose token is `token`, or `None`.

        Every configured token is compared, in constant time, so the answer's
        timing says nothing about how much of a token was right.
        """
        if not token:
            return None
        given = token.encode("utf-8", "surrogatepass")
        found = None
        for name, known in self.tokens.items():
            if hmac.compare_digest(given, known.encode("utf-8")):
                found = name
        return found

    def __repr__(self) -> str:
        return f"ClientTokens(names={list(self.tokens)!r})"

    __str__ = __repr__


def _shown_entry(entry: str) -> str:
    """A malformed entry as an error may show it: the part before any token, never a token."""
    head = entry.split("=", 1)[0] if "=" in entry else ""
    return repr(head + "=…") if head else "an entry"


def _check_name(name: str) -> None:
    if not name:
        raise ValueError("a client token needs a name: NAME=TOKEN")
    if len(name) > 64 or not name.isprintable() or any(c in _NAME_FORBIDDEN for c in name):
        raise ValueError(
            f"the client name {name[:64]!r} must be at most 64 printable characters "
            "without '=' or ','"
        )


def _check_token(name: str, token: str) -> None:
    if not token:
        raise ValueError(f"the client {name!r} has an empty token")
    if any(c.isspace() or c == "," or not c.isprintable() for c in token):
        raise ValueError(
            f"the token of client {name!r} must be printable, without spaces or commas"
        )


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, or `None`."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


# -- running ---------------------------------------------------------------------------


def _config(
    app: Any, host: str, port: int, shutdown_timeout: float, *, lifespan: bool = False
) -> uvicorn.Config:
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        # The application writes its own access log (without tokens) and keeps
        # the logging set-up of whoever runs it.
        access_log=False,
        log_config=None,
        lifespan="on" if lifespan else "off",
        server_header=False,
        timeout_graceful_shutdown=math.ceil(shutdown_timeout),
    )


def _server(config: uvicorn.Config) -> uvicorn.Server:
    import uvicorn

    class Server(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn re-raises SIGTERM after its graceful stop, so the process would die
            # by the signal; a stop that was asked for and went well exits 0 instead.
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP_SIGNALS}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server(config)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run(
    app: Any,
    host: str,
    port: int,
    *,
    shutdown_timeout: float,
    ready: Callable[[str], None] | None = None,
    option: str = "--port",
    lifespan: bool = False,
) -> None:
    """Serve `app` until SIGTERM or Ctrl-C, then let requests in flight finish.

    Requests still running `shutdown_timeout` seconds after the signal are
    cancelled. Raises [`StartRefused`][] when the port cannot be bound.
    `ready` is called with the base URL once the port listens: a client that
    connects after it is queued, never refused. `option` names the option that
    sets the port in a refusal; `lifespan` runs the app's startup and shutdown.
    """
    with _listening(host, port, option) as (sock, bound):
        server = _server(_config(app, host, bound, shutdown_timeout, lifespan=lifespan))
        if ready is not None:
            ready(_base_url(host, bound))
        try:
            server.run(sockets=[sock])
        except SystemExit as exc:
            # uvicorn exits (code 1 or 3) when it cannot serve after all.
            raise StartRefused(
                f"cannot serve on {host}:{bound} (uvicorn exited {exc.code})"
            ) from None
    if not server.started:
        raise StartRefused(f"cannot serve on {host}:{bound}")


def closing(app: Any, aclose: Callable[[], Any]) -> Any:
    """`app` that awaits `aclose()` when its server shuts down (the ASGI lifespan's
    shutdown, before it completes): what lives on the server's event loop (a
    router's async connection pools) is closed on that loop, while it runs.
    Run it with `lifespan=True`."""

    async def closing_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await aclose()
            await send(message)

        await app(scope, receive, sending)

    return closing_app


def _base_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


@contextmanager
def _listening(host: str, port: int, option: str) -> Iterator[tuple[socket.socket, int]]:
    """A socket bound to `host`:`port` and listening (connections queue until served)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise StartRefused(f"cannot listen on host {host!r}: it does not resolve ({exc})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
            sock.listen(2048)
        except OSError as exc:
            raise _bind_refused(exc, host, port, option) from None
        yield sock, sock.getsockname()[1]
    finally:
        sock.close()


@contextmanager
def running(
    app: Any, host: str = LOOPBACK, port: int = 0, *, shutdown_timeout: float = 5.0
) -> Iterator[str]:
    """Serve `app` in a background thread for the block; yields its base URL.

    For tests and for programs that embed a server; `port=0` picks a free
    port. Leaving the block stops the server gracefully.
    """
    with _listening(host, port, "--port") as (sock, bound):
        server = _server(_config(app, host, bound, shutdown_timeout))
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name=f"searchfuse-serve-{bound}"
        )
        thread.daemon = True
        thread.start()
        try:
            while not server.started:
                if not thread.is_alive():
                    raise StartRefused(f"the server on {host}:{bound} did not start")
                thread.join(0.005)
            yield _base_url(host, bound)
        finally:
            server.should_exit = True
            thread.join(shutdown_timeout + 5.0)
