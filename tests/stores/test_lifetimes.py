"""How long a store lives: closed with its router, reopened when its file goes,
and a Redis that forgot is noticed."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from searchfuse import CooldownActive, RateLimited, Router
from searchfuse.router.state import RedisStore, SqliteStore
from searchfuse.testing import FakeClock, FakeTavily

K1, K2 = "tvly-dev-test0001", "tvly-dev-test0002"


def open_files_under(folder: Path) -> list[str]:
    """The files under `folder` this process holds open."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            found.append(target)
    return found


NEEDS_PROC = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
FILE_STORES = pytest.mark.parametrize("name", ["searchfuse.db", "quota.json"])


def state_file(tmp_path: Path, name: str) -> Path:
    """`name` in a folder of its own, made (the files open under it are counted)."""
    state = tmp_path / "state" / name
    state.parent.mkdir()
    return state


@NEEDS_PROC
@FILE_STORES
def test_closing_a_router_closes_every_file_of_the_store_it_opened(
    tmp_path: Path, name: str
) -> None:
    clock = FakeClock()
    fake = FakeTavily([K1, K2], clock=clock)
    state = state_file(tmp_path, name)
    with Router([K1, K2], state=str(state), clock=clock, transport=fake.transport()) as router:
        # Several threads, each with its own connection, and enough commits for
        # the background checkpoint to start.
        threads = [
            threading.Thread(target=lambda: [router.search(f"q{i}") for i in range(20)])
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(fake.searches) == 80
        assert open_files_under(state.parent)
    assert open_files_under(state.parent) == []


@NEEDS_PROC
def test_a_store_given_to_a_router_stays_open_for_its_owner(tmp_path: Path) -> None:
    clock = FakeClock()
    fake = FakeTavily([K1], clock=clock)
    store = SqliteStore(tmp_path / "searchfuse.db")
    with Router([K1], state=store, clock=clock, transport=fake.transport()) as router:
        router.search("q")
    assert open_files_under(tmp_path)  # still the owner's to close
    assert store.read(clock()).keys  # and still usable
    store.close()
    assert open_files_under(tmp_path) == []


def test_a_database_deleted_under_a_running_router_is_opened_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    fake = FakeTavily([K1, K2], clock=clock)
    db = tmp_path / "state" / "searchfuse.db"
    db.parent.mkdir()
    running = Router([K1, K2], state=str(db), clock=clock, transport=fake.transport())
    running.search("before")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)  # someone cleans up state/
    fake.fail_next(429, retry_after=30, path="/search")
    with caplog.at_level(logging.WARNING, logger="searchfuse.state"), pytest.raises(RateLimited):
        running.search("limited")
    assert "deleted or replaced while in use" in caplog.text
    assert db.exists()
    # A process started now opens the file at the path: it sees the hold.
    sent = len(fake.searches)
    fresh = Router([K1, K2], state=str(db), clock=clock, transport=fake.transport())
    with pytest.raises(CooldownActive):
        fresh.search("after")
    assert len(fake.searches) == sent
    running.close()
    fresh.close()


