"""The cache: normalised keys, free hits (even in cooldown), TTL, and one backend call per burst."""

from __future__ import annotations

import asyncio
import threading

import cachetools
import pytest

from searchfuse.errors import CooldownActive, RateLimited, TurnLimitReached
from searchfuse.guard import guard, normalize_query, search_key, turn
from searchfuse.testing import FakeClock
from tests.guard.helpers import Backend, http_error


def guarded(backend: Backend, clock: FakeClock, **options: object):
    @guard(clock=clock, **options)  # type: ignore[call-overload]
    def web_search(query: str, max_results: int = 5, topic: str = "general") -> dict:
        return backend.search(query)

    return web_search


# -- the key ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "variant",
    ["Python 3.13 release date", "  python   3.13 RELEASE date ", "python\t3.13\nrelease date"],
)
def test_queries_are_normalised(variant):
    assert normalize_query(variant) == "python 3.13 release date"
    assert search_key(variant) == search_key("python 3.13 release date")


def test_other_arguments_are_part_of_the_key_in_canonical_form():
    base = search_key("q", max_results=5, include_domains=["a.com", "b.com"])
    assert base == search_key("Q", include_domains=["a.com", "b.com"], max_results=5)
    assert base != search_key("q", max_results=3, include_domains=["a.com", "b.com"])
    assert search_key("q", options={"a": 1, "b": [1, 2]}) == search_key(
        "q", options={"b": [1, 2], "a": 1}
    )
    assert search_key("q", tags={"x", "y"}) == search_key("q", tags={"y", "x"})
    hash(search_key("q", anything=object(), unhashable={"k": bytearray(b"x")}))


# -- hits ------------------------------------------------------------------------------


def test_a_repeated_query_is_served_from_the_cache(backend, clock):
    web_search = guarded(backend, clock)

    first = web_search("Python 3.13 release date")
    again = web_search("  python 3.13   RELEASE date")

    assert again == first
    assert backend.queries == ["Python 3.13 release date"]
    state = web_search.guard_state()
    assert state.cache_hits == 1
    assert state.cache_size == 1
    assert state.cache_maxsize == 256


def test_defaults_are_filled_in_before_keying(backend, clock):
    web_search = guarded(backend, clock, per_turn=None)

    web_search("q")
    web_search("q", max_results=5)
    web_search("q", 5, topic="general")
    web_search("q", max_results=3)

    assert backend.queries == ["q", "q"]


def test_a_cache_hit_does_not_spend_the_turn_budget(backend, clock):
    web_search = guarded(backend, clock)
    with turn():
        web_search("a")

    with turn():
        web_search("a")  # a hit: free
        web_search("b")  # so this turn still has its search
        with pytest.raises(TurnLimitReached):
            web_search("c")

    assert backend.queries == ["a", "b"]


def test_a_cache_hit_is_served_during_a_cooldown(backend, clock):
    web_search = guarded(backend, clock, per_turn=None)
    cached = web_search("a")
    backend.fail_next(http_error(429, "60"))
    with pytest.raises(RateLimited):
        web_search("b")

    assert web_search("a") == cached
    with pytest.raises(CooldownActive):
        web_search("c")
    assert backend.queries == ["a", "b"]
    assert web_search.guard_state().fuse_tripped


def test_entries_expire_after_fifteen_minutes_on_the_guard_s_clock(backend, clock):
    web_search = guarded(backend, clock, per_turn=None)

    web_search("a")
    clock.advance(15 * 60 - 1)
    web_search("a")
    clock.advance(1)
    assert web_search.guard_state().cache_size == 0
    web_search("a")

    assert backend.queries == ["a", "a"]


def test_errors_are_never_cached(backend, clock):
    web_search = guarded(backend, clock, per_turn=None)
    backend.fail_next(http_error(500))

    with pytest.raises(Exception, match="500"):
        web_search("a")
    web_search("a")

    assert backend.queries == ["a", "a"]


def test_refusals_are_never_cached(backend, clock):
    web_search = guarded(backend, clock)

    with turn():
        web_search("a")
        with pytest.raises(TurnLimitReached):
            web_search("b")
    with turn():
        assert web_search("b")["query"] == "b"

    assert backend.queries == ["a", "b"]


def test_cache_false_sends_every_call(backend, clock):
    web_search = guarded(backend, clock, cache=False, per_turn=None)

    web_search("a")
    web_search("a")

    assert backend.queries == ["a", "a"]
    assert web_search.guard_state().cache_size == 0
    assert web_search.guard_state().cache_maxsize is None


