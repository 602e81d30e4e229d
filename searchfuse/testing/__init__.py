"""Test helpers: simulated search APIs, a fake clock, and the switch for test mode.

- [`FakeTavily`][searchfuse.testing.FakeTavily] behaves like Tavily's `POST /search`,
  `/extract`, `/crawl`, `/map` and `GET /usage` (auth, validation, rate windows,
  credits, 429/432/433, `Retry-After`), takes injected faults, and records
  every request (keys as fingerprints).
  Serve it in-process ([`FakeTavily.transport`][searchfuse.testing.FakeTavily.transport],
  [`FakeTavily.mount`][searchfuse.testing.FakeTavily.mount] on pytest-httpx) or on loopback
  ([`FakeTavily.serve`][searchfuse.testing.FakeTavily.serve]).
- [`FakeExa`][searchfuse.testing.FakeExa], [`FakeBrave`][searchfuse.testing.FakeBrave],
  [`FakeSerper`][searchfuse.testing.FakeSerper] and
  [`FakeSearXNG`][searchfuse.testing.FakeSearXNG] do the same for the other providers,
  each written from that provider's documentation, with the same fault API
  (`fail_next`, `slow_next`, `clear_faults`), records and ways to serve.
- [`FakeClock`][searchfuse.testing.FakeClock] is time that only moves when told to.
- [`set_testing`][searchfuse.testing.set_testing] /
  [`testing_mode`][searchfuse.testing.testing_mode] make searchfuse read that clock and never really
  sleep, like `stamina.set_testing`.

With `pip install ".[testing]"`, pytest gets the fixtures
`fake_clock`, `fake_tavily`, `tavily_mock`, `tavily_server`,
`tavily_cascade`, and `fake_exa` / `exa_server`, `fake_brave` /
`brave_server`, `fake_serper` / `serper_server`, `fake_searxng` /
`searxng_server` automatically (see `docs/testing.md`).

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
    from searchfuse.testing._brave import FakeBrave
    from searchfuse.testing._cascade import Cascade, CascadeResult
    from searchfuse.testing._clock import (
        DEFAULT_START,
        FakeClock,
        is_testing,
        set_testing,
        testing_mode,
    )
    from searchfuse.testing._exa import FakeExa
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
    from searchfuse.testing._searxng import FakeSearXNG
    from searchfuse.testing._serper import FakeSerper

#: The made-up keys the `fake_tavily` fixture accepts. Never put a real key in a test.
TEST_KEYS: tuple[str, ...] = (
    "tvly-dev-test0001",
    "tvly-dev-test0002",
    "tvly-dev-test0003",
    "tvly-dev-test0004",
)

#: Made-up keys for the other simulators' fixtures, each in its provider's shape.
EXA_TEST_KEYS: tuple[str, ...] = (
    "00000000-0000-4000-8000-0000000e0001",
    "00000000-0000-4000-8000-0000000e0002",
)
BRAVE_TEST_KEYS: tuple[str, ...] = ("BSAtest00000000000000000001", "BSAtest00000000000000000002")
SERPER_TEST_KEYS: tuple[str, ...] = ("0" * 36 + "5e01", "0" * 36 + "5e02")

__all__ = [
    "BRAVE_TEST_KEYS",
    "CREDITS_PER_DEPTH",
    "DEFAULT_PLAN",
    "DEFAULT_PLAN_LIMIT",
    "DEFAULT_START",
    "DEV_RPM",
    "EXA_TEST_KEYS",
    "PROD_RPM",
    "RATE_WINDOW",
    "SERPER_TEST_KEYS",
    "TAVILY_HOST",
    "TEST_KEYS",
    "USAGE_REQUESTS_PER_WINDOW",
    "USAGE_WINDOW",
    "Account",
    "Cascade",
    "CascadeResult",
    "FakeBrave",
    "FakeClock",
    "FakeExa",
    "FakeSearXNG",
    "FakeSerper",
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
#: The other simulators, by the module each lives in.
_SIMULATORS = {
    "FakeExa": "._exa",
    "FakeBrave": "._brave",
    "FakeSerper": "._serper",
    "FakeSearXNG": "._searxng",
}


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
    elif name in _SIMULATORS:
        module = _SIMULATORS[name]
    else:
        module = "._fake"
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, loaded or not."""
    return sorted(__all__)
