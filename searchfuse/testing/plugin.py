"""searchfuse's pytest plugin: fixtures for a simulated Tavily and a fake clock.

Registered through the `pytest11` entry point, so any project with
`searchfuse[testing]` installed gets these fixtures without a conftest:

- `fake_clock`: a [`FakeClock`][searchfuse.testing.FakeClock], installed with
  [`set_testing`][searchfuse.testing.set_testing] for the test and removed after it;
- `fake_tavily`: a [`FakeTavily`][searchfuse.testing.FakeTavily] accepting the
  made-up keys `tvly-dev-test0001` .. `tvly-dev-test0004`, on `fake_clock`;
- `tavily_mock`: `fake_tavily` answering every httpx request to
  `https://api.tavily.com` (needs pytest-httpx); requests to any other
  host (an LLM client, a loopback server) reach the network; yields the fake;
- `tavily_server`: `fake_tavily` served on a loopback port; yields the base
  URL and sets `TAVILY_BASE_URL` to it for the test;
- `tavily_cascade`: a [`Cascade`][searchfuse.testing.Cascade] on `fake_tavily`
  (one search per key per minute): build routers on it, fire a burst of
  parallel calls in one turn, read how many requests reached the API, how
  many got 429 and how many keys ended in cooldown;
- `fake_exa`, `fake_brave`, `fake_serper`: the other providers' simulators
  ([`FakeExa`][searchfuse.testing.FakeExa]...), each accepting its made-up
  keys (`EXA_TEST_KEYS`, `BRAVE_TEST_KEYS`, `SERPER_TEST_KEYS`), on
  `fake_clock`; `fake_searxng` a [`FakeSearXNG`][searchfuse.testing.FakeSearXNG]
  instance;
- `exa_server`, `brave_server`, `serper_server`, `searxng_server`: each served
  on a loopback port; yields the base URL and sets the provider's variable
  (`EXA_BASE_URL`, `BRAVE_BASE_URL`, `SERPER_BASE_URL`, `SEARXNG_URL`) to it.

Each test using these fixtures gets router state of its own (see
`fake_clock`). Between tests the plugin calls
[`searchfuse.testing.reset`][searchfuse.testing.reset]: no guard remembers an
earlier test's 429, turn or cache, and a fake clock installed for the whole
suite goes back to its start.

Importing this module stays cheap (pytest loads it in every session of every
project that installed searchfuse): searchfuse's test helpers, httpx and
pytest-httpx are imported only when a fixture is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from searchfuse.testing import (
        Cascade,
        FakeBrave,
        FakeClock,
        FakeExa,
        FakeSearXNG,
        FakeSerper,
        FakeTavily,
    )
    from searchfuse.testing._simulator import Simulator

__all__ = [
    "brave_server",
    "exa_server",
    "fake_brave",
    "fake_clock",
    "fake_exa",
    "fake_searxng",
    "fake_serper",
    "fake_tavily",
    "searchfuse_reset",
    "searxng_server",
    "serper_server",
    "tavily_cascade",
    "tavily_mock",
    "tavily_server",
]

TAVILY_URL = "https://api.tavily.com"


class _TavilyOrYours:
    """pytest-httpx's `should_mock` for a test using `tavily_mock`.

    Tavily's host is mocked; so is whatever the test's own
    `@pytest.mark.httpx_mock(should_mock=...)` asks for; the rest goes out.
    """

    def __init__(self, yours: Callable[[Any], bool] | None) -> None:
        self.yours = yours

    def __call__(self, request: Any) -> bool:
        from searchfuse.testing import should_mock

        return should_mock(request) or (self.yours is not None and bool(self.yours(request)))


def _mock_tavily_only(node: pytest.Item) -> None:
    """Give `node` an `httpx_mock` marker whose `should_mock` spares other hosts."""
    yours = None
    for marker in node.iter_markers("httpx_mock"):
        if "should_mock" in marker.kwargs:
            yours = marker.kwargs["should_mock"]
            break
    if isinstance(yours, _TavilyOrYours):
        return
    # Prepended, so it is the closest marker and its should_mock is the one used.
    node.add_marker(pytest.mark.httpx_mock(should_mock=_TavilyOrYours(yours)), append=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use `tavily_mock` mock Tavily's host only (pytest-httpx's `should_mock`)."""
    for item in items:
        if "tavily_mock" in getattr(item, "fixturenames", ()):
            _mock_tavily_only(item)


@pytest.fixture(autouse=True)
def searchfuse_reset() -> Iterator[None]:
    """After every test, [`searchfuse.testing.reset`][searchfuse.testing.reset]: guards and fake
    time start afresh."""
    yield
    from searchfuse.testing import reset

    reset()


@pytest.fixture
def fake_clock(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeClock]:
    """A [`FakeClock`][searchfuse.testing.FakeClock], installed as searchfuse's clock for the test.

    Guards and routers built without `clock=` read it, and their waits
    advance it instead of sleeping. Real time is restored after the test.

    The test also gets router state of its own: `SEARCHFUSE_STATE` and the
    default state of `Router.from_config` point into a fresh temporary
    folder. The clock starts at the same instant in every test, so a cooldown
    one test wrote into a shared file would refuse every later test. A router
    given `state=` uses what it is given.
    """
    from searchfuse.router.state import _paths
    from searchfuse.testing import testing_mode

    state = str(tmp_path_factory.mktemp("searchfuse-state") / "searchfuse.db")
    monkeypatch.setenv("SEARCHFUSE_STATE", state)
    monkeypatch.setattr(_paths, "testing_state", state)
    with testing_mode() as clock:
        yield clock


