"""``searchfuse.Guard``: the public rules object under ``@guard``, used by every integration."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable
from typing import Any

import pytest

import searchfuse
from searchfuse import BadRequest, CooldownActive, Guard, RateLimited, TurnLimitReached, turn
from searchfuse.guard import Call, MappingLookup, core, guard, reset_all
from searchfuse.testing import FakeTavily
from tests.guard.helpers import Backend, http_error


def test_run_applies_the_rules_in_order(backend: Backend, clock: Any) -> None:
    rules = Guard(per_turn=1, clock=clock, checklist=[MappingLookup({"local": "known"})])
    with turn():
        assert rules.run(Call("local"), lambda: backend.search("local")) == "known"
        first = rules.run(Call("python"), lambda: backend.search("python"))
        assert rules.run(Call("PYTHON "), lambda: backend.search("python")) == first  # cached
        with pytest.raises(TurnLimitReached):
            rules.run(Call("rust"), lambda: backend.search("rust"))
    assert backend.queries == ["python"]
    state = rules.state()
    assert (state.searches, state.cache_hits, state.checklist_answers, state.refusals) == (
        1,
        1,
        1,
        1,
    )


async def test_arun_is_the_same_flow(backend: Backend, clock: Any) -> None:
    rules = Guard(per_turn=1, clock=clock)
    async with turn():
        await rules.arun("python", lambda: backend.asearch("python"))
        assert rules.cached(Call("python"))
        with pytest.raises(TurnLimitReached):
            await rules.arun("rust", lambda: backend.asearch("rust"))
    assert backend.queries == ["python"]


def test_a_429_trips_the_fuse_and_check_reports_it(backend: Backend, clock: Any) -> None:
    rules = Guard(per_turn=None, clock=clock)
    assert rules.check() is None
    backend.fail_next(http_error(429, "30"))
    with pytest.raises(RateLimited) as stopped:
        rules.run("a", lambda: backend.search("a"))
    assert stopped.value.retry_after == 30
    refusal = rules.check()
    assert isinstance(refusal, CooldownActive)
    assert refusal.retry_after == 30
    clock.advance(31)
    assert rules.check() is None


def test_decide_answers_a_whole_reply_at_once(backend: Backend, clock: Any) -> None:
    rules = Guard(per_turn=2, clock=clock)
    rules.run("cached one", lambda: backend.search("cached one"))
    calls = [Call("a"), Call("A"), Call("cached one"), Call("b"), Call("c"), Call("d")]
    decisions = rules.decide(calls, turn_id="reply-1")
    # "a" and its repeat share one search, the cache hit is free, "b" takes
    # the second slot, "c" and "d" are refused with the turn-limit message.
    assert [d is None for d in decisions] == [True, True, True, True, False, False]
    assert all(isinstance(d, TurnLimitReached) for d in decisions[4:])
    # Nothing was reserved: the reply's budget is spent by the calls that run.
    with turn(id="reply-1"):
        rules.run("a", lambda: backend.search("a"))
        rules.run("b", lambda: backend.search("b"))
        with pytest.raises(TurnLimitReached):
            rules.run("c", lambda: backend.search("c"))


def test_decide_refuses_every_uncached_call_during_a_cooldown(clock: Any) -> None:
    rules = Guard(clock=clock)
    rules.fuse.trip(20, now=clock())
    decisions = rules.decide([Call("a"), Call("b")])
    assert all(isinstance(d, CooldownActive) for d in decisions)
    assert rules.state().refusals == 2


def test_reset_all_resets_every_live_guard(backend: Backend, clock: Any) -> None:
    @guard(clock=clock)
    def web_search(query: str) -> dict[str, Any]:
        return backend.search(query)

    rules = Guard(clock=clock)
    with turn(id="t"):
        web_search("a")
        rules.run("a", lambda: backend.search("a"))
    rules.fuse.trip(60, now=clock())
    web_search.guard.fuse.trip(60, now=clock())
    reset_all()
    with turn(id="t"):  # the same turn id: counts were forgotten
        web_search("b")
        rules.run("a", lambda: backend.search("a"))  # cache emptied: searched again
    assert backend.queries == ["a", "a", "b", "a"]
    assert rules.check() is None


def test_the_registry_does_not_keep_guards_alive() -> None:
    import weakref

    rules = Guard()
    ref = weakref.ref(rules)
    del rules
    gc.collect()
    assert ref() is None


def test_guard_is_exported_from_the_package() -> None:
    assert searchfuse.Guard is Guard
    assert isinstance(guard(lambda query: query).guard, Guard)  # type: ignore[attr-defined]


def test_a_backend_is_required_without_a_router() -> None:
    with pytest.raises(TypeError, match="needs a backend"):
        Guard().run("a")


# -- a tool that retries itself ------------------------------------------------------------


def test_a_tool_retrying_itself_with_the_same_arguments_does_not_deadlock(
    backend: Backend, clock: Any
) -> None:
    attempts: list[str] = []

    @guard(clock=clock)
    def web_search(query: str) -> dict[str, Any]:
        attempts.append(query)
        if len(attempts) == 1:
            return web_search(query)  # a retry inside the tool
        return backend.search(query)

    done = threading.Event()
    result: list[Any] = []

    def agent() -> None:
        with turn():
            result.append(web_search("python"))
        done.set()

    threading.Thread(target=agent, daemon=True).start()
    assert done.wait(timeout=5), "the retry waited for its own search"
    assert result == [{"query": "python", "results": [{"title": "about python"}]}]
    assert attempts == ["python", "python"]
    # The retry is the same search: it spent no second search of the turn.
    assert web_search.guard_state().searches == 2


async def test_an_async_tool_retrying_itself_does_not_deadlock(
    backend: Backend, clock: Any
) -> None:
    attempts: list[str] = []

    @guard(clock=clock)
    async def web_search(query: str) -> dict[str, Any]:
        attempts.append(query)
        if len(attempts) == 1:
            return await web_search(query)
        return await backend.asearch(query)

    async with turn():
        result = await asyncio.wait_for(web_search("python"), timeout=5)
    assert result["query"] == "python"
    assert attempts == ["python", "python"]


def test_a_tool_retrying_itself_with_another_query_keeps_its_first_search_spent(
    backend: Backend, clock: Any
) -> None:
    # The retry is a second search: refused. The first request was sent all the same,
    # so the turn stays spent and no later call of the reply reaches the backend.
    @guard(clock=clock)
    def web_search(query: str) -> dict[str, Any]:
        found = backend.search(query)
        if query == "rare python 3.13 pep":
            return web_search("python 3.13")  # nothing found: a broader query
        return found

    with turn():
        with pytest.raises(TurnLimitReached):
            web_search("rare python 3.13 pep")
        with pytest.raises(TurnLimitReached) as refused:
            web_search("rust 2024")
        assert web_search.guard_state().turn_searches == 1
    assert backend.queries == ["rare python 3.13 pep"]
    assert refused.value.failed  # the model is not pointed at a result that never came


async def test_a_tool_calling_another_guarded_tool_keeps_its_search_spent(
    backend: Backend, clock: Any
) -> None:
    budget = searchfuse.TurnBudget()

    @guard(clock=clock, budget=budget)
    async def news_search(query: str) -> dict[str, Any]:
        return await backend.asearch(query)

    @guard(clock=clock, budget=budget)
    async def web_search(query: str) -> dict[str, Any]:
        await backend.asearch(query)
        return await news_search(query + " news")

    async with turn():
        with pytest.raises(TurnLimitReached):
            await web_search("python 3.13")
        with pytest.raises(TurnLimitReached):
            await news_search("rust 2024")
    assert backend.queries == ["python 3.13"]


# -- generators ------------------------------------------------------------------------------


def test_generator_functions_are_refused_at_decoration() -> None:
    def results(query: str) -> Any:
        yield query

    async def aresults(query: str) -> Any:
        yield query

    with pytest.raises(TypeError, match="generator function"):
        guard(results)
    with pytest.raises(TypeError, match="async generator function"):
        guard(aresults)


def test_a_returned_generator_is_consumed_inside_the_guard(backend: Backend, clock: Any) -> None:
    def pages(query: str) -> Any:
        yield {"page": 1}
        raise http_error(429, "40")

    @guard(clock=clock, per_turn=None)
    def web_search(query: str) -> Any:
        return pages(query)

    with pytest.raises(RateLimited) as stopped:
        web_search("a")
    assert stopped.value.retry_after == 40  # the 429 while consuming tripped the fuse
    with pytest.raises(CooldownActive):
        web_search("b")


def test_a_returned_generator_is_cached_as_its_items(clock: Any) -> None:
    produced: list[int] = []

    def pages() -> Any:
        produced.append(1)
        yield from ("x", "y")

    @guard(clock=clock, per_turn=None)
    def web_search(query: str) -> Any:
        return pages()

    assert web_search("a") == ["x", "y"]
    assert web_search("a") == ["x", "y"]  # not a spent generator
    assert produced == [1]


async def test_an_async_generator_result_is_consumed_inside_the_guard(clock: Any) -> None:
    async def pages() -> Any:
        yield 1
        raise http_error(429, "15")

    rules = Guard(clock=clock, per_turn=None)
    with pytest.raises(RateLimited):
        await rules.arun("a", pages)
    assert isinstance(rules.check(), CooldownActive)


# -- what calls waiting for an identical search in flight are told ------------------------


class _SlowGate:
    """A router stand-in whose availability check blocks until released."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.searched: list[str] = []

    def ensure_available(self) -> None:
        self.entered.set()
        assert self.open.wait(timeout=5)

    def search(self, query: str, **params: Any) -> dict[str, Any]:
        self.searched.append(query)
        return {"query": query, "results": []}


