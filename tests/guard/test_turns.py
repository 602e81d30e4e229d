"""Turns: ``per_turn`` searches reach the backend per assistant turn, explicit or implicit."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from searchfuse.errors import TurnLimitReached
from searchfuse.guard import TurnBudget, current_turn_id, guard, turn
from searchfuse.testing import FakeClock
from tests.guard.helpers import Backend

PARALLEL = 30


def guarded(backend: Backend, clock: FakeClock, **options: object):
    # cache=False: these tests are about the budget, not about repeated queries.
    options.setdefault("cache", False)

    @guard(clock=clock, **options)  # type: ignore[call-overload]
    def web_search(query: str, max_results: int = 5) -> dict:
        return backend.search(query)

    return web_search


def aguarded(backend: Backend, clock: FakeClock, **options: object):
    options.setdefault("cache", False)

    @guard(clock=clock, **options)  # type: ignore[call-overload]
    async def web_search(query: str, max_results: int = 5) -> dict:
        return await backend.asearch(query)

    return web_search


# -- explicit turns -----------------------------------------------------------------


def test_a_turn_gets_one_search_and_the_next_call_is_told_to_use_it(backend, clock):
    web_search = guarded(backend, clock)

    with turn():
        assert web_search("python 3.13 release date")["query"] == "python 3.13 release date"
        with pytest.raises(TurnLimitReached) as refused:
            web_search("rust 2024 edition")

    assert backend.queries == ["python 3.13 release date"]
    assert refused.value.retry_after is None
    assert refused.value.per_turn == 1
    assert "already used its 1 web search" in refused.value.message
    assert "Use the result of that search" in refused.value.message
    assert "combine" in refused.value.message


def test_a_second_turn_gets_a_fresh_budget(backend, clock):
    web_search = guarded(backend, clock)

    with turn():
        web_search("a")
        with pytest.raises(TurnLimitReached):
            web_search("b")
    with turn():
        web_search("b")

    assert backend.queries == ["a", "b"]


def test_per_turn_sets_the_number_of_searches(backend, clock):
    web_search = guarded(backend, clock, per_turn=2)

    with turn():
        web_search("a")
        web_search("b")
        with pytest.raises(TurnLimitReached) as refused:
            web_search("c")

    assert backend.queries == ["a", "b"]
    assert "already used its 2 web searches" in refused.value.message


def test_per_turn_none_is_unlimited(backend, clock):
    web_search = guarded(backend, clock, per_turn=None)

    with turn():
        for i in range(10):
            web_search(f"q{i}")

    assert len(backend.queries) == 10
    assert web_search.guard_state().turn_searches_left is None


def test_per_turn_zero_never_reaches_the_backend(backend, clock):
    web_search = guarded(backend, clock, per_turn=0)

    with turn(), pytest.raises(TurnLimitReached):
        web_search("a")

    assert backend.queries == []


def test_turn_id_joins_the_same_turn_from_separate_scopes(backend, clock):
    # An integration enters turn(id=...) once per tool call of the same model reply.
    web_search = guarded(backend, clock)

    with turn(id="api-request-7"):
        web_search("a")
    with turn(id="api-request-7"), pytest.raises(TurnLimitReached):
        web_search("b")
    with turn(id="api-request-8"):
        web_search("b")

    assert backend.queries == ["a", "b"]


def test_the_innermost_turn_wins(backend, clock):
    web_search = guarded(backend, clock)

    with turn(id="outer") as outer:
        web_search("a")
        with turn() as inner:
            assert current_turn_id() == inner.id
            web_search("b")
        assert current_turn_id() == outer.id
        with pytest.raises(TurnLimitReached):
            web_search("c")
    assert current_turn_id() is None

    assert backend.queries == ["a", "b"]


def test_thirty_threads_joining_one_turn_make_exactly_one_backend_call(backend, clock):
    web_search = guarded(backend, clock)
    start = threading.Barrier(PARALLEL)
    outcomes: list[str] = []

    def reply_worker(i: int) -> None:
        with turn(id="reply-1"):
            start.wait()
            try:
                web_search(f"query {i}")
                outcomes.append("searched")
            except TurnLimitReached:
                outcomes.append("refused")

    threads = [threading.Thread(target=reply_worker, args=(i,)) for i in range(PARALLEL)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(backend.queries) == 1
    assert sorted(outcomes) == ["refused"] * (PARALLEL - 1) + ["searched"]


def test_thirty_threads_started_in_a_copied_context_share_the_turn(backend, clock):
    # What LangChain's executor does: each submitted call runs in a copy of the context.
    web_search = guarded(backend, clock, on_refusal="return")
    start = threading.Barrier(PARALLEL)

    def call(i: int) -> object:
        start.wait()
        return web_search(f"query {i}")

    with turn(), ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        futures = [pool.submit(contextvars.copy_context().run, call, i) for i in range(PARALLEL)]
        results = [future.result() for future in futures]

    assert len(backend.queries) == 1
    assert sum(isinstance(result, dict) for result in results) == 1
    refusals = [result for result in results if isinstance(result, str)]
    assert len(refusals) == PARALLEL - 1
    assert all(message.startswith("Search refused") for message in refusals)


async def test_thirty_tasks_in_one_turn_make_exactly_one_backend_call(backend, clock):
    web_search = aguarded(backend, clock)

    async with turn():
        results = await asyncio.gather(
            *(web_search(f"query {i}") for i in range(PARALLEL)), return_exceptions=True
        )

    assert len(backend.queries) == 1
    assert sum(isinstance(result, dict) for result in results) == 1
    assert sum(isinstance(result, TurnLimitReached) for result in results) == PARALLEL - 1


async def test_tasks_get_a_fresh_budget_in_the_next_turn(backend, clock):
    web_search = aguarded(backend, clock)

    for reply in range(3):
        async with turn():
            results = await asyncio.gather(
                web_search(f"a{reply}"), web_search(f"b{reply}"), return_exceptions=True
            )
        assert sum(isinstance(result, dict) for result in results) == 1

    assert len(backend.queries) == 3


def test_tools_sharing_a_budget_share_one_search_per_turn(backend, clock):
    budget = TurnBudget()
    tavily_search = guarded(backend, clock, budget=budget)
    other_search = guarded(backend, clock, budget=budget)

    with turn():
        tavily_search("a")
        with pytest.raises(TurnLimitReached):
            other_search("b")

    assert backend.queries == ["a"]


def test_tools_have_their_own_budget_by_default(backend, clock):
    tavily_search = guarded(backend, clock)
    other_search = guarded(backend, clock)

    with turn():
        tavily_search("a")
        other_search("b")

    assert backend.queries == ["a", "b"]


# -- implicit turns (outside any turn() scope) -----------------------------------------


def test_implicit_burst_refuses_a_call_half_a_second_later_and_allows_one_three_seconds_later(
    backend, clock
):
    web_search = guarded(backend, clock)

    web_search("a")
    clock.advance(0.5)
    with pytest.raises(TurnLimitReached):
        web_search("b")
    clock.advance(2.5)  # 3 s after the first call
    web_search("c")

    assert backend.queries == ["a", "c"]


def test_min_interval_sets_the_burst_window(backend, clock):
    web_search = guarded(backend, clock, min_interval=10.0)

    web_search("a")
    clock.advance(5)
    with pytest.raises(TurnLimitReached):
        web_search("b")
    clock.advance(10)
    web_search("c")

    assert backend.queries == ["a", "c"]


def test_the_burst_window_runs_from_the_bursts_first_call(backend, clock):
    web_search = guarded(backend, clock)
    backend.duration = 5.0  # the search takes 5 s

    web_search("a")
    clock.advance(1)  # 6 s after the burst began, 1 s after its search ended
    web_search("b")  # a new burst: a slow search does not stretch the window

    assert backend.queries == ["a", "b"]


@pytest.mark.parametrize("every", [0.5, 1.0, 1.5, 1.9])
def test_steady_sequential_calls_keep_getting_searches(backend, clock, every):
    """An agent that searches once every `every` seconds without turn scopes (a plain
    `@guard` tool): refused calls never extend the burst, so a search is served at
    least once per `min_interval` plus one call's spacing, for as long as it calls."""
    web_search = guarded(backend, clock)  # min_interval 2 s
    served: list[float] = []
    t = 0.0
    while t < 60:
        try:
            web_search(f"q{t}")
            served.append(t)
        except TurnLimitReached:
            pass
        clock.advance(every)
        t += every
    gaps = [b - a for a, b in itertools.pairwise(served)]
    assert len(served) >= 60 // (2 + every)
    assert max(gaps) <= 2 + every + 1e-9
    assert min(gaps) >= 2 - 1e-9  # and never two searches inside one window


