"""guard(router=..., cache="shared"): another process, or a restart, gets the answer free."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from searchfuse import Router, guard, turn
from searchfuse.guard.cache import search_key
from searchfuse.router.shared_cache import stable_key
from searchfuse.router.state import JsonFileStore, RedisStore, SqliteStore, Store
from searchfuse.testing import FakeClock, FakeTavily

KEY = "tvly-dev-test0001"


def store_for(kind: str, tmp_path: Path, request: pytest.FixtureRequest, ns: str) -> Store:
    if kind == "sqlite":
        return SqliteStore(tmp_path / "searchfuse.db")
    if kind == "json":
        return JsonFileStore(tmp_path / "quota.json")
    return RedisStore(request.getfixturevalue("redis_url"), namespace=ns)


def where_for(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """What a worker process opens: the store's file, or the Redis URL."""
    if kind == "redis":
        return str(request.getfixturevalue("redis_url"))
    return str(tmp_path / ("searchfuse.db" if kind == "sqlite" else "quota.json"))


def tool(router: Router, clock: FakeClock) -> Any:
    @guard(router=router, cache="shared", clock=clock)
    def web_search(query: str, max_results: int = 5) -> dict[str, Any]:
        raise AssertionError("a routed guard never calls the function body")

    return web_search


@pytest.mark.parametrize("kind", ["sqlite", "json", "redis"])
def test_a_restart_gets_the_answer_within_the_ttl_with_no_request(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    clock = FakeClock()
    fake = FakeTavily([KEY], clock=clock)
    ns = uuid.uuid4().hex

    def fresh_process() -> Any:
        store = store_for(kind, tmp_path, request, ns)
        return tool(Router([KEY], state=store, clock=clock, transport=fake.transport()), clock)

    with turn():
        first = fresh_process()("Tavily  rate limits", max_results=3)
    assert len(fake.searches) == 1
    clock.advance(600)
    with turn():
        again = fresh_process()("tavily rate limits", max_results=3)
    assert again == first
    assert len(fake.searches) == 1  # served from the store
    clock.advance(301)  # past the 15-minute TTL
    with turn():
        fresh_process()("tavily rate limits", max_results=3)
    assert len(fake.searches) == 2


WORKER = textwrap.dedent(
    """
    import json, sys
    from searchfuse import Router, guard, turn
    from searchfuse.router.state import JsonFileStore, RedisStore, SqliteStore

    url, kind, where, ns = sys.argv[1:5]
    if kind == "redis":
        store = RedisStore(where, namespace=ns)
    else:
        store = SqliteStore(where) if kind == "sqlite" else JsonFileStore(where)
    router = Router([{key!r}], state=store, base_url=url)

    @guard(router=router, cache="shared")
    def web_search(query: str, max_results: int = 5) -> dict:
        raise AssertionError

    with turn():
        print(json.dumps(web_search("shared between processes", max_results=2)["results"]))
    """
).format(key=KEY)


@pytest.mark.parametrize("kind", ["sqlite", "json", "redis"])
def test_another_process_gets_a_hit(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    fake = FakeTavily([KEY], clock=time.time)
    where = where_for(kind, tmp_path, request)
    ns = uuid.uuid4().hex
    outputs = []
    with fake.serve() as url:
        for _ in range(2):
            proc = subprocess.run(
                [sys.executable, "-c", WORKER, url, kind, where, ns],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "PYTHONHASHSEED": str(len(outputs) + 1)},
            )
            assert proc.returncode == 0, proc.stderr
            outputs.append(proc.stdout)
    assert outputs[0] == outputs[1]
    assert len(fake.searches) == 1


def test_stable_keys_do_not_depend_on_the_process_hash_seed() -> None:
    key = search_key("q", include_domains={"a.com", "b.org", "c.net"}, opts={"x": 1, "y": [2]})
    code = (
        "from searchfuse.guard.cache import search_key;"
        "from searchfuse.router.shared_cache import stable_key;"
        "print(stable_key(search_key('q', include_domains={'a.com', 'b.org', 'c.net'},"
        " opts={'x': 1, 'y': [2]})))"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert seen == {stable_key(key)}
    assert stable_key(search_key("q", max_results=5)) != stable_key(search_key("q", max_results=6))


def test_shared_without_a_router_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="router"):

        @guard(cache="shared")
        def web_search(query: str) -> str:
            return query


async def test_a_cache_write_on_the_event_loop_never_waits_for_a_locked_database(
    tmp_path: Path,
) -> None:
    import asyncio
    import sqlite3

    clock = FakeClock()
    path = tmp_path / "searchfuse.db"
    cache = Router([KEY], state=SqliteStore(path), clock=clock).shared_cache(ttl=60, maxsize=8)
    # Another process reading the same store (made before the lock is taken).
    elsewhere = Router([KEY], state=SqliteStore(path), clock=clock).shared_cache(ttl=60, maxsize=8)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        started = time.monotonic()
        cache[("q",)] = {"results": [1]}  # returns at once: the write waits elsewhere
        assert time.monotonic() - started < 2.5  # waiting for the lock would take 5 s
        assert cache[("q",)] == {"results": [1]}  # this process reads it at once
        assert ("q",) not in elsewhere  # not in the store yet: the lock is still held
    finally:
        other.execute("COMMIT")
        other.close()
    deadline = time.monotonic() + 10  # the background write lands once the lock is free
    while ("q",) not in elsewhere and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert elsewhere[("q",)] == {"results": [1]}


def routed(tmp_path: Path, clock: FakeClock) -> tuple[Router, FakeTavily]:
    fake = FakeTavily([KEY], clock=clock)
    router = Router(
        [KEY],
        state=SqliteStore(tmp_path / "searchfuse.db"),
        clock=clock,
        transport=fake.transport(),
        async_transport=fake.transport(),
    )
    return router, fake


async def test_a_repeat_on_the_event_loop_is_a_hit_while_the_write_is_still_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import threading

    clock = FakeClock()
    router, fake = routed(tmp_path, clock)
    gate = threading.Event()
    write = router.store.cache_set

    def slow_write(*args: Any, **kwargs: Any) -> None:
        gate.wait(5)  # the store is busy (another process holds its lock)
        write(*args, **kwargs)

    monkeypatch.setattr(router.store, "cache_set", slow_write)

    @guard(router=router, cache="shared", clock=clock, on_refusal="return")
    async def web_search(query: str, max_results: int = 5) -> dict[str, Any]:
        raise AssertionError("a routed guard never calls the function body")

    answers = []
    for n in range(5):
        async with turn():
            first = await web_search(f"question {n}")
            answers.append((first, await web_search(f"Question {n}")))

    assert all(again == first for first, again in answers)  # a hit, not a refusal
    assert len(fake.searches) == 5  # one request per distinct query
    gate.set()
    landed = Router([KEY], state=SqliteStore(tmp_path / "searchfuse.db"), clock=clock)
    cache = landed.shared_cache()
    deadline = time.monotonic() + 10  # the background writes land once the store is free
    while len(cache) < 5 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert len(cache) == 5


class Level(int, __import__("enum").Enum):
    BASIC = 1


JSON_SAFE = {"results": [{"url": "https://a.example", "score": 0.5, "raw": None}], "n": 1}


@pytest.mark.parametrize(
    ("result", "shared"),
    [
        ({1: ("a", "b")}, False),
        (("a", "b"), False),
        ({"results": [("x", 1)]}, False),
        ({"depth": Level.BASIC}, False),
        ([1, {2: 3}], False),
        (JSON_SAFE, True),
    ],
    ids=["int-keys-and-tuple", "tuple", "nested-tuple", "int-enum", "nested-int-key", "json"],
)
def test_only_a_result_json_keeps_unchanged_is_shared(
    tmp_path: Path, result: Any, shared: bool
) -> None:
    clock = FakeClock()
    router, _ = routed(tmp_path, clock)
    ran: list[str] = []

    @guard(router=router, cache="shared", inject="api_key", per_turn=None, clock=clock)
    def web_search(query: str, *, api_key: str) -> Any:
        ran.append(query)
        return result

    served = [web_search("q"), web_search("q")]

    assert all(value == result and type(value) is type(result) for value in served)
    assert repr(served[1]) == repr(result)  # the same types all the way down
    assert ran == (["q"] if shared else ["q", "q"])  # else not cached: each call ran the tool


class Point:
    """Compared by value, hashable, with the default repr (which shows the address)."""

    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and other.x == self.x

    def __hash__(self) -> int:
        return hash(self.x)


def test_an_argument_whose_repr_shows_its_address_never_shares_an_entry(tmp_path: Path) -> None:
    clock = FakeClock()
    router, _ = routed(tmp_path, clock)

    @guard(router=router, cache="shared", inject="api_key", per_turn=None, clock=clock)
    def web_search(query: str, where: Point, *, api_key: str) -> int:
        return where.x

    # Each Point is freed after its call, so the next often gets its address.
    assert [web_search("q", Point(n)) for n in range(30)] == list(range(30))
    with pytest.raises(TypeError):
        stable_key(search_key("q", where=Point(1)))


@pytest.mark.parametrize("behind", [30 * 86400.0, 0.0, -30 * 86400.0])
def test_redis_keeps_an_entry_for_its_ttl_on_the_routers_clock(
    redis_url: str, behind: float
) -> None:
    # A router's clock a month behind the server's (as under FakeClock) or ahead:
    # Redis's own expiry is the entry's ttl, not the gap between the clocks.
    clock = FakeClock(time.time() - behind)
    fake = FakeTavily([KEY], clock=clock)
    ns = uuid.uuid4().hex
    router = Router(
        [KEY], state=RedisStore(redis_url, namespace=ns), clock=clock, transport=fake.transport()
    )
    web_search = tool(router, clock)
    with turn():
        web_search("when does it expire")
    store = router.store
    assert isinstance(store, RedisStore)
    (name,) = store.cache_keys(clock())
    ttl_ms = store.client.pttl(f"{ns}:c:{name}")
    assert 900_000 <= ttl_ms <= 960_000  # the guard's 15 minutes, and a minute to spare
    router.close()


AT_ONCE = textwrap.dedent(
    """
    import json, sys, time
    from searchfuse import Router, guard, turn
    from searchfuse.router.state import JsonFileStore, RedisStore, SqliteStore

    url, kind, where, ns, start = sys.argv[1:6]
    if kind == "redis":
        store = RedisStore(where, namespace=ns)
    else:
        store = SqliteStore(where) if kind == "sqlite" else JsonFileStore(where)
    router = Router([{key!r}], state=store, base_url=url)

    @guard(router=router, cache="shared")
    def web_search(query: str, max_results: int = 5) -> dict:
        raise AssertionError

    while time.time() < float(start):
        time.sleep(0.001)
    with turn():
        print(json.dumps(web_search("asked by four at once", max_results=2)["results"]))
    """
).format(key=KEY)


@pytest.mark.parametrize("kind", ["sqlite", "json", "redis"])
def test_four_processes_asking_at_once_pay_once(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    fake = FakeTavily([KEY], clock=time.time)
    fake.slow_next(0.5, times=None, path="/search")  # the first search is still out...
    where = where_for(kind, tmp_path, request)
    ns = uuid.uuid4().hex
    with fake.serve() as url:
        start = str(time.time() + 2.0)  # ...when the others ask: they start together
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", AT_ONCE, url, kind, where, ns, start],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        outputs = [proc.communicate(timeout=60) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), [err for _, err in outputs]
    assert len({out for out, _ in outputs}) == 1  # the same answer for all four
    assert len(fake.searches) == 1  # paid once
    if kind == "json":  # the claim ended with the search: nothing left beside the state
        assert sorted(p.name for p in tmp_path.iterdir()) == ["quota.json", "quota.json.lock"]
