"""What the guard does with a backend's errors: budget, fuse, message, and the error itself."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import email.utils
import functools
from typing import Any

import pytest

from searchfuse import Router
from searchfuse.errors import (
    BadRequest,
    CooldownActive,
    RateLimited,
    StoreUnavailable,
    Throttled,
    TurnLimitReached,
)
from searchfuse.guard import Guard, guard, turn
from searchfuse.guard.calls import Call
from searchfuse.testing import FakeClock, FakeTavily
from tests.guard.helpers import Backend


def searching(backend: Backend, **options: Any) -> Any:
    """A guarded tool over the recording backend."""

    @guard(**options)
    def web_search(query: str) -> dict:
        return backend.search(query)

    return web_search


# -- a request that was never sent gives the turn's search back -----------------------

UNSENT = [
    pytest.param(BadRequest("query must be a non-empty string", sent=False), id="bad-request"),
    pytest.param(StoreUnavailable("redis://localhost", "unreachable", "Start it."), id="store"),
    pytest.param(Throttled(3.0), id="throttled"),
    pytest.param(CooldownActive(3.0), id="cooldown"),
]


@pytest.mark.parametrize("cache", [True, False])
@pytest.mark.parametrize("error", UNSENT)
def test_an_error_that_says_nothing_was_sent_spends_no_search(backend, clock, error, cache):
    web_search = searching(backend, clock=clock, cache=cache)

    backend.fail_next(error)
    with turn():
        with pytest.raises(type(error)) as raised:
            web_search("broken query")
        assert raised.value is error
        assert web_search("fixed query")["query"] == "fixed query"  # the turn's search is left

    assert backend.queries == ["broken query", "fixed query"]


def test_a_query_the_router_refuses_before_sending_leaves_the_turn_its_search():
    clock = FakeClock()
    tavily = FakeTavily(keys=["tvly-dev-test0001"], clock=clock)
    router = Router(["tvly-dev-test0001"], transport=tavily.transport(), clock=clock)

    @guard(router=router, clock=clock, on_refusal="return")
    def web_search(query: str, max_results: int = 5) -> dict:
        """Search the web."""

    with turn():
        for query in ("", "   ", "x" * 401, "\ud800"):
            with pytest.raises(BadRequest) as raised:
                web_search(query)
            assert raised.value.sent is False
        result = web_search("python 3.13")
        assert result["query"] == "python 3.13"
        assert web_search.guard_state().turn_searches == 1

    assert [request.body["query"] for request in tavily.searches] == ["python 3.13"]


def test_an_async_router_refusal_before_sending_spends_nothing():
    clock = FakeClock()
    tavily = FakeTavily(keys=["tvly-dev-test0001"], clock=clock)
    router = Router(
        ["tvly-dev-test0001"],
        transport=tavily.transport(),
        async_transport=tavily.transport(),
        clock=clock,
    )
    rules = Guard(router=router, clock=clock)

    async def reply() -> Any:
        async with turn():
            with pytest.raises(BadRequest):
                await rules.arun(Call(""))
            return await rules.arun(Call("python 3.13"))

    assert asyncio.run(reply())["query"] == "python 3.13"
    assert len(tavily.searches) == 1


# -- after a failed search, no refusal points at a result ------------------------------


@pytest.mark.parametrize(
    "error",
    [TimeoutError("backend timed out"), BadRequest("bad depth"), ConnectionError("reset")],
)
def test_after_a_failed_search_the_refusal_says_it_failed(backend, clock, error):
    web_search = searching(backend, clock=clock, on_refusal="return")

    backend.fail_next(error)
    with turn():
        with pytest.raises(type(error)):
            web_search("python 3.13")
        told = web_search("python 3.13 release")

    assert isinstance(told, str)
    assert "failed" in told
    assert "Use the result of that search" not in told
    assert backend.queries == ["python 3.13"]  # the failed search was the turn's one search


def test_decide_tells_a_turn_whose_search_failed_that_it_failed(backend, clock):
    rules = Guard(clock=clock)
    backend.fail_next(TimeoutError("slow"))
    with turn(id="reply-1"), pytest.raises(TimeoutError):
        rules.run(Call("a"), lambda: backend.search("a"))
    decisions = rules.decide([Call("b")], turn_id="reply-1")
    assert isinstance(decisions[0], TurnLimitReached)
    assert decisions[0].failed
    assert "Use the result" not in decisions[0].message


# -- any 429 trips the fuse, whatever its Retry-After ---------------------------------


class RateLimitError(Exception):
    status_code = 429

    def __init__(self, retry_after: object) -> None:
        super().__init__("slow down")
        self.retry_after = retry_after


class _Seconds:
    def __index__(self) -> int:
        return 7


class _Broken:
    def __float__(self) -> float:
        raise ArithmeticError("no")


NOW = FakeClock()()
RETRY_AFTER = [
    pytest.param(datetime.timedelta(seconds=7), 7.0, id="timedelta"),
    pytest.param(decimal.Decimal("7"), 7.0, id="decimal"),
    pytest.param(" 7 ", 7.0, id="string-with-spaces"),
    pytest.param(b"7", 7.0, id="bytes"),
    pytest.param(_Seconds(), 7.0, id="int-like"),
    pytest.param(datetime.datetime.fromtimestamp(NOW + 7, tz=datetime.UTC), 7.0, id="datetime"),
    pytest.param(email.utils.formatdate(NOW + 7, usegmt=True), 7.0, id="http-date"),
    pytest.param(datetime.datetime(2030, 1, 1), 60.0, id="naive-datetime-ignored"),
    pytest.param(object(), 60.0, id="object-ignored"),
    pytest.param(_Broken(), 60.0, id="broken-float-ignored"),
    pytest.param("soon", 60.0, id="nonsense-ignored"),
    pytest.param(float("nan"), 60.0, id="nan-ignored"),
]


@pytest.mark.parametrize(("retry_after", "cooldown"), RETRY_AFTER)
def test_any_429_trips_the_fuse_whatever_its_retry_after(backend, retry_after, cooldown):
    clock = FakeClock(NOW)

    web_search = searching(backend, clock=clock, per_turn=None)

    backend.fail_next(RateLimitError(retry_after))
    with pytest.raises(RateLimited) as stopped:
        web_search("a")
    assert stopped.value.retry_after == pytest.approx(cooldown)
    with pytest.raises(CooldownActive):
        web_search("b")
    assert backend.queries == ["a"]


# -- reading the backend's error never replaces it ------------------------------------


class _Raises:
    def __get__(self, instance: object, owner: type) -> Any:
        if instance is None:
            return self
        raise KeyError("boom")


class WeirdError(Exception):
    status_code = _Raises()
    response = _Raises()
    sent = _Raises()


class WeirdResponseError(Exception):
    class _Response:
        status_code = 429
        headers = _Raises()

    response = _Response()
    retry_after = _Raises()


def test_an_attribute_that_raises_never_replaces_the_backend_s_error(backend, clock):
    web_search = searching(backend, clock=clock, per_turn=None)

    error = WeirdError("the backend's own error")
    backend.fail_next(error)
    with pytest.raises(WeirdError) as raised:
        web_search("a")
    assert raised.value is error
    assert not web_search.guard_state().fuse_tripped


def test_a_429_whose_headers_fail_to_read_still_trips_the_fuse(backend, clock):
    web_search = searching(backend, clock=clock, per_turn=None, cooldown=30)

    backend.fail_next(WeirdResponseError("429"))
    with pytest.raises(RateLimited) as stopped:
        web_search("a")
    assert stopped.value.retry_after == 30
    with pytest.raises(CooldownActive):
        web_search("b")


def test_a_status_code_given_as_a_string_is_read(backend, clock):
    class StringStatus(Exception):
        status_code = "429"

    web_search = searching(backend, clock=clock, per_turn=None)

    backend.fail_next(StringStatus())
    with pytest.raises(RateLimited):
        web_search("a")
    with pytest.raises(CooldownActive):
        web_search("b")


# -- StopIteration and friends propagate unchanged -------------------------------------


@pytest.mark.parametrize("cache", [True, False])
@pytest.mark.parametrize("kind", [StopIteration, StopAsyncIteration])
def test_stop_iteration_from_the_backend_propagates_unchanged(clock, kind, cache):
    error = kind("backend iterator exhausted")
    calls: list[str] = []

    @guard(clock=clock, cache=cache, per_turn=None)
    def web_search(query: str) -> dict:
        calls.append(query)
        raise error

    with pytest.raises(kind) as raised:
        web_search("q")
    assert raised.value is error

    @guard(clock=clock, cache=cache, per_turn=None)
    async def aweb_search(query: str) -> dict:
        calls.append(query)
        raise StopAsyncIteration("async backend exhausted")

    with pytest.raises(StopAsyncIteration):
        asyncio.run(aweb_search("q"))
    assert calls == ["q", "q"]


def test_a_search_that_raised_stop_iteration_is_not_cached(backend, clock):
    rules = Guard(clock=clock, per_turn=None)
    error = StopIteration("exhausted")

    def failing() -> dict:
        raise error

    with pytest.raises(StopIteration) as raised:
        rules.run(Call("q"), failing)
    assert raised.value is error
    assert rules.run(Call("q"), lambda: backend.search("q"))["query"] == "q"  # not cached


# -- a sync callable that returns a coroutine -------------------------------------------


class AsyncTool:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, query: str) -> dict:
        self.calls.append(query)
        return {"query": query}


def test_a_partial_of_an_async_tool_is_guarded_as_async(clock):
    tool = AsyncTool()
    web_search = guard(functools.partial(tool), clock=clock, per_turn=None)

    async def twice() -> list[Any]:
        return [await web_search("q"), await web_search("q")]

    assert asyncio.run(twice()) == [{"query": "q"}, {"query": "q"}]
    assert tool.calls == ["q"]  # the second is a cache hit of the awaited value


def test_a_sync_wrapper_returning_a_coroutine_is_refused_clearly_and_spends_nothing(clock):
    tool = AsyncTool()
    web_search = guard(lambda query: tool(query), clock=clock)

    with turn():
        for _ in range(2):
            with pytest.raises(TypeError, match="returned coroutine") as refused:
                web_search("q")
            assert "async def" in str(refused.value)
        assert web_search.guard_state().turn_searches == 0
    assert tool.calls == []  # the coroutine never ran: nothing was searched


# -- a retry inside the tool ------------------------------------------------------------


@pytest.mark.parametrize("cache", [True, False])
def test_a_retry_inside_the_tool_spends_no_second_search(clock, cache):
    calls: list[str] = []

    @guard(clock=clock, cache=cache)
    def web_search(query: str) -> str:
        calls.append(query)
        if len(calls) == 1:
            return web_search(query)  # a retry inside the tool, same arguments
        return "ok"

    with turn():
        assert web_search("q") == "ok"
        assert web_search.guard_state().turn_searches == 1
    assert calls == ["q", "q"]


@pytest.mark.parametrize(
    "detail", ["urls is missing: give a URL or a list of URLs.", "query is too long"]
)
def test_a_bad_request_reads_as_one_sentence_whatever_its_detail_ends_with(detail: str) -> None:
    message = str(BadRequest(detail))
    assert ".." not in message
    assert message.endswith("Fix the search parameters; retrying the same request will fail again.")


# -- a 429 wrapped by the tool: in an exception group, or as the cause of its own error -------


class ToolFailed(Exception):
    """A tool's own error, raised `from` the HTTP error beneath it."""


