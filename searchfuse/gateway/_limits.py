"""The gateway's defaults, bounds and exposure rule, one place (usable without starlette)."""

from __future__ import annotations

from collections.abc import Mapping

from searchfuse._serving import ClientTokens, check_exposure

__all__ = [
    "DEADLINE_GRACE",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_DEADLINE",
    "DEFAULT_PORT",
    "ENDPOINTS",
    "MAX_BODY",
    "OPEN_PATHS",
    "TOKENS_VARIABLE",
    "check_gateway_exposure",
    "gateway_tokens",
]

#: Where `searchfuse gateway` listens unless told otherwise.
DEFAULT_PORT = 8766
#: The POST endpoints, as Tavily names them.
ENDPOINTS = ("/search", "/extract", "/crawl", "/map")
#: The largest request body accepted, in bytes (1 MB).
MAX_BODY = 1_000_000
#: Seconds within which every request is answered, unless told otherwise.
DEFAULT_DEADLINE = 60.0
#: Requests served at once; the next one is answered 503 at once.
DEFAULT_CONCURRENCY = 64
#: The router's own deadline ends a call first; this much later the gateway answers 504.
DEADLINE_GRACE = 1.0
#: Paths served whatever the load, without a token.
OPEN_PATHS = frozenset({"/healthz"})
#: Client tokens from the environment: `"alice=t1,bob=t2"`.
TOKENS_VARIABLE = "SEARCHFUSE_GATEWAY_TOKENS"


def gateway_tokens(tokens: ClientTokens | Mapping[str, str] | None) -> ClientTokens:
    """`tokens` as [`ClientTokens`][searchfuse.gateway.ClientTokens]."""
    return tokens if isinstance(tokens, ClientTokens) else ClientTokens(dict(tokens or {}))


def check_gateway_exposure(host: str, tokens: ClientTokens) -> None:
    """Refuse a host other than loopback without client tokens (anyone could spend the pool)."""
    check_exposure(
        host,
        protected=bool(tokens),
        what="the search gateway",
        fix=f"Give client tokens with --client-token NAME=TOKEN or {TOKENS_VARIABLE}",
    )
