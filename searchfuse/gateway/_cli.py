"""`searchfuse gateway`: its options, and running it from them.

Readable without starlette installed: the command line parses and checks its
options first, and only running the gateway needs the `gateway` extra.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from searchfuse._serving import ClientTokens, StartRefused, add_listen_options
from searchfuse.cli import _number_in

from ._limits import (
    DEFAULT_CONCURRENCY,
    DEFAULT_DEADLINE,
    DEFAULT_PORT,
    TOKENS_VARIABLE,
    check_gateway_exposure,
)

__all__ = ["TOKENS_VARIABLE", "add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `searchfuse gateway`."""
    add_listen_options(p, DEFAULT_PORT)
    p.add_argument(
        "--client-token",
        action="append",
        default=[],
        metavar="NAME=TOKEN",
        help="a client's bearer token and its name, once per client (also "
        f"${TOKENS_VARIABLE}='alice=t1,bob=t2'); needed on any host but loopback",
    )
    p.add_argument(
        "--per-turn",
        type=_number_in(1, 100, int),
        default=None,
        metavar="N",
        help="searches per turn of one session (X-Session-Id): its calls that overlap "
        "or come within --min-interval are one turn (default: no turn rule)",
    )
    p.add_argument(
        "--min-interval",
        type=_number_in(0, 3600, float),
        default=2.0,
        metavar="SECONDS",
        help="with --per-turn: a session's calls this close together are one turn (default 2)",
    )
    p.add_argument(
        "--cache",
        choices=["shared", "memory", "off"],
        default="shared",
        help="answer a repeated search from the cache: kept in the state store and shared "
        "by every gateway using it (default), in this process only, or not at all",
    )
    p.add_argument(
        "--deadline",
        type=_number_in(1, 3600, float),
        default=DEFAULT_DEADLINE,
        metavar="SECONDS",
        help=f"every request is answered within this time (default {DEFAULT_DEADLINE:g})",
    )
    p.add_argument(
        "--max-concurrency",
        type=_number_in(1, 10_000, int),
        default=DEFAULT_CONCURRENCY,
        metavar="N",
        help=f"requests served at once; more are answered 503 (default {DEFAULT_CONCURRENCY})",
    )


def client_tokens(args: argparse.Namespace, environ: Mapping[str, str]) -> ClientTokens:
    """The tokens from `--client-token` and `SEARCHFUSE_GATEWAY_TOKENS`; `ValueError` if bad."""
    given = ClientTokens.parse(args.client_token)
    from_env = ClientTokens.from_text(environ.get(TOKENS_VARIABLE, ""))
    return given.merged(from_env)


def run(args: argparse.Namespace, make_router: Callable[..., Any]) -> int:
    """Check the options, build the router, and serve until SIGTERM or Ctrl-C.

    Raises [`StartRefused`][searchfuse.gateway.StartRefused] for options the
    gateway cannot start with, and `ImportError` (with the install command)
    without the `gateway` extra.
    """
    try:
        tokens = client_tokens(args, os.environ)
    except ValueError as exc:
        raise StartRefused(str(exc)) from None
    check_gateway_exposure(args.host, tokens)
    from searchfuse.gateway import serve  # needs the gateway extra

    # One access-log line per request, and the start and stop lines, without -v.
    logging.getLogger("searchfuse.gateway").setLevel(logging.INFO)
    # The router's own deadline is the gateway's: it ends a call first (the gateway's
    # bound comes a little later), so a result Tavily charged for is still answered.
    router = make_router(args, deadline=args.deadline)
    serve(
        router,
        host=args.host,
        port=args.port,
        tokens=tokens,
        deadline=args.deadline,
        per_turn=args.per_turn,
        min_interval=args.min_interval,
        max_concurrency=args.max_concurrency,
        cache=args.cache,
    )
    return 0