def test_a_refused_call_does_not_extend_the_burst(backend, clock):
    web_search = guarded(backend, clock)
    web_search("a")
    for _ in range(3):
        clock.advance(0.6)  # 0.6, 1.2, 1.8 s after the burst began
        with pytest.raises(TurnLimitReached):
            web_search("again")
    clock.advance(0.3)  # 2.1 s after the first call, 0.3 s after the last refusal
    web_search("b")
    assert backend.queries == ["a", "b"]


def test_calls_that_overlap_are_one_burst_however_long_they_run(backend, clock):
    web_search = guarded(backend, clock)
    backend.hold()
    first = threading.Thread(target=web_search, args=("a",))
    first.start()
    assert backend.entered.wait(timeout=5)

    clock.advance(60)  # long past min_interval, but "a" is still running
    with pytest.raises(TurnLimitReached):
        web_search("b")

    backend.release()
    first.join()
    clock.advance(3)
    web_search("c")

    assert backend.queries == ["a", "c"]


def test_thirty_parallel_threads_outside_a_turn_are_one_implicit_turn(backend, clock):
    web_search = guarded(backend, clock)
    start = threading.Barrier(PARALLEL)
    outcomes: list[str] = []

    def worker(i: int) -> None:
        start.wait()
        try:
            web_search(f"query {i}")
            outcomes.append("searched")
        except TurnLimitReached:
            outcomes.append("refused")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(PARALLEL)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(backend.queries) == 1
    assert outcomes.count("searched") == 1


