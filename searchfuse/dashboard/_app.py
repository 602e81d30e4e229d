"""The dashboard's ASGI app: one page, `GET /api/status` and `GET /healthz`, read only.

A request passes, in order: the method (GET only, else 405), the address it was
sent to (without a token, a loopback name only, so a web page that rebinds its
own domain name to 127.0.0.1 cannot read the dashboard), the token (when one is
set: `Authorization: Bearer` or `?token=`, else 401; `/healthz` is open and
says nothing), then the page or the data. The data is a
[`Snapshot`][searchfuse._live.Snapshot]: reading it never writes to the store,
probes or searches. The page builds its text with `textContent` only and its
script and style run under a Content-Security-Policy that allows nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response

from searchfuse._live import EVENTS_SHOWN, Snapshot, snapshot
from searchfuse._serving import ClientTokens, bearer_token, is_loopback
from searchfuse.cli import _finite
from searchfuse.router import Router

from ._rules import DEFAULT_POLL

__all__ = ["app_of", "build_app"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Paths any caller may ask for, token or not: they say nothing about the keys.
OPEN_PATHS = frozenset({"/healthz"})
#: Headers on every answer: nothing cached, sniffed, framed or sent on as a referrer
#: (the page's address may carry `?token=`).
_ALWAYS = {
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
}


def _asset(name: str) -> str:
    return resources.files("searchfuse.dashboard").joinpath(name).read_text("utf-8")


def _sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


class _Page:
    """The page: its HTML with the style and script inline, and the policy that allows
    exactly those two (by hash) and requests to its own origin."""

    def __init__(self, poll: float) -> None:
        style, script = _asset("page.css"), _asset("page.js")
        html = _asset("page.html")
        html = html.replace("/*STYLE*/", style).replace("/*SCRIPT*/", script)
        self.html = html.replace('data-poll="2"', f'data-poll="{poll:g}"').encode("utf-8")
        self.policy = (
            f"default-src 'none'; script-src {_sha256(script)}; style-src {_sha256(style)}; "
            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'"
        )


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    text = json.dumps(_finite(data), ensure_ascii=False, allow_nan=False)
    return Response(text, status, headers=headers, media_type="application/json")


#: A `Host` header as a browser sends it: a name or an IPv4 address, or an IPv6
#: address in brackets, and an optional port. Anything else names no host.
_HOST = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::\d{1,5})?")


def _host_name(host_header: str) -> str | None:
    """The host a `Host` header names, without its port or a final dot (`[::1]:8765` ->
    `::1`, `localhost.:8765` -> `localhost`); `None` for anything a browser would not
    send (`localhost:8765@attacker.example`, `[::1]attacker`)."""
    found = _HOST.fullmatch(host_header.strip())
    if found is None:
        return None
    return found["v6"] or found["name"].removesuffix(".")


class _Dashboard:
    """The ASGI app (see the module docstring)."""

    def __init__(
        self, read: Callable[[int], Snapshot], tokens: ClientTokens, poll: float, events: int
    ) -> None:
        self.read = read
        self.tokens = tokens
        self.events = events
        self.page = _Page(poll)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan and websockets: nothing to do
        request = Request(scope, receive)
        response = await self.answer(request)
        for name, value in _ALWAYS.items():
            response.headers.setdefault(name, value)
        await response(scope, receive, send)

    async def answer(self, request: Request) -> Response:
        path = request.url.path
        if request.method != "GET":
            return _json({"error": "this dashboard only reads: use GET"}, 405, {"allow": "GET"})
        host = _host_name(request.headers.get("host", ""))
        if not self.tokens and (host is None or not is_loopback(host)):
            return _json(
                {"error": "without a token this dashboard answers requests to localhost only"},
                403,
            )
        if path in OPEN_PATHS:
            return _json({"status": "ok"})
        if self.tokens and self.tokens.identify(self._token(request)) is None:
            return _json(
                {"error": "a token is needed: Authorization: Bearer TOKEN, or ?token=TOKEN"},
                401,
                {"www-authenticate": 'Bearer realm="searchfuse dashboard"'},
            )
        if path == "/api/status":
            snap = await asyncio.to_thread(self.read, self.events)
            return _json(snap.to_dict())
        if path in ("/", "/index.html"):
            return Response(
                self.page.html,
                headers={"content-security-policy": self.page.policy},
                media_type="text/html; charset=utf-8",
            )
        return _json({"error": "not found"}, 404)

    @staticmethod
    def _token(request: Request) -> str | None:
        found = bearer_token(request.headers.get("authorization"))
        if found is not None:
            return found
        given = parse_qs(request.url.query).get("token")
        return given[0] if given else None


def build_app(
    router: Router,
    *,
    token: str | None = None,
    poll: float = DEFAULT_POLL,
    events: int = EVENTS_SHOWN,
) -> Any:
    """The dashboard as an ASGI app, showing `router`'s store.

    Args:
        router: the router whose keys, hold, budgets and events are shown.
        token: when given, every request but `GET /healthz` needs it
            (`Authorization: Bearer TOKEN`, or `?token=TOKEN` in the address);
            without one only requests to a loopback name are answered.
        poll: seconds between two reads of `/api/status` by the page.
        events: how many of the newest events `/api/status` carries.
    """
    return app_of(
        lambda shown: snapshot(router, shown),
        [entry.key for entry in router.keys],
        token=token,
        poll=poll,
        events=events,
    )


def app_of(
    read: Callable[[int], Snapshot],
    keys: Iterable[str],
    *,
    token: str | None = None,
    poll: float = DEFAULT_POLL,
    events: int = EVENTS_SHOWN,
) -> Any:
    """The dashboard of what `read(events)` shows (a router with `keys`): `build_app`'s
    checks and app, for a source other than a plain router (the command's `Viewer`)."""
    from ._rules import check_token_is_no_key, dashboard_tokens

    if isinstance(poll, bool) or not isinstance(poll, int | float):
        raise TypeError(f"poll must be a number of seconds, not {poll!r}")
    if not (math.isfinite(poll) and 0.1 <= poll <= 3600):
        raise ValueError(f"poll must be between 0.1 and 3600 seconds, not {poll!r}")
    if isinstance(events, bool) or not isinstance(events, int) or not 0 <= events <= 200:
        raise ValueError(f"events must be a whole number from 0 to 200, not {events!r}")
    tokens = dashboard_tokens(token)
    check_token_is_no_key(token, keys)
    return _Dashboard(read, tokens, float(poll), events)
