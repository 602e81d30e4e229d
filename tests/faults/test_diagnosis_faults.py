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
