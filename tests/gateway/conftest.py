"""The gateway on loopback in front of a simulated Tavily on loopback, for real clients.

One uvicorn server per module: each test plugs a fresh gateway app (fresh
router, fresh simulator) into it, so nothing one test did (a 429 hold, a
cache entry, usage) reaches the next, and no test pays for a server start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from searchfuse import Router
from searchfuse._serving import running
from searchfuse.gateway import build_app
from searchfuse.testing import TEST_KEYS, FakeClock, FakeTavily

#: Client tokens of the tests: made up, and nothing like a Tavily key.
ALICE = "client-token-alice-0a1b2c"
BOB = "client-token-bob-3d4e5f"
TOKENS = {"alice": ALICE, "bob": BOB}


class Switch:
    """An ASGI app that hands every request to the app a test plugged in."""

    def __init__(self) -> None:
        self.target: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.target(scope, receive, send)


class Recording(httpx.AsyncBaseTransport):
    """httpx's own transport to the loopback simulator, keeping what went upstream."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        self.sent.append(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def texts(self) -> list[str]:
        """Every request sent upstream as text: method, URL, headers and body."""
        return [
            f"{r.method} {r.url}\n"
            + "\n".join(f"{k}: {v}" for k, v in r.headers.items())
            + "\n"
            + r.content.decode("utf-8", "replace")
            for r in self.sent
        ]


@dataclass
class Gateway:
    """One test's gateway: its URL, the simulator behind it, the router and the clock."""

    url: str
    fake: FakeTavily
    router: Router
    clock: FakeClock
    upstream: Recording

    @property
    def searches(self) -> int:
        """`/search` requests that reached the simulator."""
        return len(self.fake.searches)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Switch]]:
    switch = Switch()
    with running(switch) as url:
        yield url, switch


@pytest.fixture
def make_gateway(
    server: tuple[str, Switch],
) -> Iterator[Callable[..., Gateway]]:
    """`make_gateway(keys=..., router_options=..., **build_app_options)` for this test."""
    url, switch = server
    stack: list[Any] = []

    def make(
        keys: tuple[str, ...] = TEST_KEYS[:2],
        router_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> Gateway:
        clock = FakeClock()
        fake = FakeTavily(keys=keys, clock=clock)
        serving = fake.serve()
        upstream = serving.__enter__()
        stack.append(serving)
        recording = Recording()
        router = Router(
            list(keys),
            base_url=upstream,
            clock=clock,
            sleep=clock.advance,
            async_transport=recording,
            **(router_options or {}),
        )
        stack.append(router)
        options.setdefault("tokens", TOKENS)
        options.setdefault("cache", "off")
        switch.target = build_app(router, **options)
        return Gateway(url, fake, router, clock, recording)

    yield make
    for item in reversed(stack):
        if isinstance(item, Router):
            item.close()
        else:
            item.__exit__(None, None, None)
