"""Month rollover resets usage, never a running cooldown or hold; clocks cannot ping-pong it."""

from __future__ import annotations

import calendar
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from searchfuse import CooldownActive, RateLimited, Router
from searchfuse.router.state import MemoryStore, RedisStore
from searchfuse.testing import FakeClock

from .rawserver import search_json, usage_json

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]
#: 2026-11-30T23:59:50Z: ten seconds before the month rolls.
LAST_SECONDS = float(calendar.timegm((2026, 11, 30, 23, 59, 50)))


def _store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    if kind == "memory":
        return MemoryStore()
    if kind == "redis":
        url = request.getfixturevalue("redis_url")
        return RedisStore(url, namespace=f"t{uuid.uuid4().hex[:12]}")
    return str(tmp_path / ("quota.json" if kind == "json" else "searchfuse.db"))


KINDS = ["memory", "json", "sqlite", "redis"]


def _router(
    state: Any,
    clock: FakeClock,
    statuses: dict[str, int],
    retry_after: str = "3600",
    **options: Any,
) -> Router:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/usage":
            return httpx.Response(200, json=usage_json())
        status = statuses.get(request.headers["authorization"].removeprefix("Bearer "), 200)
        if status == 200:
            return httpx.Response(200, json=search_json())
        return httpx.Response(status, headers={"Retry-After": retry_after}, json={"detail": {}})

    return Router(
        KEYS,
        state=state,
        clock=clock,
        pace=False,
        transport=httpx.MockTransport(handler),
        **options,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_hold_written_seconds_before_the_month_ends_survives_the_rollover(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    clock = FakeClock(LAST_SECONDS)
    state = _store(kind, tmp_path, request)
    router = _router(state, clock, {KEYS[0]: 429})
    with pytest.raises(RateLimited):
        router.search("q")
    for later in (15, 30 * 60, 50 * 60):  # inside the grace, and well into the new month
        clock.set(LAST_SECONDS + later)
        with pytest.raises(CooldownActive):
            _router(state, clock, {}).search("q")  # a fresh process sees the hold too
    clock.set(LAST_SECONDS + 3600 + 1)
    assert _router(state, clock, {}).search("q")["searchfuse"]["served_by"] == "tavily"


@pytest.mark.parametrize("kind", KINDS)
def test_the_rollover_resets_usage_but_keeps_a_running_auth_cooldown(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    clock = FakeClock(LAST_SECONDS - 600)
    state = _store(kind, tmp_path, request)
    router = _router(state, clock, {KEYS[0]: 401}, on_429="failover")
    router.search("q")  # K1 is parked for an hour, K2 serves
    router.search("q")
    before = {s.key: s for s in router.status()}
    assert before["tvly-dev-…0002"].searches == 2
    clock.set(LAST_SECONDS + 20 * 60)  # the new month, past the grace
    after = {s.key: s for s in _router(state, clock, {}).status()}
    assert after["tvly-dev-…0002"].searches == 0  # usage reset
    assert after["tvly-dev-…0002"].key_usage is None
    assert after["tvly-dev-…0001"].state == "cooling"  # the auth cooldown still runs
    assert after["tvly-dev-…0001"].cooldown_reason == "auth"


@pytest.mark.parametrize("kind", KINDS)
def test_processes_with_different_clocks_do_not_reset_each_other(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    state = _store(kind, tmp_path, request)
    right = FakeClock(LAST_SECONDS - 600)
    right_router = _router(state, right, {})
    for _ in range(3):
        right_router.search("q")

    def served() -> int:
        return sum(s.searches for s in right_router.status())

    assert served() == 3
    # A clock five minutes ahead sees December already: inside the grace, no reset.
    ahead = FakeClock(LAST_SECONDS - 600 + 300 + 600)
    _router(state, ahead, {}).search("q")
    assert served() == 4
    # A clock a day ahead rolls the month once...
    far = FakeClock(LAST_SECONDS + 86400)
    far_router = _router(state, far, {})
    far_router.search("q")
    assert sum(s.searches for s in far_router.status()) == 1
    # ...and the process with the right clock does not roll it back (no ping-pong).
    right_router.search("q")
    far_router.search("q")
    right_router.search("q")
    assert served() == 4


@pytest.mark.parametrize("kind", KINDS)
def test_a_hold_survives_a_rollover_made_by_a_process_whose_clock_runs_ahead(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    clock = FakeClock(LAST_SECONDS)
    state = _store(kind, tmp_path, request)
    router = _router(state, clock, {KEYS[0]: 429}, retry_after="60")
    with pytest.raises(RateLimited):
        router.search("q")  # the whole router is held until 00:00:50
    # A process whose clock runs 15 minutes ahead searches 5 s later: on its
    # clock the month turned 15 minutes ago and the hold is over.
    _router(state, FakeClock(LAST_SECONDS + 5 + 15 * 60), {}).search("q")
    clock.set(LAST_SECONDS + 15)
    with pytest.raises(CooldownActive):
        _router(state, clock, {}).search("q")  # still held on the right clock
    with pytest.raises(CooldownActive):
        router.search("q")


@pytest.mark.parametrize("kind", KINDS)
def test_processes_whose_clocks_are_a_month_apart_do_not_wipe_each_others_counters(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    state = _store(kind, tmp_path, request)
    right_now = float(calendar.timegm((2026, 1, 31, 12, 0, 0)))
    right = _router(state, FakeClock(right_now), {})
    ahead = _router(state, FakeClock(right_now + 31 * 86400), {})  # 2026-03-03

    def served() -> int:
        return sum(s.searches for s in right.status())

    for _ in range(2):
        right.search("q")
        ahead.search("q")
    settled = served()
    for i in range(6):
        (right if i % 2 == 0 else ahead).search("q")
        assert served() == settled + i + 1  # every search counted, none wiped
