"""Test helpers: a simulated Tavily API, a fake clock, and the switch for test mode.

- [`FakeTavily`][searchfuse.testing.FakeTavily] behaves like Tavily's `POST /search`,
  `/extract`, `/crawl`, `/map` and `GET /usage` (auth, validation, rate windows,
  credits, 429/432/433, `Retry-After`), takes injected faults, and records
  every request (keys as fingerprints).
  Serve it in-process ([`FakeTavily.transport`][searchfuse.testing.FakeTavily.transport],
  [`FakeTavily.mount`][searchfuse.testing.FakeTavily.mount] on pytest-httpx) or on loopback
  ([`FakeTavily.serve`][searchfuse.testing.FakeTavily.serve]).
- [`FakeClock`][searchfuse.testing.FakeClock] is time that only moves when told to.
- [`set_testing`][searchfuse.testing.set_testing] /
  [`testing_mode`][searchfuse.testing.testing_mode] make searchfuse read that clock and never really
  sleep, like `stamina.set_testing`.

With `pip install ".[testing]"`, pytest gets the fixtures
`fake_clock`, `fake_tavily`, `tavily_mock`, `tavily_server` and
`tavily_cascade` automatically (see `docs/testing.md`).

Example:
    ```python
    import httpx
    from searchfuse.testing import FakeClock, FakeTavily

    clock = FakeClock()
    fake = FakeTavily(keys=["tvly-dev-test0001"], clock=clock)
    fake.fail_next(429, retry_after=30)
    with httpx.Client(base_url="https://api.tavily.com", transport=fake.transport()) as client:
        headers = {"Authorization": "Bearer tvly-dev-test0001"}
        assert client.post("/search", json={"query": "q"}, headers=headers).status_code == 429
        assert client.post("/search", json={"query": "q"}, headers=headers).status_code == 200
    assert [r.status for r in fake.searches] == [429, 200]
    ```
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from searchfuse.testing._cascade import Cascade, CascadeResult
    from searchfuse.testing._clock import (
        DEFAULT_START,
        FakeClock,
        is_testing,
        set_testing,
        testing_mode,
    )
    from searchfuse.testing._fake import (
        CREDITS_PER_DEPTH,
        DEFAULT_PLAN,
        DEFAULT_PLAN_LIMIT,
        DEV_RPM,
        PROD_RPM,
        RATE_WINDOW,
        USAGE_REQUESTS_PER_WINDOW,
        USAGE_WINDOW,
        Account,
        FakeTavily,
        Fault,
        RecordedRequest,
    )

#: The made-up keys the `fake_tavily` fixture accepts. Never put a real key in a test.
TEST_KEYS: tuple[str, ...] = (
    "tvly-dev-test0001",
    "tvly-dev-test0002",
    "tvly-dev-test0003",
    "tvly-dev-test0004",
)

__all__ = [
    "CREDITS_PER_DEPTH",
    "DEFAULT_PLAN",
    "DEFAULT_PLAN_LIMIT",
    "DEFAULT_START",
    "DEV_RPM",
    "PROD_RPM",
    "RATE_WINDOW",
    "TAVILY_HOST",
    "TEST_KEYS",
    "USAGE_REQUESTS_PER_WINDOW",
    "USAGE_WINDOW",
    "Account",
    "Cascade",
    "CascadeResult",
    "FakeClock",
    "FakeTavily",
    "Fault",
    "RecordedRequest",
    "is_testing",
    "reset",
    "set_testing",
    "should_mock",
    "testing_mode",
]

#: The host `tavily_mock` answers for; every other host is left to the network.
TAVILY_HOST = "api.tavily.com"

# The pytest plugin imports this package in every test session of every project
# that installed searchfuse, whether or not a test uses it: the names load on
# first use (PEP 562) so that costs nothing.
_CLOCK_NAMES = frozenset(
    {"DEFAULT_START", "FakeClock", "is_testing", "set_testing", "testing_mode"}
)

_CASCADE_NAMES = frozenset({"Cascade", "CascadeResult"})


def reset() -> None:
    """Forget what earlier tests left behind: every guard's turns, fuse and cache, and fake time.

    Between two tests a guard would otherwise remember the first test's 429
    (and refuse the second test's new query), its turn and its cache. The
    pytest plugin calls this after every test; call it yourself between tests
    under another runner (unittest's `tearDown`, for example). The clock a
    [`set_testing`][searchfuse.testing.set_testing] installed goes back to where it started; real
    time is left alone.
    """
    if "searchfuse.guard" in sys.modules:  # else no guard exists to reset
        from searchfuse.guard import reset_all

        reset_all()
    if "searchfuse.testing._clock" in sys.modules:  # else no fake clock was ever made
        from searchfuse import _clock as clock_seam
        from searchfuse.testing._clock import FakeClock

        if isinstance(clock_seam._clock, FakeClock):
            clock_seam._clock.reset()


def should_mock(request: Any) -> bool:
    """Whether `tavily_mock` answers `request`: only requests to Tavily's host.

    An LLM client, or any other httpx call in the same test, reaches its real
    (or loopback) server. This is pytest-httpx's `should_mock` option.
    """
    return bool(request.url.host == TAVILY_HOST)


def __getattr__(name: str) -> Any:
    """Load a public name on first use."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in _CLOCK_NAMES:
        module = "._clock"
    elif name in _CASCADE_NAMES:
        module = "._cascade"
    else:
        module = "._fake"
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, loaded or not."""
    return sorted(__all__)