@pytest.fixture
def fake_tavily(fake_clock: FakeClock) -> FakeTavily:
    """A [`FakeTavily`][searchfuse.testing.FakeTavily] with four made-up keys, on `fake_clock`.

    The keys are `tvly-dev-test0001` .. `tvly-dev-test0004`
    (`searchfuse.testing.TEST_KEYS`), each in an account of its own.
    Nothing serves it yet: use `tavily_mock` or `tavily_server`, or
    `fake_tavily.transport()`.
    """
    from searchfuse.testing import TEST_KEYS, FakeTavily

    return FakeTavily(keys=TEST_KEYS, clock=fake_clock)


@pytest.fixture
def tavily_mock(fake_tavily: FakeTavily, request: pytest.FixtureRequest) -> FakeTavily:
    """`fake_tavily`, answering every httpx request to `https://api.tavily.com`.

    Mounted on pytest-httpx's `httpx_mock` as an optional, reusable
    response, so a test that never searches does not fail. Only Tavily's host
    is intercepted: an LLM client or any other httpx call in the same test
    reaches its server. Yields the fake, for fault injection and for reading
    what it received.
    """
    if isinstance(request.node, pytest.Item):  # when the fixture is requested dynamically
        _mock_tavily_only(request.node)
    try:
        httpx_mock = request.getfixturevalue("httpx_mock")
    except pytest.FixtureLookupError:
        pytest.fail(
            "the tavily_mock fixture needs pytest-httpx: pip install '.[testing]' "
            "(or use tavily_server, or fake_tavily.transport())",
            pytrace=False,
        )
    fake_tavily.mount(httpx_mock, base_url=TAVILY_URL)
    return fake_tavily


@pytest.fixture
def tavily_server(fake_tavily: FakeTavily, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`fake_tavily` served over HTTP on 127.0.0.1; yields the base URL.

    `TAVILY_BASE_URL` points at it for the duration of the test, so code that
    honours that variable talks to the fake. The server stops after the test.
    """
    with fake_tavily.serve() as url:
        monkeypatch.setenv("TAVILY_BASE_URL", url)
        yield url


@pytest.fixture
def tavily_cascade(fake_tavily: FakeTavily, fake_clock: FakeClock) -> Cascade:
    """A 429 cascade on `fake_tavily`: each key accepts one search per minute.

    `tavily_cascade.router(**options)` builds a router on the fake;
    `tavily_cascade.burst(search, calls=30)` calls `search` from 30 threads
    at once in one turn and returns a [`CascadeResult`][searchfuse.testing.CascadeResult]
    (`requests`, `rate_limited`, `keys_cooling`, `served`, `failed`).
    """
    from searchfuse.testing import Cascade

    return Cascade(fake_tavily, clock=fake_clock)


def _served(fake: Simulator, variable: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with fake.serve() as url:
        monkeypatch.setenv(variable, url)
        yield url


@pytest.fixture
def fake_exa(fake_clock: FakeClock) -> FakeExa:
    """A [`FakeExa`][searchfuse.testing.FakeExa] accepting `EXA_TEST_KEYS`, on `fake_clock`."""
    from searchfuse.testing import EXA_TEST_KEYS, FakeExa

    return FakeExa(keys=EXA_TEST_KEYS, clock=fake_clock)


@pytest.fixture
def exa_server(fake_exa: FakeExa, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`fake_exa` served on 127.0.0.1; yields the base URL, set as `EXA_BASE_URL`."""
    yield from _served(fake_exa, "EXA_BASE_URL", monkeypatch)


@pytest.fixture
def fake_brave(fake_clock: FakeClock) -> FakeBrave:
    """A [`FakeBrave`][searchfuse.testing.FakeBrave] accepting `BRAVE_TEST_KEYS` (the
    free plan: 1 request a second, 2,000 a month), on `fake_clock`."""
    from searchfuse.testing import BRAVE_TEST_KEYS, FakeBrave

    return FakeBrave(keys=BRAVE_TEST_KEYS, clock=fake_clock)


@pytest.fixture
def brave_server(fake_brave: FakeBrave, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`fake_brave` served on 127.0.0.1; yields the base URL, set as `BRAVE_BASE_URL`."""
    yield from _served(fake_brave, "BRAVE_BASE_URL", monkeypatch)


@pytest.fixture
def fake_serper(fake_clock: FakeClock) -> FakeSerper:
    """A [`FakeSerper`][searchfuse.testing.FakeSerper] accepting `SERPER_TEST_KEYS`, on
    `fake_clock`."""
    from searchfuse.testing import SERPER_TEST_KEYS, FakeSerper

    return FakeSerper(keys=SERPER_TEST_KEYS, clock=fake_clock)


@pytest.fixture
def serper_server(fake_serper: FakeSerper, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`fake_serper` served on 127.0.0.1; yields the base URL, set as `SERPER_BASE_URL`."""
    yield from _served(fake_serper, "SERPER_BASE_URL", monkeypatch)


@pytest.fixture
def fake_searxng(fake_clock: FakeClock) -> FakeSearXNG:
    """A [`FakeSearXNG`][searchfuse.testing.FakeSearXNG] instance, on `fake_clock`."""
    from searchfuse.testing import FakeSearXNG

    return FakeSearXNG(clock=fake_clock)


@pytest.fixture
def searxng_server(fake_searxng: FakeSearXNG, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`fake_searxng` served on 127.0.0.1; yields its URL, set as `SEARXNG_URL`."""
    yield from _served(fake_searxng, "SEARXNG_URL", monkeypatch)
