"""The chain's rules over real HTTP on loopback: what reached which provider, what the
caller was told, and what was logged.

Tavily heads the chain and Exa follows, each answered by its own simulator
(`FakeTavily`, `FakeExa`) on a loopback port.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from searchfuse import CooldownActive, RateLimited, Router, Throttled, TurnLimitReached
from searchfuse.errors import Unsupported
from searchfuse.testing import FakeClock, FakeExa, FakeTavily

TAVILY_KEY = "tvly-dev-test0001"
EXA_KEY = "0a1b2c3d-0000-4000-8000-00000000e5a1"


@pytest.fixture
def servers(fake_clock: FakeClock) -> Iterator[tuple[FakeTavily, str, FakeExa, str]]:
    first = FakeTavily(keys=[TAVILY_KEY], clock=fake_clock)
    second = FakeExa(keys=[EXA_KEY], clock=fake_clock)
    with first.serve() as first_url, second.serve() as second_url:
        yield first, first_url, second, second_url


def chain(servers: Any, clock: FakeClock, state: Path | None = None, **kw: Any) -> Router:
    _, first_url, _, second_url = servers
    return Router(
        {"tavily": [TAVILY_KEY], "exa": [EXA_KEY]},
        base_url=first_url,
        base_urls={"exa": second_url},
        clock=clock,
        sleep=clock.advance,
        state=state,
        **kw,
    )


def search(router: Router, mode: str, query: str = "q") -> dict[str, Any]:
    if mode == "sync":
        return router.search(query)
    return asyncio.run(router.asearch(query))


MODES = pytest.mark.parametrize("mode", ["sync", "async"])


def _moves(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if "passed over" in r.getMessage() or "serves again" in r.getMessage()
    ]


@MODES
def test_default_stop_never_moves_down_on_a_rate_limit(
    servers: Any, fake_clock: FakeClock, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    first, _, second, _ = servers
    router = chain(servers, fake_clock)
    first.fail_next(429, retry_after=30, path="/search")
    with pytest.raises(RateLimited) as raised:
        search(router, mode)
    assert raised.value.retry_after == 30
    # Later calls during the hold are refused without a request anywhere.
    with pytest.raises(CooldownActive):
        search(router, mode)
    assert [r.status for r in first.searches] == [429]
    assert second.searches == []
    assert _moves(caplog) == []
    fake_clock.advance(31)
    assert search(router, mode)["searchfuse"]["served_by"] == "tavily"
    assert second.searches == []


@MODES
def test_retry_spends_its_retries_then_the_next_provider_serves(
    servers: Any, fake_clock: FakeClock, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    first, _, second, _ = servers
    router = chain(servers, fake_clock, on_429="retry")
    first.fail_next(429, times=3, retry_after=1, path="/search")
    caplog.set_level(logging.INFO, "searchfuse")
    result = search(router, mode)
    assert [r.status for r in first.searches] == [429, 429, 429]  # the try and two retries
    assert [r.status for r in second.searches] == [200]
    assert result["searchfuse"]["served_by"] == "exa"
    assert result["searchfuse"]["degraded"] == {
        "from": "tavily",
        "reason": "cooling",
        "serving": "exa",
    }
    # While Tavily's hold runs, Exa goes on serving; Tavily hears nothing.
    assert search(router, mode)["searchfuse"]["served_by"] == "exa"
    assert len(first.searches) == 3
    (warning,) = _moves(caplog)
    assert warning[0] == logging.WARNING
    assert "Tavily is passed over (cooling" in warning[1] and "Exa serves instead" in warning[1]
    fake_clock.advance(120)
    back = search(router, mode)
    assert back["searchfuse"]["served_by"] == "tavily" and back["searchfuse"]["degraded"] is None
    assert _moves(caplog)[1:] == [(logging.INFO, "Tavily serves again")]


@MODES
def test_a_lasting_failure_is_named_once_over_a_hundred_searches(
    servers: Any, fake_clock: FakeClock, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    first, _, second, _ = servers
    router = chain(servers, fake_clock)
    first.revoke(TAVILY_KEY)
    caplog.set_level(logging.INFO, "searchfuse")

    async def many() -> list[dict[str, Any]]:
        return [await router.asearch(f"q{i}") for i in range(100)]

    results = (
        [router.search(f"q{i}") for i in range(100)] if mode == "sync" else asyncio.run(many())
    )
    assert len(second.searches) == 100
    # The free probe found the key rejected: no search was ever sent with it.
    assert first.searches == [] and [r.status for r in first.requests] == [401]
    assert all(
        r["searchfuse"]["degraded"] == {"from": "tavily", "reason": "auth", "serving": "exa"}
        for r in results
    )
    moves = _moves(caplog)
    assert len(moves) == 1 and moves[0][0] == logging.WARNING
    assert "Tavily is passed over (auth" in moves[0][1]
    text = caplog.text + repr(results)
    assert TAVILY_KEY not in text and EXA_KEY not in text


@MODES
def test_overflow_lets_a_busy_provider_spill_over(
    servers: Any, fake_clock: FakeClock, mode: str, tmp_path: Path
) -> None:
    first, first_url, second, second_url = servers
    keys = {"tavily": [{"key": TAVILY_KEY, "rate": "2/min"}], "exa": [EXA_KEY]}
    common: dict[str, Any] = {
        "base_url": first_url,
        "base_urls": {"exa": second_url},
        "clock": fake_clock,
        "sleep": fake_clock.advance,
        "max_wait": 0.0,
        "state": tmp_path / "state" / "searchfuse.db",
    }
    busy = Router(keys, **common)
    served = [search(busy, mode)["searchfuse"]["served_by"] for _ in range(2)]
    assert served == ["tavily", "tavily"]
    # Busy is not broken: without overflow the third call is paced, nothing is sent.
    with pytest.raises(Throttled):
        search(busy, mode)
    assert second.searches == []
    spill = Router(keys, overflow=True, **common)  # same clock: Tavily's window is still full
    result = search(spill, mode)
    assert result["searchfuse"]["served_by"] == "exa"
    assert result["searchfuse"]["degraded"]["reason"] == "overflow"
    assert len(first.searches) == 2 and len(second.searches) == 1


def test_a_router_alone_says_it_is_not_degraded(servers: Any, fake_clock: FakeClock) -> None:
    _, url, _, _ = servers
    router = Router([TAVILY_KEY], base_url=url, clock=fake_clock)
    assert router.search("q")["searchfuse"] == {
        "served_by": "tavily",
        "key": "tvly-dev-…0001",
        "degraded": None,
    }


WORKER = textwrap.dedent(
    """
    import json, sys
    from searchfuse import Router, SearchRefused

    first, second, state, on_429 = sys.argv[1:5]
    router = Router({{"tavily": [{tavily!r}], "exa": [{exa!r}]}}, base_url=first,
                    base_urls={{"exa": second}}, state=state, on_429=on_429)
    try:
        print(json.dumps(router.search("q")["searchfuse"]))
    except SearchRefused as exc:
        print(json.dumps({{"refused": exc.reason}}))
    """
).format(tavily=TAVILY_KEY, exa=EXA_KEY)


@pytest.mark.parametrize(("on_429", "then"), [("stop", "refused"), ("retry", "exa")])
def test_two_processes_sharing_sqlite_follow_the_rule_on_429(
    tmp_path: Path, on_429: str, then: str
) -> None:
    """One process meets the 429; another process, later, obeys the same rule."""
    first = FakeTavily(keys=[TAVILY_KEY], clock=time.time)
    second = FakeExa(keys=[EXA_KEY], clock=time.time)
    state = str(tmp_path / "state" / "searchfuse.db")
    with first.serve() as first_url, second.serve() as second_url:
        # 60 s is more than a call may wait: "retry" has nothing to spend, the limit is real.
        first.fail_next(429, retry_after=60, path="/search")

        def run() -> str:
            proc = subprocess.run(
                [sys.executable, "-c", WORKER, first_url, second_url, state, on_429],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert proc.returncode == 0, proc.stderr
            assert TAVILY_KEY not in proc.stdout + proc.stderr
            assert EXA_KEY not in proc.stdout + proc.stderr
            return proc.stdout.strip().splitlines()[-1]

        one, two = run(), run()
    if then == "refused":
        assert one == '{"refused": "rate_limited"}' and '"refused"' in two
        assert second.searches == []
        assert len(first.searches) == 1  # the second process sent nothing
    else:
        assert '"served_by": "exa"' in one and '"served_by": "exa"' in two
        assert len(first.searches) == 1  # the hold kept the second process off Tavily
        assert len(second.searches) == 2


BRAVE_KEY = "BSAtest0000000000000000000000b1"


@MODES
def test_a_parameter_a_provider_cannot_honour_passes_it_over_for_that_call(
    servers: Any, fake_clock: FakeClock, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    first, url, _, _ = servers
    # Nothing may reach Brave: its address is a closed loopback port.
    keys = {"brave": [BRAVE_KEY], "tavily": [TAVILY_KEY]}
    router = Router(keys, base_url=url, base_urls={"brave": "http://127.0.0.1:9"}, clock=fake_clock)
    kw: dict[str, Any] = {"topic": "news"}
    result = router.search("q", **kw) if mode == "sync" else asyncio.run(router.asearch("q", **kw))
    assert result["searchfuse"]["served_by"] == "tavily"
    assert result["searchfuse"]["degraded"] == {
        "from": "brave",
        "reason": "unsupported",
        "serving": "tavily",
    }
    assert [r.body.get("topic") for r in first.searches] == ["news"]
    assert _moves(caplog) == []  # a per-call skip, not a provider going down
    alone = Router({"brave": [BRAVE_KEY]}, base_urls={"brave": "http://127.0.0.1:9"})
    with pytest.raises(Unsupported) as raised:
        alone.search("q", topic="news")
    assert raised.value.provider == "brave" or "brave" in str(raised.value).lower()


def test_status_test_keys_and_diagnosis_speak_per_provider(
    servers: Any, fake_clock: FakeClock
) -> None:
    """Exa has no free probe: test_keys says so and sends nothing, unless told to spend."""
    tavily, _, exa, _ = servers
    router = chain(servers, fake_clock)
    assert [(s.provider, s.key) for s in router.status()] == [
        ("tavily", "tvly-dev-…0001"),
        ("exa", "…e5a1"),
    ]
    probed = {r.provider: r for r in router.test_keys()}
    assert probed["tavily"].ok and [r.path for r in tavily.requests] == ["/usage"]
    assert probed["exa"].note == "not probed: a probe costs a search"
    assert exa.requests == []
    spent = {r.provider: r for r in router.test_keys(spend=True)}
    assert spent["exa"].ok and len(exa.searches) == 1
    assert exa.searches[0].key_fingerprint == exa.fingerprint(EXA_KEY)
    tavily.revoke(TAVILY_KEY)
    fake_clock.advance(700)
    diagnosis = router.diagnose(probe=True)
    assert diagnosis.by_provider == {"tavily": "auth", "exa": "healthy"}
    assert diagnosis.verdict == "healthy"
    evidence = diagnosis.step("state").evidence
    assert {ev["provider"] for ev in evidence} == {"tavily", "exa"}
    text = str(diagnosis) + repr(diagnosis.to_dict())
    assert TAVILY_KEY not in text and EXA_KEY not in text


def test_the_guards_web_search_tool_is_served_over_the_chain(
    servers: Any, fake_clock: FakeClock
) -> None:
    """`web_tool`: provider-neutral parameters, the guard's rules, the whole chain."""
    from searchfuse import turn
    from searchfuse.guard import tavily_tool, web_tool

    first, _, second, _ = servers
    first.revoke(TAVILY_KEY)
    router = chain(servers, fake_clock)
    web_search = web_tool(router, on_refusal="return", clock=fake_clock)
    with turn(id="reply-1"):
        result = web_search("zig comptime", max_results=2, topic="news", time_range="week")
        refused = web_search("another search in the same reply")
    assert not isinstance(result, str)
    assert result["searchfuse"]["served_by"] == "exa" and len(result["results"]) == 2
    assert refused == TurnLimitReached(1).message
    (sent,) = second.searches
    assert sent.body is not None and sent.body["category"] == "news"
    assert "startPublishedDate" in sent.body
    assert web_search.__name__ == "web_search"
    assert tavily_tool(router).__name__ == "tavily_search"