async def test_thirty_parallel_tasks_outside_a_turn_are_one_implicit_turn(backend, clock):
    web_search = aguarded(backend, clock)

    results = await asyncio.gather(
        *(web_search(f"query {i}") for i in range(PARALLEL)), return_exceptions=True
    )

    assert len(backend.queries) == 1
    assert sum(isinstance(result, TurnLimitReached) for result in results) == PARALLEL - 1


def test_guard_state_reports_the_turn(backend, clock):
    web_search = guarded(backend, clock, per_turn=2)

    with turn(id="reply-9"):
        assert web_search.guard_state().turn_searches == 0
        web_search("a")
        state = web_search.guard_state()
        assert state.turn_id == "reply-9"
        assert state.turn_searches == 1
        assert state.turn_searches_left == 1

    web_search("b")  # implicit turn
    assert web_search.guard_state().turn_id is None
    assert web_search.guard_state().turn_searches == 1
    clock.advance(3)
    assert web_search.guard_state().turn_searches == 0  # the next call starts a new burst


def test_a_turn_object_reports_its_id():
    assert turn(id="api-request-7").id == "api-request-7"
    assert turn().id != turn().id
    assert repr(turn(id="x")) == "Turn(id='x')"


def test_turn_budget_forgets_the_oldest_turns(backend, clock):
    budget = TurnBudget(remember=2)
    web_search = guarded(backend, clock, budget=budget)

    for reply in ("r1", "r2", "r3"):
        with turn(id=reply):
            web_search(reply)
    with turn(id="r1"):
        web_search("r1 again")  # r1 was forgotten: a fresh budget

    assert backend.queries == ["r1", "r2", "r3", "r1 again"]
    with pytest.raises(ValueError):
        TurnBudget(remember=0)
