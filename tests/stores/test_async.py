"""Async callers never block the event loop on a store's lock."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from searchfuse import Router
from searchfuse.testing import FakeClock, FakeTavily

KEY = "tvly-dev-test0001"


async def test_asearch_waits_for_a_locked_database_off_the_event_loop(tmp_path: Path) -> None:
    clock = FakeClock()
    fake = FakeTavily([KEY], clock=clock)
    path = tmp_path / "searchfuse.db"
    router = Router(
        [KEY],
        state=path,
        clock=clock,
        async_transport=fake.transport(),  # type: ignore[arg-type]
    )
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    search = asyncio.create_task(router.asearch("q"))
    # The loop keeps turning while the search waits for the lock. Counted in
    # turns of the loop, not in wall-clock time, so a loaded machine cannot
    # make it fail: a search that blocked the loop would hold it until the
    # store's busy timeout gave up, and would be done by the next turn.
    for _ in range(5):
        await asyncio.sleep(0.001)
        assert not search.done()
    other.execute("COMMIT")
    result = await asyncio.wait_for(search, 5)
    assert result["searchfuse"]["served_by"] == "tavily"
    assert len(fake.searches) == 1
    other.close()
    await router.aclose()
