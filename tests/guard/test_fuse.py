"""The fuse: the first 429 stops the caller; uncached calls are refused until the cooldown ends."""

from __future__ import annotations

import email.utils
import threading

import pytest

from searchfuse.errors import CooldownActive, RateLimited, TurnLimitReached
from searchfuse.guard import Fuse, guard, turn
from searchfuse.testing import FakeClock
from tests.guard.helpers import Backend, http_error


def guarded(backend: Backend, clock: FakeClock, **options: object):
    # Unlimited turns and no cache: these tests are about the fuse alone.
    options.setdefault("per_turn", None)
    options.setdefault("cache", False)

    @guard(clock=clock, **options)  # type: ignore[call-overload]
    def web_search(query: str) -> dict:
        return backend.search(query)

    return web_search


class StatusError(Exception):
    """A client library's error that carries the HTTP status as ``status_code``."""

    def __init__(self, status_code: int, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code
        self.retry_after = retry_after


class ResponseError(Exception):
    """A client library's error that carries the response (``response.status_code``)."""

    def __init__(self, response: object) -> None:
        super().__init__("request failed")
        self.response = response


class _Response:
    def __init__(self, status_code: int, headers: dict[str, str]) -> None:
        self.status_code = status_code
        self.headers = headers


# tavily-python's error for a 429, recognised by module and name (it is optional).
UsageLimitExceededError = type(
    "UsageLimitExceededError", (Exception,), {"__module__": "tavily.errors"}
)


def test_a_429_with_retry_after_7_refuses_for_7_seconds_then_passes(backend, clock):
    web_search = guarded(backend, clock)
    backend.fail_next(http_error(429, retry_after="7"))

    with pytest.raises(RateLimited) as stopped:
        web_search("a")
    assert stopped.value.retry_after == 7
    assert "answered 429" in stopped.value.message
    assert "Do not retry and do not switch to another search tool" in stopped.value.message
    assert "paused for 7 seconds" in stopped.value.message
    assert isinstance(stopped.value.__cause__, Exception)  # the original error is kept

    clock.advance(3)
    with pytest.raises(CooldownActive) as refused:
        web_search("b")
    assert refused.value.retry_after == 4
    assert "4 more seconds" in refused.value.message
    assert "ask whether to wait" in refused.value.message
    state = web_search.guard_state()
    assert state.fuse_tripped
    assert state.cooldown_left == 4

    clock.advance(4)
    assert web_search("c")["query"] == "c"
    assert backend.queries == ["a", "c"]  # no retry, nothing sent during the cooldown
    assert not web_search.guard_state().fuse_tripped


@pytest.mark.parametrize(
    ("error", "cooldown"),
    [
        pytest.param(RateLimited(12.0), 12, id="searchfuse RateLimited (router)"),
        pytest.param(http_error(429, "12"), 12, id="httpx.HTTPStatusError"),
        pytest.param(StatusError(429, retry_after=12), 12, id="status_code attribute"),
        pytest.param(
            ResponseError(_Response(429, {"retry-after": "12"})), 12, id="response.status_code"
        ),
        pytest.param(UsageLimitExceededError("rate limit"), 60, id="tavily-python"),
        pytest.param(http_error(429), 60, id="no Retry-After: the default cooldown"),
    ],
)
def test_every_kind_of_429_trips_the_fuse(backend, clock, error, cooldown):
    web_search = guarded(backend, clock)
    backend.fail_next(error)

    with pytest.raises(RateLimited) as stopped:
        web_search("a")
    assert stopped.value.retry_after == cooldown
    with pytest.raises(CooldownActive) as refused:
        web_search("b")
    assert refused.value.retry_after == cooldown
    assert backend.queries == ["a"]


def test_the_router_s_rate_limited_is_raised_as_it_is(backend, clock):
    web_search = guarded(backend, clock)
    original = RateLimited(7.0, key="tvly-dev-…0001")
    backend.fail_next(original)

    with pytest.raises(RateLimited) as stopped:
        web_search("a")

    assert stopped.value is original
    assert web_search.guard_state().cooldown_left == 7


def test_cooldown_is_the_fallback_without_retry_after(backend, clock):
    web_search = guarded(backend, clock, cooldown=30.0)
    backend.fail_next(http_error(429))

    with pytest.raises(RateLimited) as stopped:
        web_search("a")

    assert stopped.value.retry_after == 30


def test_retry_after_as_an_http_date_is_read_on_the_guard_s_clock(backend, clock):
    web_search = guarded(backend, clock)
    backend.fail_next(http_error(429, email.utils.formatdate(clock() + 120, usegmt=True)))

    with pytest.raises(RateLimited) as stopped:
        web_search("a")

    assert stopped.value.retry_after == 120


def test_a_huge_retry_after_is_clamped_to_an_hour(backend, clock):
    web_search = guarded(backend, clock)
    backend.fail_next(http_error(429, "86400"))

    with pytest.raises(RateLimited) as stopped:
        web_search("a")

    assert stopped.value.retry_after == 3600


def test_a_malformed_retry_after_counts_as_absent(backend, clock):
    web_search = guarded(backend, clock, cooldown=45.0)
    backend.fail_next(http_error(429, "soon"))

    with pytest.raises(RateLimited) as stopped:
        web_search("a")

    assert stopped.value.retry_after == 45


@pytest.mark.parametrize("status", [400, 401, 432, 500])
def test_other_errors_propagate_unchanged_and_do_not_trip_the_fuse(backend, clock, status):
    web_search = guarded(backend, clock)
    error = http_error(status)
    backend.fail_next(error)

    with pytest.raises(type(error)) as raised:
        web_search("a")
    assert raised.value is error

    web_search("b")
    assert backend.queries == ["a", "b"]
    assert not web_search.guard_state().fuse_tripped


def test_an_error_without_status_propagates_unchanged(backend, clock):
    web_search = guarded(backend, clock)
    error = ConnectionError("no route to host")
    backend.fail_next(error)

    with pytest.raises(ConnectionError) as raised:
        web_search("a")

    assert raised.value is error


def test_the_cooldown_refusal_costs_no_turn_budget(backend, clock):
    web_search = guarded(backend, clock, per_turn=1)
    backend.fail_next(http_error(429, "5"))

    with turn(), pytest.raises(RateLimited):
        web_search("a")
    with turn():
        with pytest.raises(CooldownActive):
            web_search("b")
        clock.advance(5)
        web_search("c")  # the refused call did not spend this turn's search

    assert backend.queries == ["a", "c"]


def test_the_429_spends_the_turn_s_search(backend, clock):
    # A search that reached the backend counts, whatever it answered.
    web_search = guarded(backend, clock, per_turn=1)
    backend.fail_next(http_error(429, "1"))

    with turn():
        with pytest.raises(RateLimited):
            web_search("a")
        clock.advance(2)
        with pytest.raises(TurnLimitReached):
            web_search("b")


def test_tools_sharing_a_fuse_stop_together(backend, clock):
    fuse = Fuse()
    tavily_search = guarded(backend, clock, fuse=fuse)
    other_search = guarded(backend, clock, fuse=fuse)
    backend.fail_next(http_error(429, "20"))

    with pytest.raises(RateLimited):
        tavily_search("a")
    with pytest.raises(CooldownActive) as refused:
        other_search("b")

    assert refused.value.retry_after == 20
    assert backend.queries == ["a"]
    assert fuse.cooldown_until == clock() + 20


def test_a_fractional_retry_after_is_kept_exactly(backend, clock):
    web_search = guarded(backend, clock)
    original = RateLimited(1.5)
    backend.fail_next(original)

    with pytest.raises(RateLimited) as stopped:
        web_search("a")

    assert stopped.value is original
    assert stopped.value.retry_after == 1.5


def test_a_fuse_is_only_ever_extended(clock):
    fuse = Fuse()
    assert fuse.trip(30, now=clock()) == 30
    assert fuse.trip(5, now=clock()) == 30  # a shorter cooldown does not cut the running one
    assert fuse.remaining(clock() + 10) == 20
    fuse.reset()
    assert fuse.remaining(clock()) == 0
    fuse.check(clock())  # nothing raised


def test_parallel_calls_after_a_429_are_refused_without_traffic(backend, clock):
    web_search = guarded(backend, clock)
    backend.fail_next(http_error(429, "60"))
    with pytest.raises(RateLimited):
        web_search("a")

    refusals: list[CooldownActive] = []

    def worker(i: int) -> None:
        try:
            web_search(f"q{i}")
        except CooldownActive as exc:
            refusals.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(refusals) == 30
    assert backend.queries == ["a"]


async def test_a_429_in_an_async_tool_trips_the_fuse(backend, clock):
    @guard(clock=clock, cache=False, per_turn=None)
    async def web_search(query: str) -> dict:
        return await backend.asearch(query)

    backend.fail_next(http_error(429, "7"))
    with pytest.raises(RateLimited) as stopped:
        await web_search("a")
    assert stopped.value.retry_after == 7

    clock.advance(6)
    with pytest.raises(CooldownActive) as refused:
        await web_search("b")
    assert refused.value.retry_after == 1

    clock.advance(1)
    await web_search("c")
    assert backend.queries == ["a", "c"]


def test_on_refusal_return_hands_the_429_to_the_model(backend, clock):
    web_search = guarded(backend, clock, on_refusal="return")
    backend.fail_next(http_error(429, "7"))

    message = web_search("a")

    assert isinstance(message, str)
    assert "cooling down for 7 seconds" in message
    assert web_search("b").startswith("Search refused: the search backend is cooling down")
