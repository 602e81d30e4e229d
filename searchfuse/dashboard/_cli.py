"""`searchfuse dashboard`: its options and how they start it (starlette is imported
only to serve, so `searchfuse --help` works without the `dashboard` extra)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from searchfuse._live import stopped_by_sigterm, viewer_for
from searchfuse._serving import StartRefused, add_listen_options
from searchfuse.cli import _number_in

from ._rules import (
    DEFAULT_POLL,
    DEFAULT_PORT,
    TOKEN_VARIABLE,
    check_dashboard_exposure,
    dashboard_tokens,
)

__all__ = ["INSTALL", "add_arguments", "run"]

INSTALL = 'the dashboard needs starlette and uvicorn: pip install ".[dashboard]"'


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `searchfuse dashboard`."""
    add_listen_options(p, DEFAULT_PORT)
    p.add_argument(
        "--token",
        metavar="TOKEN",
        help=f"every request needs it (Authorization: Bearer TOKEN, or ?token=TOKEN); also "
        f"${TOKEN_VARIABLE}; needed on any host but loopback",
    )
    p.add_argument(
        "--poll",
        type=_number_in(0.1, 3600, float),
        default=DEFAULT_POLL,
        metavar="SECONDS",
        help=f"seconds between the page's reads of the state (default {DEFAULT_POLL:g})",
    )


def run(args: argparse.Namespace, make_router: Callable[..., Any]) -> int:
    """Check the options, open the router for looking only (a state file that does not
    exist is not created: see [`Viewer`][searchfuse._live.Viewer]), and serve until
    SIGTERM or Ctrl-C (exit code 0 for both, also before the server has started).

    Raises [`StartRefused`][searchfuse.dashboard.StartRefused] for options the
    dashboard cannot start with, and `ImportError` (with the install command)
    without the `dashboard` extra.
    """
    token = args.token or os.environ.get(TOKEN_VARIABLE) or None
    try:
        check_dashboard_exposure(args.host, dashboard_tokens(token))
    except ValueError as exc:
        raise StartRefused(f"--token: {exc}") from None
    try:
        from searchfuse.dashboard._app import app_of
        from searchfuse.dashboard._serve import serve_app
    except ImportError:
        raise ImportError(INSTALL) from None

    def ready(url: str) -> None:
        how = " (with ?token=TOKEN)" if token else ""
        sys.stderr.write(f"searchfuse dashboard: {url}/{how}; stop with Ctrl-C\n")
        sys.stderr.flush()

    with stopped_by_sigterm():
        try:
            viewer = viewer_for(args, make_router)
            try:
                try:
                    app = app_of(viewer.snapshot, viewer.keys, token=token, poll=args.poll)
                except ValueError as exc:  # the token is one of the keys
                    raise StartRefused(f"--token: {exc}") from None
                serve_app(app, args.host, args.port, ready)
            finally:
                viewer.close()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM before the server took over signals
            pass
    return 0
