"""Test helpers: a simulated Tavily API, a fake clock, and the switch for test mode.

- :class:`FakeTavily` behaves like Tavily's ``POST /search`` and ``GET /usage``
  (auth, validation, rate windows, credits, 429/432/433, ``Retry-After``),
  takes injected faults, and records every request (keys as fingerprints).
  Serve it in-process (:meth:`FakeTavily.transport`, :meth:`FakeTavily.mount`
  on pytest-httpx) or on loopback (:meth:`FakeTavily.serve`).
- :class:`FakeClock` is time that only moves when told to.
- :func:`set_testing` / :func:`testing_mode` make searchfuse read that clock
  and never really sleep, like ``stamina.set_testing``.

With ``pip install searchfuse[testing]``, pytest gets the fixtures
``fake_clock``, ``fake_tavily``, ``tavily_mock``, ``tavily_server`` and
``tavily_cascade`` automatically (see ``docs/testing.md``).

Example::

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
"""

from __future__ import annotations

import importlib
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

#: The made-up keys the ``fake_tavily`` fixture accepts. Never put a real key in a test.
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
    "set_testing",
    "testing_mode",
]

# The pytest plugin imports this package in every test session of every project
# that installed searchfuse, whether or not a test uses it: the names load on
# first use (PEP 562) so that costs nothing.
_CLOCK_NAMES = frozenset(
    {"DEFAULT_START", "FakeClock", "is_testing", "set_testing", "testing_mode"}
)

_CASCADE_NAMES = frozenset({"Cascade", "CascadeResult"})


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