def test_a_move_down_is_named_once_per_fleet_sharing_a_store(
    servers: Any, fake_clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two routers sharing SQLite (two processes of a fleet, each with its own memory of
    the chain): the move down is one WARNING, the move back one INFO, for both."""
    first = servers[0]
    state = tmp_path / "state" / "searchfuse.db"
    routers = [chain(servers, fake_clock, state=state) for _ in range(2)]
    caplog.set_level(logging.INFO, "searchfuse")
    first.fail_next(503, times=None, path="/search")
    for i in range(20):
        result = search(routers[i % 2], "sync", f"q{i}")
        assert result["searchfuse"]["served_by"] == "exa"
        assert result["searchfuse"]["degraded"]["from"] == "tavily"
    first.clear_faults()
    fake_clock.advance(3600)
    for i in range(4):
        assert search(routers[i % 2], "sync", f"back{i}")["searchfuse"]["served_by"] == "tavily"
    moves = _moves(caplog)
    assert [level for level, _ in moves] == [logging.WARNING, logging.INFO]
    kinds = [e.kind for e in routers[1].events(200) if e.kind in ("passed_over", "serves_again")]
    assert kinds == ["serves_again", "passed_over"]  # newest first, each once


def test_a_new_reason_while_passed_over_is_not_a_new_move(
    servers: Any, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    first = servers[0]
    router = chain(servers, fake_clock)
    caplog.set_level(logging.INFO, "searchfuse")
    first.fail_next(503, times=None, path="/search")
    assert search(router, "sync", "a")["searchfuse"]["served_by"] == "exa"
    first.clear_faults()
    first.revoke(TAVILY_KEY)
    fake_clock.advance(120)  # the breaker's pause is over; now the key is refused
    assert search(router, "sync", "b")["searchfuse"]["degraded"]["reason"] == "auth"
    assert [level for level, _ in _moves(caplog)] == [logging.WARNING]