def _run_in_thread(target: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def work() -> None:
        try:
            out.append(target())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, out


@pytest.fixture
def wait_for_waiters(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Block (bounded) until ``count`` calls have joined the search in flight.

    A call that reaches ``_Flight.wait`` has joined the flight: however late the
    machine schedules it, it gets the leader's outcome, not a search of its own.
    """
    joined = threading.Semaphore(0)
    wait = core._Flight.wait

    def joining(flight: core._Flight, timeout: float) -> tuple[str, Any] | None:
        joined.release()
        return wait(flight, timeout)

    monkeypatch.setattr(core._Flight, "wait", joining)

    def wait_for(count: int) -> None:
        for _ in range(count):
            assert joined.acquire(timeout=10), "no call joined the search in flight"

    return wait_for


def test_a_waiter_is_not_refused_for_the_leader_s_spent_turn(
    clock: Any, wait_for_waiters: Callable[[int], None]
) -> None:
    gate = _SlowGate()
    rules = Guard(router=gate, per_turn=1, clock=clock)  # type: ignore[arg-type]
    with turn(id="spent"):
        gate.open.set()
        rules.run("other")  # the leader's turn has used its one search
        gate.open.clear()

    def leader() -> Any:
        with turn(id="spent"):
            return rules.run("python")

    def waiter() -> Any:
        with turn(id="fresh"):
            return rules.run("python")

    first, led = _run_in_thread(leader)
    assert gate.entered.wait(timeout=5)
    second, waited = _run_in_thread(waiter)
    wait_for_waiters(1)
    gate.open.set()
    first.join(5)
    second.join(5)
    assert isinstance(led[0], TurnLimitReached)  # the leader's own turn is spent
    assert waited == [{"query": "python", "results": []}]  # the waiter's is not
    assert gate.searched == ["other", "python"]


def test_waiters_of_a_search_stopped_by_a_429_get_the_cooldown_not_a_request(
    backend: Backend, clock: Any, wait_for_waiters: Callable[[int], None]
) -> None:
    rules = Guard(per_turn=None, clock=clock)
    backend.hold()
    backend.fail_next(http_error(429, "30"))
    first, led = _run_in_thread(lambda: rules.run("q", lambda: backend.search("q")))
    assert backend.entered.wait(timeout=5)
    second, waited = _run_in_thread(lambda: rules.run("q", lambda: backend.search("q")))
    wait_for_waiters(1)
    backend.release()
    first.join(5)
    second.join(5)
    assert isinstance(led[0], RateLimited)
    assert isinstance(waited[0], CooldownActive)
    assert waited[0].retry_after == 30
    assert backend.queries == ["q"]


def test_a_backend_error_is_shared_with_the_waiters(
    backend: Backend, clock: Any, wait_for_waiters: Callable[[int], None]
) -> None:
    rules = Guard(per_turn=None, clock=clock)
    backend.hold()
    backend.fail_next(http_error(503))
    first, led = _run_in_thread(lambda: rules.run("q", lambda: backend.search("q")))
    assert backend.entered.wait(timeout=5)
    second, waited = _run_in_thread(lambda: rules.run("q", lambda: backend.search("q")))
    wait_for_waiters(1)
    backend.release()
    first.join(5)
    second.join(5)
    assert "503" in str(led[0]) and waited[0] is led[0]
    assert backend.queries == ["q"]


async def test_a_cancelled_leader_gives_its_turn_back_to_the_waiters(
    backend: Backend, clock: Any
) -> None:
    started = asyncio.Event()
    proceed = asyncio.Event()
    calls: list[str] = []

    @guard(clock=clock, per_turn=1)
    async def web_search(query: str) -> dict[str, Any]:
        calls.append(query)
        if len(calls) == 1:
            started.set()
            await proceed.wait()  # hangs until cancelled
        return {"query": query}

    async with turn():
        leader = asyncio.create_task(web_search("q"))
        await started.wait()
        waiter = asyncio.create_task(web_search("q"))
        await asyncio.sleep(0)
        leader.cancel()
        # The waiter is in the same turn: the cancelled search produced nothing,
        # so it must not be told to "use the result of that search".
        assert await waiter == {"query": "q"}
        with pytest.raises(TurnLimitReached):
            await web_search("another")  # the waiter's search counted
    assert calls == ["q", "q"]


def test_an_interrupted_sync_leader_lets_the_waiter_search(
    backend: Backend, clock: Any, wait_for_waiters: Callable[[int], None]
) -> None:
    rules = Guard(per_turn=1, clock=clock)
    backend.hold()
    backend.fail_next(KeyboardInterrupt())

    def call() -> Any:
        with turn(id="reply"):
            return rules.run("q", lambda: backend.search("q"))

    first, led = _run_in_thread(call)
    assert backend.entered.wait(timeout=5)
    second, waited = _run_in_thread(call)
    wait_for_waiters(1)
    backend.release()
    first.join(5)
    second.join(5)
    assert isinstance(led[0], KeyboardInterrupt)
    assert waited == [{"query": "q", "results": [{"title": "about q"}]}]
    assert backend.queries == ["q", "q"]


def test_the_model_gets_a_short_no_key_refusal_and_the_log_gets_the_diagnosis(
    clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from searchfuse import NoKeyAvailable

    class Diagnosis:
        def __str__(self) -> str:
            return "1. config: config/keys.json holds 2 keys\nRun `searchfuse diagnose --probe`."

    class NoKeys:
        def ensure_available(self) -> None:
            raise NoKeyAvailable({"tvly-dev-…0001": "auth (401)"}, diagnosis=Diagnosis())  # type: ignore[arg-type]

        def search(self, query: str, **params: Any) -> dict[str, Any]:
            raise AssertionError("no request may be sent")

    @guard(router=NoKeys(), clock=clock, on_refusal="return")  # type: ignore[arg-type]
    def web_search(query: str) -> dict[str, Any]:
        return {}

    with caplog.at_level("WARNING", logger="searchfuse.guard"):
        message = web_search("a")
    assert "no API key can serve right now" in message
    for operator_text in ("keys.json", "searchfuse diagnose", "tvly-dev", "401"):
        assert operator_text not in message
    assert "searchfuse diagnose --probe" in caplog.text


def test_a_waiter_whose_event_loop_is_gone_does_not_break_the_leader(
    backend: Backend, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rules = Guard(per_turn=None, clock=clock)
    backend.hold()
    first, led = _run_in_thread(lambda: rules.run("q", lambda: backend.search("q")))
    assert backend.entered.wait(timeout=5)

    async def wait_briefly() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(rules.arun("q", backend.asearch), timeout=0.01)

    asyncio.run(wait_briefly())  # the waiter's loop is closed now
    with caplog.at_level("ERROR"):
        backend.release()
        first.join(5)
    assert led == [{"query": "q", "results": [{"title": "about q"}]}]
    assert backend.queries == ["q"]
    assert "exception calling callback" not in caplog.text  # nothing blew up on the way


# -- a call without a query ----------------------------------------------------------------


def test_a_call_without_a_query_reaches_the_router_as_a_bad_request(
    fake_tavily: FakeTavily, tavily_server: str
) -> None:
    # An integration hands the model's arguments over as they came; `query=None` is the
    # model's mistake to fix, not a guard without a backend.
    with searchfuse.Router(["tvly-dev-test0001"], base_url=tavily_server) as router:
        rules = Guard(router=router)
        with pytest.raises(BadRequest, match="query must be a non-empty string"):
            rules.run(Call(None, {}, "web_search"))  # type: ignore[arg-type]
        with pytest.raises(BadRequest, match="query must be a non-empty string"):
            asyncio.run(rules.arun(Call(None, {}, "web_search")))  # type: ignore[arg-type]
        assert rules.run("python 3.13")["query"] == "python 3.13"  # its turn's search is left
    assert [r.query for r in fake_tavily.searches] == ["python 3.13"]
