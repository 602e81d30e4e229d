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
    assert search_key("q", blob=bytearray(b"x")) == search_key("q", blob=bytearray(b"x"))


@pytest.mark.parametrize(
    "argument",
    [
        object(),
        {"k": object()},
        [1, [2, {"x": lambda: None}]],
        type("Filters", (), {"__eq__": lambda a, b: True})(),
    ],
    ids=["identity-object", "nested-identity", "function", "unhashable-with-eq"],
)
def test_an_argument_without_a_faithful_canonical_form_cannot_key_the_cache(argument):
    with pytest.raises(TypeError):
        search_key("q", filters=argument)


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


# -- arguments that must never share an entry ------------------------------------------


class Filters:
    """A user's argument type: compared by value, so unhashable; its repr holds its address."""

    def __init__(self, domain: str) -> None:
        self.domain = domain

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Filters) and other.domain == self.domain


class Options:
    """Hashable by identity only: two instances with the same fields are different objects."""

    def __init__(self, depth: str) -> None:
        self.depth = depth


def test_fresh_objects_never_get_the_result_of_a_freed_one(clock):
    # CPython reuses a freed object's address, and a default repr shows it:
    # a key built from repr() served 199 of 200 calls another call's result.
    @guard(clock=clock, per_turn=None)
    def web_search(query: str, filters: Filters, options: Options | None = None) -> str:
        return filters.domain

    served = [web_search("python", Filters(f"site{n}.org")) for n in range(50)]
    served += [web_search("python", Filters("x.org"), Options(f"d{n}")) for n in range(50)]

    assert served == [f"site{n}.org" for n in range(50)] + ["x.org"] * 50
    assert web_search.guard_state().searches == 100
    assert web_search.guard_state().cache_size == 0  # uncacheable calls store nothing


async def test_an_async_call_with_an_uncacheable_argument_still_searches(clock):
    searched: list[str] = []

    @guard(clock=clock, per_turn=None)
    async def web_search(query: str, filters: Filters) -> str:
        searched.append(filters.domain)
        return filters.domain

    assert await web_search("q", Filters("a.org")) == "a.org"
    assert await web_search("q", Filters("b.org")) == "b.org"
    assert searched == ["a.org", "b.org"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (True, 1),
        (1, 1.0),
        (False, 0),
        ("a", b"a"),
        ((1, 2), [1, 2]),
        ({1: "x"}, {True: "x"}),
        ([True], [1]),
        (frozenset({1}), {1}),
        ({"n": 1}, {"n": 1.0}),
    ],
    ids=repr,
)
@pytest.mark.parametrize("by_name", [False, True], ids=["positional", "keyword"])
def test_equal_arguments_of_different_types_keep_separate_entries(clock, first, second, by_name):
    @guard(clock=clock, per_turn=None)
    def web_search(query: str, flag: object = None) -> str:
        return f"{type(flag).__name__}:{flag!r}"

    def ask(value: object) -> str:
        return web_search("q", flag=value) if by_name else web_search("q", value)

    assert ask(first) == f"{type(first).__name__}:{first!r}"
    assert ask(second) == f"{type(second).__name__}:{second!r}"
    assert ask(first) == f"{type(first).__name__}:{first!r}"  # its own entry: a hit
    assert ask(second) == f"{type(second).__name__}:{second!r}"
    assert web_search.guard_state().searches == 2


def self_referencing() -> list[object]:
    loop: dict[str, object] = {}
    loop["self"] = loop
    ring: list[object] = []
    ring.append(ring)
    wide: dict[str, object] = {}
    wide["a"] = wide["b"] = wide["c"] = [wide, wide]
    deep: list[object] = []
    for _ in range(5000):
        deep = [deep]
    return [loop, ring, wide, deep]


@pytest.mark.parametrize("argument", self_referencing(), ids=["dict", "list", "wide", "deep"])
def test_a_self_referencing_or_very_deep_argument_still_searches_uncached(clock, argument):
    searched: list[str] = []

    @guard(clock=clock, per_turn=None)
    def web_search(query: str, filters: object = None) -> str:
        searched.append(query)
        return "ok"

    assert web_search("q", filters=argument) == "ok"
    assert web_search("q", filters=argument) == "ok"
    assert searched == ["q", "q"]  # searched each time: no key, no entry


# -- key functions and caches that fail ------------------------------------------------


def failing_key(query: str, **params: object) -> object:
    raise TypeError("cannot read this call")


def test_decide_treats_a_failing_key_function_as_uncacheable(clock, caplog):
    from searchfuse import Guard
    from searchfuse.guard import Call

    rules = Guard(cache_key=failing_key, clock=clock)

    decisions = rules.decide([Call("a"), Call("a"), Call("b")])

    assert decisions[0] is None
    assert all(isinstance(d, TurnLimitReached) for d in decisions[1:])  # no key: not a repeat
    assert "no cache key" in caplog.text
    assert rules.cached(Call("a")) is False
    assert rules.key(Call("a")) is None


@pytest.mark.parametrize(
    "cache_key", [failing_key, lambda query, **params: ["unhashable"]], ids=["raises", "unhashable"]
)
def test_a_failing_key_function_never_loses_a_search(backend, clock, caplog, cache_key):
    web_search = guarded(backend, clock, cache_key=cache_key, per_turn=None)

    assert web_search("a") == {"query": "a", "results": [{"title": "about a"}]}
    assert web_search("a") == {"query": "a", "results": [{"title": "about a"}]}

    assert backend.queries == ["a", "a"]
    assert "no cache key" in caplog.text


class FailingCache(dict):  # type: ignore[type-arg]
    """A cache whose reads or writes raise what a broken cache raises."""

    def __init__(self, *, reads: bool = False, writes: bool = False) -> None:
        super().__init__()
        self.reads, self.writes = reads, writes

    def __getitem__(self, key):
        if self.reads:
            raise RuntimeError("cache backend down")
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        if self.writes:
            raise RuntimeError("cache backend down")
        super().__setitem__(key, value)


@pytest.mark.parametrize(
    "cache",
    [
        lambda: cachetools.LRUCache(maxsize=100, getsizeof=len),  # len(None): TypeError
        lambda: FailingCache(writes=True),
        lambda: FailingCache(reads=True),
    ],
    ids=["getsizeof", "write", "read"],
)
def test_a_failing_cache_never_loses_a_served_result(backend, clock, caplog, monkeypatch, cache):
    from searchfuse.guard import core

    monkeypatch.setattr(core, "FLIGHT_WAIT", 30.0)

    @guard(clock=clock, per_turn=None, cache=cache())
    def web_search(query: str) -> None:
        backend.search(query)
        return None

    assert web_search("nothing") is None  # served, though the cache refused it
    # The flight ended: an identical call searches at once instead of waiting for it.
    second = threading.Thread(target=web_search, args=("nothing",))
    second.start()
    second.join(timeout=5)
    assert not second.is_alive()
    assert backend.queries == ["nothing", "nothing"]
    assert "cache" in caplog.text


async def test_a_failing_cache_never_loses_a_served_async_result(backend, clock, caplog):
    @guard(clock=clock, per_turn=None, cache=FailingCache(writes=True))
    async def web_search(query: str) -> dict:
        return await backend.asearch(query)

    first = await asyncio.wait_for(web_search("q"), 5)
    second = await asyncio.wait_for(web_search("q"), 5)

    assert first == second == {"query": "q", "results": [{"title": "about q"}]}
    assert backend.queries == ["q", "q"]
    assert "not cached" in caplog.text