def _grouped(error: BaseException) -> BaseException:
    return ExceptionGroup("searches failed", [ValueError("page 2 empty"), error])


def _caused(error: BaseException) -> BaseException:
    try:
        raise error
    except Exception as exc:
        try:
            raise ToolFailed("search failed") from exc
        except ToolFailed as wrapped:
            return wrapped


@pytest.mark.parametrize("wrap", [_grouped, _caused], ids=["exception-group", "cause"])
def test_a_wrapped_429_trips_the_fuse_for_its_retry_after(fake_clock: FakeClock, wrap: Any) -> None:
    from tests.guard.helpers import http_error

    sent: list[str] = []

    @guard(clock=fake_clock, per_turn=None)
    def web_search(query: str) -> dict:
        sent.append(query)
        raise wrap(http_error(429, "30"))

    with pytest.raises(RateLimited) as stopped:
        web_search("a")
    assert stopped.value.retry_after == 30.0
    assert isinstance(stopped.value.__cause__, ExceptionGroup | ToolFailed)
    with pytest.raises(CooldownActive):
        web_search("b")  # the fuse is tripped: nothing sent
    assert sent == ["a"]


async def test_an_async_tools_task_group_429_trips_the_fuse(fake_clock: FakeClock) -> None:
    from tests.guard.helpers import http_error

    sent: list[str] = []

    async def page(query: str, number: int) -> None:
        sent.append(f"{query} #{number}")
        if number == 2:
            raise http_error(429, "12")

    @guard(clock=fake_clock, per_turn=None)
    async def web_search(query: str) -> list[str]:
        async with asyncio.TaskGroup() as group:
            for number in (1, 2):
                group.create_task(page(query, number))
        return sent

    with pytest.raises(RateLimited) as stopped:
        await web_search("a")
    assert stopped.value.retry_after == 12.0
    with pytest.raises(CooldownActive):
        await web_search("b")
    assert sent == ["a #1", "a #2"]


@pytest.mark.parametrize("wrap", [_grouped, _caused], ids=["exception-group", "cause"])
def test_a_wrapped_error_that_is_no_429_reaches_the_caller_unchanged(
    fake_clock: FakeClock, wrap: Any
) -> None:
    from tests.guard.helpers import http_error

    raised = wrap(http_error(500))

    @guard(clock=fake_clock, per_turn=None)
    def web_search(query: str) -> dict:
        raise raised

    with pytest.raises(BaseException) as caught:
        web_search("a")
    assert caught.value is raised
    assert web_search.guard_state().cooldown_left == 0  # the fuse was not tripped
