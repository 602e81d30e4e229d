"""The diagnosis never calls a cooldown stale that /usage cannot speak for."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from searchfuse import NoKeyAvailable, RateLimited, Router
from searchfuse.testing import FakeClock

from .rawserver import usage_json

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]


def _router(search_status: int, clock: FakeClock, **options: Any) -> Router:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/usage":
            return httpx.Response(200, json=usage_json())
        return httpx.Response(search_status, headers={"Retry-After": "60"}, json={"detail": {}})

    return Router(KEYS[:1], clock=clock, transport=httpx.MockTransport(handler), **options)


def test_probe_does_not_call_a_rate_limit_cooldown_stale() -> None:
    clock = FakeClock()
    router = _router(429, clock)
    with pytest.raises(RateLimited):
        router.search("q")
    diagnosis = router.diagnose(probe=True)
    (evidence,) = diagnosis.step("probe").evidence
    assert evidence["ok"]
    assert "stale" not in evidence["note"]
    assert "rate_limited" in evidence["note"]
    assert diagnosis.verdict == "cooling"
    assert "stale" not in str(diagnosis)


def test_probe_does_not_call_an_upstream_cooldown_stale() -> None:
    clock = FakeClock()
    router = _router(503, clock)
    with pytest.raises(NoKeyAvailable):
        router.search("q")
    diagnosis = router.diagnose(probe=True)
    (evidence,) = diagnosis.step("probe").evidence
    assert "stale" not in evidence["note"] and "upstream" in evidence["note"]
    assert diagnosis.verdict == "upstream"


def test_probe_still_calls_a_refuted_auth_cooldown_stale() -> None:
    clock = FakeClock()
    router = _router(401, clock)
    with pytest.raises(NoKeyAvailable):
        router.search("q")
    diagnosis = router.diagnose(probe=True)
    (evidence,) = diagnosis.step("probe").evidence
    assert "stale, refreshed" in evidence["note"]
    assert diagnosis.verdict == "stale"


@pytest.mark.parametrize("kind", ["json", "sqlite"])
def test_a_leftover_disabled_flag_in_the_state_is_named_and_cleared_by_test_keys(
    kind: str, tmp_path: Any
) -> None:
    from searchfuse.router.config import KeyEntry

    state = str(tmp_path / ("quota.json" if kind == "json" else "searchfuse.db"))
    clock = FakeClock()
    router = _router(200, clock, state=state)
    fp = KeyEntry(KEYS[0]).fingerprint

    def leftover(s: Any) -> None:
        s.key(fp).disabled = True  # as a round-one state file could hold

    router.store.update(clock(), leftover)
    (record,) = router.status()
    assert record.state == "disabled"
    assert record.blocked_reason is not None and "leftover" in record.blocked_reason
    assert "config" not in record.blocked_reason
    (probe,) = router.test_keys()
    assert probe.ok
    (record,) = router.status()
    assert record.state == "available" and record.blocked_reason is None