def test_a_redis_that_forgot_the_state_is_said_once(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    fake = FakeTavily([K1, K2], clock=clock)
    ns = f"t{uuid.uuid4().hex[:12]}"
    store = RedisStore(redis_url, namespace=ns)
    router = Router([K1, K2], state=store, clock=clock, transport=fake.transport())
    fake.fail_next(429, retry_after=30, path="/search")
    with pytest.raises(RateLimited):
        router.search("q")
    # Emptied (FLUSHDB, a restart without persistence, eviction): every key gone.
    store.client.delete(*store.client.keys(f"{ns}:*"))
    clock.advance(31)
    with caplog.at_level(logging.WARNING, logger="searchfuse.state"):
        for i in range(3):
            router.search(f"q{i}")
    told = [r for r in caplog.records if "forgot searchfuse's state" in r.getMessage()]
    assert len(told) == 1
    assert "noeviction" in told[0].getMessage() and ns in told[0].getMessage()
    # Another process opening it now finds a token again: nothing more to say.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="searchfuse.state"):
        Router([K1, K2], state=RedisStore(redis_url, namespace=ns), clock=clock).status()
    assert "forgot" not in caplog.text
    router.close()


def test_an_evicting_memory_policy_is_named_when_the_store_opens(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = RedisStore(redis_url, namespace=f"t{uuid.uuid4().hex[:12]}")
    before = store.client.config_get("maxmemory-policy")["maxmemory-policy"]
    store.client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        with caplog.at_level(logging.WARNING, logger="searchfuse.state"):
            RedisStore(redis_url, namespace=store.ns).close()
    finally:
        store.client.config_set("maxmemory-policy", before)
    assert "maxmemory-policy allkeys-lru" in caplog.text
    assert "noeviction" in caplog.text
    store.close()


def test_a_json_lock_file_deleted_under_a_running_store_still_excludes_writers(
    tmp_path: Path,
) -> None:
    from searchfuse.router.state import JsonFileStore

    path = tmp_path / "quota.json"
    now = 1_768_478_400.0

    def bump(state: object) -> None:
        ks = state.key("fp1")  # type: ignore[attr-defined]
        ks.searches += 1

    running = JsonFileStore(path)
    running.update(now, bump)
    Path(f"{path}.lock").unlink()  # someone cleans up; `running` still holds it open
    fresh = JsonFileStore(path)

    def work(store: JsonFileStore) -> None:
        for _ in range(40):
            store.update(now, bump)

    threads = [threading.Thread(target=work, args=(s,)) for s in (running, fresh)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert JsonFileStore(path).read(now).keys["fp1"].searches == 81  # no update lost


@NEEDS_PROC
@FILE_STORES
def test_leaving_an_async_router_closes_every_file_of_the_store_it_opened(
    tmp_path: Path, name: str
) -> None:
    clock = FakeClock()
    fake = FakeTavily([K1, K2], clock=clock)
    state = state_file(tmp_path, name)

    async def main() -> None:
        async with Router(
            [K1, K2],
            state=str(state),
            clock=clock,
            transport=fake.transport(),
            async_transport=fake.transport(),
        ) as router:
            await asyncio.gather(*(router.asearch(f"q{i}") for i in range(20)))
            # A sync search too: its thread's connection is the router's to close.
            await asyncio.to_thread(router.search, "from a thread")
            assert open_files_under(state.parent)
        assert open_files_under(state.parent) == []
        await router.aclose()  # closing again does nothing
        router.close()

    asyncio.run(main())
    assert len(fake.searches) == 21
    assert open_files_under(state.parent) == []


@NEEDS_PROC
@FILE_STORES
def test_a_shared_cache_write_still_under_way_is_stored_before_the_store_closes(
    tmp_path: Path, name: str
) -> None:
    from searchfuse import guard, turn

    clock = FakeClock()
    fake = FakeTavily([K1], clock=clock)
    state = state_file(tmp_path, name)
    gate = threading.Event()

    async def main() -> None:
        async with Router(
            [K1], state=str(state), clock=clock, async_transport=fake.transport()
        ) as router:
            write = router.store.cache_set

            def slow_write(*args: Any, **kwargs: Any) -> None:
                gate.wait(5)  # the store is busy (another process holds its lock)
                write(*args, **kwargs)

            router.store.cache_set = slow_write  # type: ignore[method-assign]

            @guard(router=router, cache="shared", clock=clock)
            async def web_search(query: str) -> dict[str, Any]:
                raise AssertionError("a routed guard never calls the function body")

            async with turn():
                await web_search("written from a thread")  # the write goes to a thread
            # The store frees up while the router closes.
            asyncio.get_running_loop().call_later(0.002, gate.set)

    asyncio.run(main())
    assert open_files_under(state.parent) == []  # the write did not open it again
    # A new process gets the answer from the store, with no request.
    again = Router([K1], state=str(state), clock=clock, transport=fake.transport())

    @guard(router=again, cache="shared", clock=clock)
    def web_search(query: str) -> dict[str, Any]:
        raise AssertionError("a routed guard never calls the function body")

    with turn():
        web_search("written from a thread")
    assert len(fake.searches) == 1
    again.close()
