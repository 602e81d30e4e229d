"""`serve`: run the dashboard on a host and port, under the loopback-unless-token rule."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from searchfuse import _serving
from searchfuse._serving import LOOPBACK, check_listen
from searchfuse.router import Router

from ._app import build_app
from ._rules import DEFAULT_PORT, check_dashboard_exposure, dashboard_tokens

__all__ = ["running", "serve", "serve_app"]

log = logging.getLogger("searchfuse.dashboard")

#: Seconds a request in flight may take to finish after SIGTERM or Ctrl-C.
SHUTDOWN_TIMEOUT = 5.0


def serve(
    router: Router,
    *,
    host: str = LOOPBACK,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    ready: Callable[[str], None] | None = None,
    **options: Any,
) -> None:
    """Serve the dashboard of `router` on `host`:`port` until SIGTERM or Ctrl-C.

    A host other than loopback needs a `token`, else
    [`StartRefused`][searchfuse.dashboard.StartRefused] is raised before anything
    listens; so is a port that cannot be bound. `ready` is called with the page's
    address (without the token) once it listens. `options` are those of
    [`build_app`][searchfuse.dashboard.build_app].
    """
    check_dashboard_exposure(host, dashboard_tokens(token))
    check_listen(host, port)
    serve_app(build_app(router, token=token, **options), host, port, ready)


def serve_app(app: Any, host: str, port: int, ready: Callable[[str], None] | None) -> None:
    """Serve a dashboard app (checked by `serve` or the command) until SIGTERM or Ctrl-C."""
    check_listen(host, port)
    _serving.run(app, host, port, shutdown_timeout=SHUTDOWN_TIMEOUT, ready=ready)


@contextmanager
def running(
    router: Router,
    *,
    host: str = LOOPBACK,
    port: int = 0,
    token: str | None = None,
    **options: Any,
) -> Iterator[str]:
    """Serve the dashboard in a background thread for the block; yields its base URL.

    For tests and for programs that show their own router's dashboard (with its
    budgets): `port=0` picks a free port; the same rules as
    [`serve`][searchfuse.dashboard.serve].

    ```python
    with running(router) as url:
        print(f"open {url}/")
    ```
    """
    check_dashboard_exposure(host, dashboard_tokens(token))
    with _serving.running(build_app(router, token=token, **options), host, port) as url:
        yield url
