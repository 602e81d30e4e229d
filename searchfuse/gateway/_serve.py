"""`serve`: run the gateway on a host and port, under the loopback-unless-token rule."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from searchfuse import _serving
from searchfuse._serving import LOOPBACK, ClientTokens, check_listen, closing, run
from searchfuse.router import Router

from ._app import build_app
from ._limits import (
    DEADLINE_GRACE,
    DEFAULT_DEADLINE,
    DEFAULT_PORT,
    check_gateway_exposure,
    gateway_tokens,
)

__all__ = ["running", "serve"]

log = logging.getLogger("searchfuse.gateway")


def serve(
    router: Router,
    *,
    host: str = LOOPBACK,
    port: int = DEFAULT_PORT,
    tokens: ClientTokens | Mapping[str, str] | None = None,
    deadline: float = DEFAULT_DEADLINE,
    **options: Any,
) -> None:
    """Serve Tavily's API with `router` on `host`:`port` until SIGTERM or Ctrl-C.

    A host other than loopback needs client `tokens`, else
    [`StartRefused`][searchfuse.gateway.StartRefused] is raised before
    anything listens; so is a port that cannot be bound. On SIGTERM the
    gateway stops accepting connections and lets requests in flight finish
    within their `deadline`. `options` are those of
    [`build_app`][searchfuse.gateway.build_app]. The router is closed at the end.
    """
    tokens = gateway_tokens(tokens)
    check_gateway_exposure(host, tokens)
    check_listen(host, port)
    app = build_app(router, tokens=tokens, deadline=deadline, **options)
    clients = ", ".join(tokens.names) if tokens else "any caller on this machine"
    log.info(
        "serving Tavily's API on http://%s:%d with %d key(s); clients: %s",
        host,
        port,
        len(router.keys),
        clients,
    )
    try:
        served = closing(app, router.aclose)  # its async pools, on the server's loop
        run(served, host, port, shutdown_timeout=deadline + DEADLINE_GRACE, lifespan=True)
    finally:
        router.close()
    log.info("stopped")


@contextmanager
def running(
    router: Router,
    *,
    host: str = LOOPBACK,
    port: int = 0,
    tokens: ClientTokens | Mapping[str, str] | None = None,
    **options: Any,
) -> Iterator[str]:
    """Serve the gateway in a background thread for the block; yields its base URL.

    For tests and for programs that embed the gateway; `port=0` picks a free
    port. The same rules as [`serve`][searchfuse.gateway.serve] (tokens off
    loopback); leaving the block stops it gracefully. The router stays open.

    ```python
    with running(Router.from_env()) as url:
        TavilyClient(api_key="any", api_base_url=url).search("...")
    ```
    """
    tokens = gateway_tokens(tokens)
    check_gateway_exposure(host, tokens)
    app = build_app(router, tokens=tokens, **options)
    with _serving.running(app, host, port) as url:
        yield url
