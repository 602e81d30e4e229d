"""The dashboard's defaults and its exposure rule, one place (usable without starlette)."""

from __future__ import annotations

from collections.abc import Iterable

from searchfuse._serving import ClientTokens, check_exposure

__all__ = [
    "DEFAULT_POLL",
    "DEFAULT_PORT",
    "TOKEN_VARIABLE",
    "check_dashboard_exposure",
    "check_token_is_no_key",
    "dashboard_tokens",
]

#: Where `searchfuse dashboard` listens unless told otherwise.
DEFAULT_PORT = 8765
#: Seconds between two reads of `/api/status` by the page.
DEFAULT_POLL = 2.0
#: The dashboard's token from the environment (kept off the command line, where
#: other users of the machine can read it).
TOKEN_VARIABLE = "SEARCHFUSE_DASHBOARD_TOKEN"


def dashboard_tokens(token: str | None) -> ClientTokens:
    """`token` as the one client token the dashboard knows (none when `None` or empty);
    `ValueError` for a token with spaces, commas or control characters."""
    return ClientTokens({"dashboard": token} if token else {})


def check_dashboard_exposure(host: str, tokens: ClientTokens) -> None:
    """Refuse a host other than loopback without a token: anyone who reaches the address
    would see the fleet's keys (masked), their accounts, notes and errors."""
    check_exposure(
        host,
        protected=bool(tokens),
        what="the dashboard",
        fix=f"Give a token with --token TOKEN or {TOKEN_VARIABLE}",
    )


def check_token_is_no_key(token: str | None, keys: Iterable[str]) -> None:
    """`ValueError` when the dashboard's token is one of the router's keys: the token
    travels in addresses and headers a key must never be in."""
    if token is not None and token in set(keys):
        raise ValueError(
            "the dashboard's token must not be one of the router's keys; choose a new random token"
        )
