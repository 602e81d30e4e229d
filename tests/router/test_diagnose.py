"""The diagnosis: verification order, verdicts, burst detection, probe, named degradation."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from searchfuse import NoKeyAvailable, RateLimited, Router
from searchfuse.router import KeyEntry
from searchfuse.router.state import JsonFileStore, KeyUsage, State
from searchfuse.testing import FakeClock

from ..scripted import KEYS, Upstream, usage_body

ORDER = ["state", "cooldown", "quota", "probe", "verdict"]


def seed(path: Path, clock: FakeClock, change: Callable[[State, list[str]], None]) -> None:
    """Write a state file the way an earlier run would have left it."""
    fps = [Router([k]).keys[0].fingerprint for k in KEYS]
    JsonFileStore(path).update(clock(), lambda state: change(state, fps))


def usage(state: State, fp: str, used: float, limit: float = 1000.0) -> None:
    ks = state.key(fp)
    ks.last_usage = KeyUsage(key_usage=used, key_limit=limit, search_usage=used)
    ks.last_sync_at = state_now(state)


def state_now(state: State) -> float:
    return 1_768_478_400.0 - 120


def test_all_cooldowns_expired_is_stale_not_dead(clock: FakeClock, state_file: Path) -> None:
    def change(state: State, fps: list[str]) -> None:
        for fp in fps:
            ks = state.key(fp)
            ks.cooldown_until = clock() - 28 * 60  # incident 2
            ks.cooldown_started = clock() - 29 * 60
            ks.cooldown_reason = "rate_limited"
            usage(state, fp, 37)

    seed(state_file, clock, change)
    d = Router(KEYS, state=state_file, clock=clock).diagnose()
    assert [s.name for s in d.steps] == ORDER
    assert d.verdict == "stale"
    assert "4 expired" in d.step("cooldown").finding
    assert "No reset needed" in d.advice
    assert d.to_dict()["verdict"] == "stale"
    assert [s["name"] for s in d.to_dict()["steps"]] == ORDER


def test_keys_cooling_for_different_reasons(clock: FakeClock, state_file: Path) -> None:
    reasons = [("auth", 3000), ("rate_limited", 45), ("upstream", 50), ("rate_limited", 400)]

    def change(state: State, fps: list[str]) -> None:
        for i, (fp, (why, left)) in enumerate(zip(fps, reasons, strict=True)):
            ks = state.key(fp)
            ks.cooldown_reason = why
            ks.cooldown_until = clock() + left
            ks.cooldown_started = clock() - 600 * i  # far apart: no burst

    seed(state_file, clock, change)
    d = Router(KEYS, state=state_file, clock=clock).diagnose()
    assert d.verdict == "cooling"
    assert not d.burst
    assert d.retry_after == pytest.approx(45)
    assert "45 s" in d.advice
    notes = [ev["note"] for ev in d.step("cooldown").evidence]
    assert any("(auth)" in n for n in notes) and any("(upstream)" in n for n in notes)


def test_burst_cascade_four_keys_within_two_seconds(clock: FakeClock, state_file: Path) -> None:
    def change(state: State, fps: list[str]) -> None:
        for i, fp in enumerate(fps):
            ks = state.key(fp)
            ks.cooldown_reason = "rate_limited"
            ks.cooldown_started = clock() - 10 + i * 0.6  # 4 keys within 1.8 s
            ks.cooldown_until = ks.cooldown_started + 60
            ks.last_error = "429: Too many requests"

    seed(state_file, clock, change)
    router = Router(KEYS, state=state_file, clock=clock)
    d = router.diagnose()
    assert d.verdict == "burst"
    assert d.burst is True
    assert "parallel" in d.advice and "one search per reply" in d.advice
    assert "burst cascade: 4 keys" in d.step("cooldown").finding
    with pytest.raises(NoKeyAvailable) as info:
        router.search("q")
    assert info.value.diagnosis is not None and info.value.diagnosis.verdict == "burst"


def test_quota_at_37_percent_is_not_exhausted(clock: FakeClock, state_file: Path) -> None:
    def change(state: State, fps: list[str]) -> None:
        for fp in fps:
            usage(state, fp, 370)
            state.key(fp).exhausted = True  # a stale flag

    seed(state_file, clock, change)
    d = Router(KEYS, state=state_file, clock=clock).diagnose()
    assert d.verdict != "exhausted"
    assert d.verdict == "stale"
    notes = [ev["note"] for ev in d.step("quota").evidence]
    assert all("37% used: not exhausted" in n for n in notes)
    assert "--probe" in d.advice


def test_quota_at_100_percent_until_month_rolls(clock: FakeClock, state_file: Path) -> None:
    def change(state: State, fps: list[str]) -> None:
        for fp in fps:
            usage(state, fp, 1000)
            state.key(fp).exhausted = True

    seed(state_file, clock, change)
    d = Router(KEYS, state=state_file, clock=clock).diagnose()
    assert d.verdict == "exhausted"
    assert "2026-02-01T00:00:00Z" in d.advice  # the clock is in January 2026
    assert "4 of 4 key(s) exhausted" in d.step("quota").finding


def test_auth_failures(clock: FakeClock, state_file: Path) -> None:
    def change(state: State, fps: list[str]) -> None:
        for i, fp in enumerate(fps):
            ks = state.key(fp)
            ks.cooldown_reason = "auth"
            ks.cooldown_until = clock() + 3000 + i
            ks.cooldown_started = clock() - 600
            ks.last_error = "401: Unauthorized: missing or invalid API key."

    seed(state_file, clock, change)
    d = Router(KEYS, state=state_file, clock=clock).diagnose()
    assert d.verdict == "auth"
    assert "401/403" in d.advice


def test_healthy(clock: FakeClock, state_file: Path) -> None:
    d = Router(KEYS, state=state_file, clock=clock).diagnose()
    assert d.verdict == "healthy"
    assert d.step("probe").finding.startswith("skipped")
    assert "--probe" in d.step("probe").finding


def test_probe_refreshes_stale_state_one_usage_request_per_key_never_concurrent(
    httpx_mock: Any, clock: FakeClock, state_file: Path
) -> None:
    in_flight = 0
    peak = 0
    lock = threading.Lock()
    seen: list[tuple[str, str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        seen.append((request.method, request.url.path))
        with lock:
            in_flight -= 1
        return httpx.Response(200, json=usage_body(usage=10, limit=1000))

    httpx_mock.add_callback(answer, is_reusable=True)

    def change(state: State, fps: list[str]) -> None:
        for i, fp in enumerate(fps):
            ks = state.key(fp)
            if i % 2:
                ks.exhausted = True
            else:
                ks.cooldown_reason = "auth"
                ks.cooldown_until = clock() + 3000
                ks.cooldown_started = clock() - 600 - i * 100

    seed(state_file, clock, change)
    router = Router(KEYS, state=state_file, clock=clock)
    d = router.diagnose(probe=True)
    assert seen == [("GET", "/usage")] * 4  # only /usage, one per key, no search
    assert peak == 1
    assert d.verdict == "stale"
    assert "refreshed" in d.advice
    assert all(s.state == "available" for s in router.status())
    assert "200 for 4 of 4" in d.step("probe").finding


async def test_async_probe_is_also_sequential(
    httpx_mock: Any, clock: FakeClock, state_file: Path
) -> None:
    httpx_mock.add_response(url="https://api.tavily.com/usage", json=usage_body(), is_reusable=True)
    d = await Router(KEYS, state=state_file, clock=clock).adiagnose(probe=True)
    assert len(httpx_mock.get_requests()) == 4
    assert d.verdict == "healthy"


def test_no_key_available_message_is_short_and_keyless(clock: FakeClock, state_file: Path) -> None:
    def change(state: State, fps: list[str]) -> None:
        for fp in fps:
            ks = state.key(fp)
            ks.cooldown_reason = "upstream"
            ks.cooldown_until = clock() + 30
            ks.cooldown_started = clock() - 30

    seed(state_file, clock, change)
    with pytest.raises(NoKeyAvailable) as info:
        Router(KEYS, state=state_file, clock=clock).search("q")
    message = info.value.message
    assert len(message.splitlines()) <= 8
    assert len(message) < 1500
    assert not any(key in message for key in KEYS)
    assert info.value.retry_after == pytest.approx(30)


# -- named degradation -----------------------------------------------------------------


def fallback_search(query: str, **params: object) -> dict[str, object]:
    return {"query": query, "results": [{"title": "from the fallback", "url": "local:"}]}


def test_warning_once_names_missing_variable_and_fallback(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TAVILY_API_KEYS", "TAVILY_API_KEY", "TAVILY_API_KEY_2"):
        monkeypatch.delenv(name, raising=False)
    with caplog.at_level(logging.WARNING, logger="searchfuse"):
        router = Router.from_env({}, fallback=fallback_search)
        router.search("one")
        router.search("two")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "TAVILY_API_KEYS" in warnings[0]
    assert "fallback_search" in warnings[0]


def test_warning_names_missing_config_file(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    with caplog.at_level(logging.WARNING, logger="searchfuse"):
        Router.from_config(tmp_path / "config" / "keys.json", fallback=fallback_search)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "keys.json" in warning and "file not found" in warning
    assert "fallback_search" in warning


def test_warning_when_every_key_is_exhausted(
    caplog: pytest.LogCaptureFixture, clock: FakeClock, state_file: Path
) -> None:
    def change(state: State, fps: list[str]) -> None:
        for fp in fps:
            state.key(fp).exhausted = True

    seed(state_file, clock, change)
    with caplog.at_level(logging.WARNING, logger="searchfuse"):
        router = Router(KEYS, state=state_file, clock=clock, fallback=fallback_search)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "exhausted" in warning and "fallback_search" in warning
    assert not any(key in warning for key in KEYS)
    result = router.search("q")
    assert result["searchfuse"] == {
        "served_by": "fallback",
        "fallback": "fallback_search",
        "reason": "exhausted",
        "degraded": None,
    }


def test_no_warning_for_a_healthy_router(
    caplog: pytest.LogCaptureFixture, clock: FakeClock
) -> None:
    with caplog.at_level(logging.WARNING, logger="searchfuse"):
        Router(KEYS, clock=clock, fallback=fallback_search)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_fallback_serves_on_auth_and_upstream_but_never_on_429(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = Router(KEYS[:2], state=state_file, clock=clock, fallback=fallback_search)
    upstream.search(KEYS[0], 401)
    upstream.search(KEYS[1], 503)
    result = router.search("q")
    assert result["searchfuse"]["served_by"] == "fallback"
    assert result["searchfuse"]["reason"] in ("auth", "upstream", "cooling")
    assert result["results"][0]["title"] == "from the fallback"

    other = Router(KEYS[2:], state=state_file, clock=clock, fallback=fallback_search)
    upstream.search(KEYS[2], 429, headers={"Retry-After": "30"})
    with pytest.raises(RateLimited):
        other.search("q")
    # The hold that follows is not a reason to fall back either.
    with pytest.raises(Exception) as info:
        other.search("q")
    assert type(info.value).__name__ == "CooldownActive"


async def test_async_fallback(upstream: Upstream, clock: FakeClock, state_file: Path) -> None:
    async def afallback(query: str, **params: object) -> dict[str, object]:
        return {"query": query, "results": []}

    router = Router([KeyEntry(KEYS[0])], state=state_file, clock=clock, fallback=afallback)
    upstream.search(KEYS[0], 432)
    result = await router.asearch("q")
    assert result["searchfuse"]["served_by"] == "fallback"


def test_a_quota_refusal_newer_than_the_figures_is_not_called_stale_and_a_probe_reads_them(
    tmp_path: Path,
) -> None:
    from searchfuse import SearchRefused
    from searchfuse.testing import FakeTavily

    clock = FakeClock()
    key = "tvly-dev-test0001"
    fake = FakeTavily([key], clock=clock)
    router = Router([key], state=tmp_path / "s.db", transport=fake.transport(), clock=clock)
    router.search("first")  # figures synced now: 1 of 1,000 used
    fake.set_usage(key, plan_usage=fake.account_of(key).plan_limit)  # spent elsewhere
    clock.advance(60)
    with pytest.raises(SearchRefused):
        router.search("second")  # 432: the plan is spent; flagged exhausted
    (note,) = [ev["note"] for ev in router.diagnose().step("quota").evidence]
    assert "not exhausted" in note and "the figures are the stale ones" in note
    assert "the exhausted flag contradicts the figures" not in note
    probed = router.diagnose(probe=True)
    assert [ev["quota"] for ev in probed.step("quota").evidence] == ["exhausted"]
    assert "1 of 1 key(s) exhausted by their figures" in probed.step("quota").finding
    router.close()


def test_an_expired_cooldown_on_a_key_blocked_otherwise_is_not_called_available(
    clock: FakeClock, state_file: Path
) -> None:
    def change(state: State, fps: list[str]) -> None:
        state.key(fps[0]).park(clock() - 600, 30.0, "rate_limited")
        state.key(fps[0]).exhausted = True  # since then, a 432
        state.key(fps[1]).park(clock() - 600, 30.0, "rate_limited")
        state.key(fps[2]).park(clock() - 600, 30.0, "rate_limited")
        state.key(fps[2]).disabled = True

    seed(state_file, clock, change)
    d = Router(KEYS, state=state_file, clock=clock).diagnose()
    notes = [ev["note"] for ev in d.step("cooldown").evidence]
    assert notes[0].endswith("stale entry, the key is exhausted for another reason")
    assert notes[1].endswith("stale entry, the key is available")
    assert notes[2].endswith("stale entry, the key is disabled for another reason")


def test_a_burst_on_keys_that_are_also_spent_promises_no_key_back_after_the_cooldown(
    clock: FakeClock, state_file: Path
) -> None:
    def change(state: State, fps: list[str]) -> None:
        for i, fp in enumerate(fps):
            state.key(fp).park(clock() - 2 + i * 0.2, 30.0, "rate_limited")
            state.key(fp).exhausted = True  # a 432 came too

    seed(state_file, clock, change)
    d = Router(KEYS, state=state_file, clock=clock).diagnose()
    assert "available again in" not in d.advice
    assert d.retry_after is None
