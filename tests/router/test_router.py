"""The reaction table, row by row, through real HTTP semantics (pytest-httpx).

Each test says which key each request used, what the state file says
afterwards and what the caller got.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from email.utils import formatdate
from pathlib import Path

import httpx
import pytest

from searchfuse import (
    BadRequest,
    CooldownActive,
    NoKeyAvailable,
    RateLimited,
    Router,
    SearchFailed,
)
from searchfuse._secrets import fingerprint
from searchfuse.router.policy import AUTH_COOLDOWN, REACTIONS, Outcome
from searchfuse.testing import FakeClock

from ..scripted import KEYS, Upstream, read_state, usage_body

K1, K2, K3, K4 = KEYS


def make(clock: FakeClock, state: Path, keys: list[str] | None = None, **kw: object) -> Router:
    return Router(keys or KEYS[:2], state=state, clock=clock, sleep=clock.advance, **kw)  # type: ignore[arg-type]


def key_state(path: Path, key: str) -> dict[str, object]:
    return read_state(path)["keys"][fingerprint(key)]


def test_every_outcome_has_exactly_one_row() -> None:
    assert set(REACTIONS) == set(Outcome)


# -- 200 ----------------------------------------------------------------------------


def test_200_clears_an_earlier_error_on_the_same_key(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, keys=[K1])
    upstream.search(K1, 500)
    with pytest.raises(NoKeyAvailable):
        router.search("q")
    assert key_state(state_file, K1)["last_error"].startswith("500")
    clock.advance(60.5)
    upstream.search(K1, 200)
    assert router.search("q")["searchfuse"]["key"] == "tvly-dev-…0001"
    ks = key_state(state_file, K1)
    assert ks["last_error"] is None
    assert ks["cooldown_until"] is None
    assert ks["cooldown_reason"] is None


def test_search_sends_bearer_header_and_include_usage(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, keys=[K1])
    upstream.search(K1, 200)
    router.search("what is a fuse", max_results=3, topic="news")
    (body,) = upstream.bodies()
    assert body == {
        "query": "what is a fuse",
        "max_results": 3,
        "topic": "news",
        "include_usage": True,
    }
    assert "api_key" not in body


# -- 400 ----------------------------------------------------------------------------


def test_400_raises_without_penalising_the_key_or_failing_over(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file)
    upstream.search(K1, 400, json_body={"detail": {"error": "Invalid topic"}})
    with pytest.raises(BadRequest, match="Invalid topic") as info:
        router.search("q", topic="weather")
    assert info.value.status_code == 400 and info.value.sent is True
    assert str(info.value).startswith("Tavily rejected the request (400 Bad Request): ")
    assert upstream.searches() == [K1]  # no fail-over
    ks = key_state(state_file, K1)
    assert ks["cooldown_until"] is None and ks["last_error"] is None
    assert router.status()[0].state == "available"


def test_overlong_query_is_refused_before_any_request(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file)
    with pytest.raises(BadRequest, match="400"):
        router.search("x" * 401)
    assert upstream.requests() == []


# -- 401 / 403 ------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
def test_auth_error_parks_key_one_hour_and_same_call_succeeds_on_next_key(
    status: int, upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file)
    upstream.search(K1, status)
    upstream.search(K2, 200)
    result = router.search("q")
    assert result["searchfuse"]["key"] == "tvly-dev-…0002"
    assert upstream.searches() == [K1, K2]
    ks = key_state(state_file, K1)
    assert ks["cooldown_reason"] == "auth"
    assert ks["cooldown_until"] == pytest.approx(clock() + AUTH_COOLDOWN)
    assert ks["disabled"] is False  # never permanent (incident 7)


def test_auth_cooldown_ends_and_the_key_is_tried_again(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, keys=[K1])
    upstream.search(K1, 401)
    with pytest.raises(NoKeyAvailable):
        router.search("q")
    clock.advance(AUTH_COOLDOWN + 1)
    upstream.search(K1, 200)
    assert router.search("q")["searchfuse"]["key"] == "tvly-dev-…0001"


# -- 429 -------------------------------------------------------------------------------


def test_429_stop_parks_for_retry_after_and_tries_no_other_key(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file)
    upstream.search(K1, 429, headers={"Retry-After": "7"})
    with pytest.raises(RateLimited) as info:
        router.search("q")
    assert info.value.retry_after == 7
    assert "7 seconds" in info.value.message
    assert upstream.searches() == [K1]
    ks = key_state(state_file, K1)
    assert ks["cooldown_reason"] == "rate_limited"
    assert ks["cooldown_until"] == pytest.approx(clock() + 7)
    # K2 was never touched.
    assert fingerprint(K2) not in read_state(state_file)["keys"] or (
        key_state(state_file, K2)["cooldown_until"] is None
    )


def test_429_without_retry_after_uses_cooldown_minutes_as_float(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, cooldown_minutes=0.5)
    upstream.search(K1, 429)
    with pytest.raises(RateLimited) as info:
        router.search("q")
    # int(0.5) once made this zero (incident 4).
    assert info.value.retry_after == 30.0
    assert key_state(state_file, K1)["cooldown_until"] == pytest.approx(clock() + 30)


@pytest.mark.parametrize(
    ("header", "expected"),
    [("-5", 60.0), ("soon", 60.0), ("inf", 60.0), ("nan", 60.0), ("99999", 3600.0), ("2.5", 2.5)],
)
def test_429_retry_after_is_validated_and_park_clamped(
    header: str, expected: float, upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file)
    upstream.search(K1, 429, headers={"Retry-After": header})
    with pytest.raises(RateLimited) as info:
        router.search("q")
    assert info.value.retry_after == expected


def test_429_http_date_retry_after(upstream: Upstream, clock: FakeClock, state_file: Path) -> None:
    router = make(clock, state_file)
    upstream.search(K1, 429, headers={"Retry-After": formatdate(clock() + 42, usegmt=True)})
    with pytest.raises(RateLimited) as info:
        router.search("q")
    assert info.value.retry_after == pytest.approx(42, abs=1)


def _sleeping(clock: FakeClock) -> tuple[list[float], Callable[[float], None]]:
    """A sleep that advances `clock`, and the waits it was asked for."""
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)

    return waits, sleep


def test_429_retry_policy_retries_same_key_twice_with_doubling_waits(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    waits, sleep = _sleeping(clock)
    router = Router(KEYS[:2], state=state_file, clock=clock, sleep=sleep, on_429="retry")
    upstream.search(K1, 429, reusable=True)
    with pytest.raises(RateLimited):
        router.search("q")
    assert upstream.searches() == [K1, K1, K1]
    assert waits == [0.5, 1.0]


@pytest.mark.parametrize("retry_after", ["60", "11"])
def test_429_retry_policy_sends_no_retry_the_server_would_refuse(
    upstream: Upstream, clock: FakeClock, state_file: Path, retry_after: str
) -> None:
    # The server's Retry-After wins: a retry before it is over would be another
    # 429, and waiting it out would pass the 10 s a call may wait. So: stop.
    waits: list[float] = []
    router = Router([K1], state=state_file, clock=clock, sleep=waits.append, on_429="retry")
    upstream.search(K1, 429, headers={"Retry-After": retry_after}, reusable=True)
    with pytest.raises(RateLimited) as info:
        router.search("q")
    assert waits == []
    assert upstream.searches() == [K1]
    assert info.value.retry_after == float(retry_after)
    with pytest.raises(CooldownActive):
        router.search("another")  # held, as after "stop"
    assert upstream.searches() == [K1]


def test_429_retry_policy_waits_a_retry_after_within_the_budget(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    waits, sleep = _sleeping(clock)
    router = Router([K1], state=state_file, clock=clock, sleep=sleep, on_429="retry")
    upstream.search(K1, 429, headers={"Retry-After": "4"})
    upstream.search(K1, 200)
    assert router.search("q")["searchfuse"]["key"] == "tvly-dev-…0001"
    assert waits == [4.0]
    assert upstream.searches() == [K1, K1]


def test_429_retry_policy_holds_the_rest_of_the_burst_while_it_retries(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    # While the call that drew the 429 waits to retry, every other search of the
    # router (and of other processes on the same state) is refused unsent.
    refused: list[BaseException] = []

    def sleep(seconds: float) -> None:
        for query in ("b", "c"):
            try:
                router.search(query)
            except CooldownActive as exc:
                refused.append(exc)
        clock.advance(seconds)

    router = Router(KEYS[:2], state=state_file, clock=clock, sleep=sleep, on_429="retry")
    upstream.search(K1, 429, headers={"Retry-After": "2"})
    upstream.search(K1, 200)
    assert router.search("a")["searchfuse"]["key"] == "tvly-dev-…0001"
    assert len(refused) == 2 and all(e.retry_after == 2.0 for e in refused)
    assert upstream.searches() == [K1, K1]  # the retry only, and on the same key


def test_429_retry_policy_a_429_that_finds_a_hold_running_stops_at_once(
    clock: FakeClock, state_file: Path
) -> None:
    # Two searches in flight draw a 429 each: the one whose 429 came first holds
    # the router and retries for the burst; this one, whose 429 comes second,
    # finds the hold and stops without retrying.
    waits: list[float] = []
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/usage":
            return httpx.Response(404)
        sent.append(request.headers["Authorization"][-4:])
        now = clock()
        # The other call's 429 was recorded while this request was at Tavily.
        router.store.update(now, lambda s: s.hold(router.keys[0].fingerprint, now + 3))
        return httpx.Response(429, headers={"Retry-After": "3"})

    router = Router(
        KEYS[:2],
        state=state_file,
        clock=clock,
        sleep=waits.append,
        on_429="retry",
        transport=httpx.MockTransport(handler),
    )
    with pytest.raises(RateLimited) as info:
        router.search("b")
    assert waits == [] and sent == ["0001"]
    assert info.value.retry_after == pytest.approx(3)


def test_429_retry_policy_succeeds_after_one_retry(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, on_429="retry")
    upstream.search(K1, 429, headers={"Retry-After": "1"})
    upstream.search(K1, 200)
    assert router.search("q")["searchfuse"]["key"] == "tvly-dev-…0001"
    assert key_state(state_file, K1)["cooldown_until"] is None


def test_429_failover_policy_moves_to_next_key(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, on_429="failover")
    upstream.search(K1, 429, headers={"Retry-After": "20"})
    upstream.search(K2, 200)
    assert router.search("q")["searchfuse"]["key"] == "tvly-dev-…0002"
    assert upstream.searches() == [K1, K2]
    assert key_state(state_file, K1)["cooldown_until"] == pytest.approx(clock() + 20)


def test_burst_of_429s_under_default_policy_reaches_exactly_one_key(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    """Incident 1: 30 parallel searches, every key would answer 429."""
    router = make(clock, state_file, keys=KEYS)
    # Only K1 is scripted: a request to any other key would fail the test.
    upstream.search(K1, 429, headers={"Retry-After": "60"}, reusable=True)
    outcomes: list[str] = []

    def one() -> None:
        try:
            router.search("q")
        except (RateLimited, CooldownActive) as exc:
            outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=one) for _ in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == 30
    assert set(upstream.searches()) == {K1}
    assert [s.key for s in router.status() if s.state == "cooling"] == ["tvly-dev-…0001"]
    # Later calls in the same cooldown are refused locally, with the time left.
    clock.advance(20)
    before = len(upstream.requests())
    with pytest.raises(CooldownActive) as info:
        router.search("q")
    assert info.value.retry_after == pytest.approx(40)
    assert len(upstream.requests()) == before
    # Once it has passed, the healthy keys serve again.
    clock.advance(41)
    upstream.search(K2, 200)
    assert router.search("q")["searchfuse"]["served_by"] == "tavily"


def test_429_stop_keeps_every_other_key_out_of_the_cascade(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    """Incident 1: a 429 on one key must not walk through the others."""
    router = make(clock, state_file, keys=KEYS)
    for key in KEYS:
        upstream.search(key, 429, headers={"Retry-After": "60"}, reusable=True)
    with pytest.raises(RateLimited):
        router.search("q")
    assert upstream.searches() == [K1]
    cooling = [s for s in router.status() if s.state == "cooling"]
    assert [s.key for s in cooling] == ["tvly-dev-…0001"]


# -- 432 / 433 --------------------------------------------------------------------------


@pytest.mark.parametrize("status", [432, 433])
def test_quota_errors_mark_key_exhausted_and_fail_over(
    status: int, upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file)
    upstream.search(K1, status)
    upstream.search(K2, 200)
    assert router.search("q")["searchfuse"]["key"] == "tvly-dev-…0002"
    ks = key_state(state_file, K1)
    assert ks["exhausted"] is True
    assert ks["cooldown_until"] is None  # a soft skip, not a cooldown
    assert ks["disabled"] is False
    assert router.status()[0].state == "exhausted"


def test_exhausted_key_returns_when_usage_shows_headroom(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, keys=[K1])
    upstream.usage_json = usage_body(usage=999, limit=1000)
    upstream.search(K1, 432)
    with pytest.raises(NoKeyAvailable) as info:
        router.search("q", search_depth="advanced")
    assert info.value.diagnosis is not None
    assert info.value.diagnosis.verdict == "exhausted"
    clock.advance(3600)
    upstream.usage_json = usage_body(usage=10, limit=1000)
    (probe,) = router.test_keys()
    assert probe.ok
    assert router.status()[0].state == "available"


def test_new_month_clears_exhausted(upstream: Upstream, state_file: Path) -> None:
    clock = FakeClock(start=1_764_543_600.0)  # 2025-11-30T23:00Z, an hour before December
    router = make(clock, state_file, keys=[K1])
    upstream.usage_json = usage_body(usage=999, limit=1000)
    upstream.search(K1, 432)
    with pytest.raises(NoKeyAvailable) as info:
        router.search("q")
    assert info.value.diagnosis is not None
    assert "2025-12-01T00:00:00Z" in info.value.diagnosis.advice
    assert read_state(state_file)["month"] == "2025-11"
    clock.advance(7200)  # into December
    assert router.status()[0].state == "available"
    upstream.search(K1, 200)
    router.search("q")
    assert read_state(state_file)["month"] == "2025-12"


# -- 5xx, timeout, connection error ------------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    [500, 502, 503, httpx.ReadTimeout("timed out"), httpx.ConnectError("refused")],
    ids=["500", "502", "503", "timeout", "connect"],
)
def test_upstream_failure_cools_key_and_fails_over(
    failure: int | Exception, upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, cooldown_minutes=2.0)
    if isinstance(failure, int):
        upstream.search(K1, failure)
    else:
        upstream.fail(K1, failure)
    upstream.search(K2, 200)
    assert router.search("q")["searchfuse"]["key"] == "tvly-dev-…0002"
    ks = key_state(state_file, K1)
    assert ks["cooldown_reason"] == "upstream"
    assert ks["cooldown_until"] == pytest.approx(clock() + 120)


def test_all_keys_failing_upstream_raises_no_key_with_reasons(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file)
    upstream.search(K1, 503)
    upstream.search(K2, 502)
    with pytest.raises(NoKeyAvailable) as info:
        router.search("q")
    exc = info.value
    assert set(exc.reasons) == {"tvly-dev-…0001", "tvly-dev-…0002"}
    assert exc.retry_after == pytest.approx(60)
    assert exc.diagnosis is not None and exc.diagnosis.verdict == "upstream"


def test_200_with_garbage_body_is_an_upstream_failure(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file)
    upstream.search(K1, 200, json_body=["not", "an", "object"])
    with pytest.raises(SearchFailed):
        router.search("q")
    assert key_state(state_file, K1)["cooldown_reason"] == "upstream"


# -- state is a cache ---------------------------------------------------------------------


def test_expired_cooldowns_serve_without_any_command(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, keys=KEYS, max_keys_per_call=len(KEYS))
    for key in KEYS:
        upstream.search(key, 503)
    with pytest.raises(NoKeyAvailable):
        router.search("q")
    assert all(s.state == "cooling" for s in router.status())
    clock.advance(28 * 60)  # incident 2: 28 minutes later
    fresh = make(clock, state_file, keys=KEYS)  # a new process reading the same file
    for key in KEYS:
        upstream.search(key, 200)
    assert fresh.search("q")["searchfuse"]["served_by"] == "tavily"
    assert all(s.state == "available" for s in fresh.status())


def test_search_over_four_keys_makes_at_most_one_usage_request_for_the_key_it_used(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, keys=KEYS)
    upstream.search(K1, 200)
    router.search("q")
    requests = upstream.requests()
    usage = [key for path, key in requests if path == "/usage"]
    assert len(usage) <= 1
    assert usage == [key for path, key in requests if path == "/search"]


def test_usage_is_not_asked_again_while_figures_are_fresh(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, keys=[K1])
    upstream.search(K1, 200, reusable=True)
    for _ in range(20):
        router.search("q")
        clock.advance(5)
    usage = [key for path, key in upstream.requests() if path == "/usage"]
    assert usage == [K1]
    status = router.status()[0]
    assert status.local_credits == 20
    assert status.remaining == 1000 - 10 - 20


def test_usage_calls_never_exceed_tavily_limit(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, keys=[K1], sync_interval=0.0)
    upstream.search(K1, 200, reusable=True)
    for _ in range(30):
        router.search("q")
        clock.advance(1)
    usage = [key for path, key in upstream.requests() if path == "/usage"]
    assert len(usage) == 10  # 10 per 10 minutes, however stale the figures


def test_usage_429_does_not_cool_the_key_for_searches(
    httpx_mock: object, clock: FakeClock, state_file: Path
) -> None:
    mock = httpx_mock
    mock.add_response(  # type: ignore[attr-defined]
        url="https://api.tavily.com/usage", status_code=429, headers={"Retry-After": "600"}
    )
    mock.add_response(  # type: ignore[attr-defined]
        method="POST",
        url="https://api.tavily.com/search",
        json={"results": [], "usage": {"credits": 1}},
    )
    router = make(clock, state_file, keys=[K1])
    assert router.search("q")["searchfuse"]["key"] == "tvly-dev-…0001"
    assert key_state(state_file, K1)["cooldown_until"] is None


def test_selection_prefers_most_remaining_quota(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, keys=[K1, K2])
    upstream.usage_json = usage_body(usage=900, limit=1000, plan_usage=0, plan_limit=100000)
    upstream.search(K1, 200)
    router.search("q")  # syncs K1: 100 left
    clock.advance(5)
    upstream.usage_json = usage_body(usage=100, limit=1000, plan_usage=0, plan_limit=100000)
    upstream.search(K2, 200)
    router.search("q")  # K2 is unknown (counts as unlimited), syncs it: 900 left
    upstream.search(K2, 200, reusable=True)
    for _ in range(3):
        clock.advance(5)  # separate turns: no burst stickiness
        router.search("q")
    assert upstream.searches() == [K1, K2, K2, K2, K2]


def test_keys_of_one_account_share_its_plan(
    clock: FakeClock, state_file: Path, upstream: Upstream
) -> None:
    from searchfuse.router import KeyEntry

    keys = [
        KeyEntry(K1, "a@example.com"),
        KeyEntry(K2, "a@example.com"),
        KeyEntry(K3, "b@example.com"),
    ]
    router = Router(keys, state=state_file, clock=clock)
    upstream.usage_json = usage_body(usage=5, limit=None, plan_usage=1000, plan_limit=1000)
    upstream.search(K1, 200)
    upstream.search(K3, 200)
    result = router.search("q")
    # K1's /usage says account a's plan is spent: K2 (same account) is skipped too.
    assert result["searchfuse"]["key"] == "tvly-dev-…0003"
    states = {s.key: s.state for s in router.status()}
    assert states["tvly-dev-…0002"] == "exhausted"


# -- async twin -----------------------------------------------------------------------------


async def test_asearch_follows_the_same_table(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, keys=KEYS[:3])
    upstream.search(K1, 401)
    upstream.search(K2, 503)
    upstream.search(K3, 200)
    result = await router.asearch("q")
    assert result["searchfuse"]["key"] == "tvly-dev-…0003"
    assert upstream.searches() == [K1, K2, K3]
    upstream.search(K3, 429, headers={"Retry-After": "9"})
    with pytest.raises(RateLimited) as info:
        await router.asearch("q")
    assert info.value.retry_after == 9
    await router.aclose()


async def test_asearch_concurrent_calls_all_recorded(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file, keys=[K1])
    upstream.search(K1, 200, reusable=True)
    await asyncio.gather(*(router.asearch(f"q{i}") for i in range(8)))
    assert key_state(state_file, K1)["searches"] == 8
    await router.aclose()


# -- call(): a function that brings its own HTTP ------------------------------------------


class Status(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"status {status_code}")
        self.status_code = status_code


def test_call_moves_to_next_key_after_a_401_from_the_function(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    seen: list[str] = []

    def fn(key: str) -> str:
        seen.append(key)
        if key == K1:
            raise Status(401)
        return "ok"

    router = make(clock, state_file)
    assert router.call(fn) == "ok"
    assert seen == [K1, K2]
    assert key_state(state_file, K1)["cooldown_reason"] == "auth"
    assert upstream.searches() == []  # the function brought its own HTTP


async def test_acall_reports_429_from_the_function(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    async def fn(key: str) -> str:
        request = httpx.Request("POST", "https://api.tavily.com/search")
        response = httpx.Response(429, headers={"Retry-After": "12"}, request=request)
        raise httpx.HTTPStatusError("429", request=request, response=response)

    router = make(clock, state_file)
    with pytest.raises(RateLimited) as info:
        await router.acall(fn)
    assert info.value.retry_after == 12
    assert key_state(state_file, K1)["cooldown_until"] == pytest.approx(clock() + 12)


def test_call_reraises_unknown_exceptions_without_penalty(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = make(clock, state_file)

    def fn(key: str) -> str:
        raise ValueError("a bug in the tool")

    with pytest.raises(ValueError, match="a bug"):
        router.call(fn)
    assert router.status()[0].state == "available"