def test_any_cachetools_cache_can_be_given_and_shared(backend, clock):
    shared = cachetools.LRUCache(maxsize=2)
    first_tool = guarded(backend, clock, cache=shared, per_turn=None)
    second_tool = guarded(backend, clock, cache=shared, per_turn=None)

    first_tool("a")
    second_tool("a")  # same key in the same cache
    first_tool("b")
    first_tool("c")  # evicts "a"
    second_tool("a")

    assert backend.queries == ["a", "b", "c", "a"]
    assert first_tool.guard_state().cache_maxsize == 2


def test_the_key_function_is_replaceable(backend, clock):
    # Leave ``topic`` out of the key: the same query is the same answer here.
    def by_query(query: str, **params: object) -> object:
        params.pop("topic", None)
        return search_key(query, **params)

    web_search = guarded(backend, clock, cache_key=by_query, per_turn=None)

    web_search("a", topic="general")
    web_search("a", topic="news")

    assert backend.queries == ["a"]


# -- identical concurrent calls --------------------------------------------------------


def test_thirty_identical_threads_share_one_backend_call(backend, clock):
    arrived = threading.Semaphore(0)

    def arrival(query: str, call: object) -> None:
        arrived.release()  # a checklist hook that never answers: it just counts arrivals

    web_search = guarded(backend, clock, checklist=[arrival])
    backend.hold()
    results: list[object] = []

    def worker() -> None:
        try:
            results.append(web_search("python 3.13 release date"))
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(30)]
    for thread in threads:
        thread.start()
    for _ in range(30):
        assert arrived.acquire(timeout=5)
    backend.release()
    for thread in threads:
        thread.join()

    # Without sharing, 29 of them would have hit the turn limit instead.
    assert backend.queries == ["python 3.13 release date"]
    assert len(results) == 30
    assert all(result == results[0] and isinstance(result, dict) for result in results)
    assert web_search.guard_state().cache_hits == 29


async def test_thirty_identical_tasks_share_one_backend_call(backend, clock):
    @guard(clock=clock)
    async def web_search(query: str) -> dict:
        return await backend.asearch(query)

    async with turn():
        results = await asyncio.gather(*(web_search("python 3.13") for _ in range(30)))

    assert backend.queries == ["python 3.13"]
    assert all(result == results[0] for result in results)
    assert web_search.guard_state().cache_hits == 29


async def test_a_shared_error_reaches_every_waiter_and_is_not_cached(backend, clock):
    @guard(clock=clock, per_turn=None)
    async def web_search(query: str) -> dict:
        return await backend.asearch(query)

    backend.fail_next(http_error(503))
    results = await asyncio.gather(*(web_search("q") for _ in range(5)), return_exceptions=True)

    assert len(backend.queries) == 1
    assert all(isinstance(result, Exception) and "503" in str(result) for result in results)
    assert (await web_search("q"))["query"] == "q"
    assert len(backend.queries) == 2


async def test_waiters_search_again_when_the_leading_call_is_cancelled(backend, clock):
    started = asyncio.Event()
    proceed = asyncio.Event()

    @guard(clock=clock, per_turn=None)
    async def web_search(query: str) -> dict:
        backend.queries.append(query)
        if len(backend.queries) == 1:
            started.set()
            await proceed.wait()  # the first search hangs until it is cancelled
        return {"query": query}

    leader = asyncio.create_task(web_search("q"))
    await started.wait()
    waiter = asyncio.create_task(web_search("q"))
    await asyncio.sleep(0)
    leader.cancel()

    assert await waiter == {"query": "q"}
    assert leader.cancelled()
    assert backend.queries == ["q", "q"]


async def test_a_cancelled_waiter_does_not_cancel_the_shared_search(backend, clock):
    started = asyncio.Event()
    proceed = asyncio.Event()

    @guard(clock=clock, per_turn=None)
    async def web_search(query: str) -> dict:
        backend.queries.append(query)
        started.set()
        await proceed.wait()
        return {"query": query}

    leader = asyncio.create_task(web_search("q"))
    await started.wait()
    waiter = asyncio.create_task(web_search("q"))
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.sleep(0)
    proceed.set()

    assert await leader == {"query": "q"}
    assert waiter.cancelled()
    assert backend.queries == ["q"]


def test_a_mutated_default_argument_is_a_new_search(backend, clock):
    domains = ["python.org"]

    @guard(clock=clock, per_turn=None)
    def web_search(query: str, include_domains: list = domains) -> dict:
        return backend.search(f"{query} {include_domains}")

    web_search("release")
    web_search("release")  # cached
    domains.append("peps.python.org")
    web_search("release")  # the same call reads differently now: not the cached answer

    assert len(backend.queries) == 2


def test_calls_with_unhashable_arguments_are_still_cached(backend, clock):
    @guard(clock=clock, per_turn=None)
    def web_search(query: str, include_domains: list | None = None) -> dict:
        return backend.search(query)

    web_search("release", ["python.org"])
    web_search("Release ", ["python.org"])

    assert backend.queries == ["release"]
