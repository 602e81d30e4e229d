"""A served router's async connection pools are closed on the server's own loop.

The gateway and the MCP server search through the router's async pools, which
live on uvicorn's event loop; closing the router after that loop has ended
could only drop them (their sockets open until collected). `closing` closes
them at the ASGI lifespan's shutdown, while the loop runs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from searchfuse import Router
from searchfuse._serving import closing
from searchfuse.gateway import build_app
from searchfuse.testing import TEST_KEYS, FakeClock, FakeTavily

from ..stores.test_lifetimes import open_files_under


async def lifespan(app: Any) -> list[str]:
    """Run `app`'s startup and shutdown as uvicorn does; what it sent back."""
    inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    for message in ("lifespan.startup", "lifespan.shutdown"):
        inbox.put_nowait({"type": message})
    sent: list[str] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get, send)
    return sent


def test_a_servers_shutdown_closes_the_routers_async_pools_and_store_on_its_loop(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    fake = FakeTavily(keys=TEST_KEYS[:1], clock=clock)
    with fake.serve() as upstream:
        router = Router(
            [TEST_KEYS[0]],
            base_url=upstream,
            clock=clock,
            sleep=clock.advance,
            state=tmp_path / "searchfuse.db",
        )
        app = closing(build_app(router, cache="off"), router.aclose)

        async def serve() -> tuple[list[str], Any]:
            await router.asearch("what the gateway searched")  # this loop's pool
            (pool,) = router._chain.cores[0].http._aclients.values()
            assert not pool.is_closed
            return await lifespan(app), pool

        sent, pool = asyncio.run(serve())
        assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
        assert pool.is_closed  # closed on the loop it belonged to, before it ended
        assert open_files_under(tmp_path) == []
        assert [r.path for r in fake.requests if r.path == "/search"] == ["/search"]
        router.close()  # what serve() does at the end: closing again is harmless
