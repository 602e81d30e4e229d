"""The pytest plugin's fixtures, used exactly as docs/testing.md shows them."""

import ast
import http.server
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import httpx
import pytest

import searchfuse
from searchfuse import _clock
from searchfuse.testing import (
    DEFAULT_START,
    TEST_KEYS,
    FakeClock,
    FakeTavily,
    is_testing,
    reset,
    should_mock,
    testing_mode,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
PLUGIN = "searchfuse.testing.plugin"


def _plugin_autoloaded() -> bool:
    """Whether pytest loads the plugin itself, through an installed searchfuse's entry point."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))


# An installed searchfuse brings its fixtures through the pytest11 entry point;
# a source checkout that is not installed gets them from here.
pytest_plugins = ["pytester"] if _plugin_autoloaded() else ["pytester", PLUGIN]


# --- the example of docs/testing.md, verbatim ----------------------------------------


def web_search(query: str) -> dict:
    """The code under test: one Tavily search, honouring TAVILY_BASE_URL."""
    base_url = os.environ.get("TAVILY_BASE_URL", "https://api.tavily.com")
    response = httpx.post(
        f"{base_url}/search",
        json={"query": query, "include_usage": True},
        headers={"Authorization": "Bearer tvly-dev-test0001"},
    )
    response.raise_for_status()
    return response.json()


def test_one_search_costs_one_credit(tavily_mock):
    result = web_search("capital of France")

    assert result["usage"] == {"credits": 1}
    assert [r.query for r in tavily_mock.searches] == ["capital of France"]
    assert tavily_mock.usage_of("tvly-dev-test0001")["key"]["usage"] == 1


def test_rate_limit_window(tavily_mock, fake_clock):
    tavily_mock.set_rpm("tvly-dev-test0001", 1)
    web_search("first")

    with pytest.raises(httpx.HTTPStatusError) as excinfo:
        web_search("second")
    assert excinfo.value.response.status_code == 429
    assert excinfo.value.response.headers["Retry-After"] == "60"

    fake_clock.advance(60)
    assert web_search("second")["results"]


def test_upstream_outage(tavily_mock):
    tavily_mock.fail_next(503, times=2)

    for _ in range(2):
        with pytest.raises(httpx.HTTPStatusError):
            web_search("capital of France")
    assert web_search("capital of France")["results"]
    assert [r.status for r in tavily_mock.searches] == [503, 503, 200]


def test_over_a_real_socket(tavily_server):
    # TAVILY_BASE_URL points at the loopback server during this test.
    assert web_search("capital of France")["query"] == "capital of France"


# --- the docs cannot rot -------------------------------------------------------------


def _doc_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.DOTALL)


def test_docs_example_is_this_module() -> None:
    # The Example section's module; the page's other tests run in tests/test_docs.py.
    examples = [block for block in _doc_blocks() if "def test_one_search_costs" in block]
    source = Path(__file__).read_text(encoding="utf-8")
    assert examples, "docs/testing.md lost its example test"

    for block in examples:
        for node in ast.parse(block).body:
            segment = ast.get_source_segment(block, node)
            assert segment is not None
            if isinstance(node, ast.FunctionDef):
                assert segment in source, f"docs/testing.md: {node.name} differs from the test"
            else:
                assert f"\n{segment}\n" in source, f"docs/testing.md: {segment!r} missing here"


def test_docs_name_only_real_methods() -> None:
    names = {
        name
        for block in _doc_blocks()
        for name in re.findall(r"\b(?:fake|fake_tavily|tavily_mock)\.(\w+)", block)
    }

    assert names
    assert {name for name in names if not hasattr(FakeTavily, name)} == set()


# --- the fixtures ----------------------------------------------------------------------


def test_fake_clock_is_searchfuse_time(fake_clock: FakeClock) -> None:
    assert is_testing()
    assert _clock.now() == fake_clock()

    _clock.sleep(90)  # what a router's wait does under test: no real sleep

    assert fake_clock() == DEFAULT_START + 90
    assert _clock.now() == fake_clock()


def test_fake_tavily_has_four_made_up_keys(fake_tavily: FakeTavily, fake_clock: FakeClock) -> None:
    assert fake_tavily.keys == list(TEST_KEYS)
    assert all(key.startswith("tvly-dev-test") for key in fake_tavily.keys)
    assert len({fake_tavily.account_of(key).name for key in TEST_KEYS}) == 4
    fake_tavily.handle(
        httpx.Request(
            "GET",
            "https://api.tavily.com/usage",
            headers={"Authorization": f"Bearer {TEST_KEYS[0]}"},
        )
    )
    assert fake_tavily.requests[0].time == fake_clock()


def test_tavily_mock_is_the_fake_tavily(tavily_mock: FakeTavily, fake_tavily: FakeTavily) -> None:
    assert tavily_mock is fake_tavily


def test_tavily_mock_left_unused_does_not_fail(tavily_mock: FakeTavily) -> None:
    assert tavily_mock.requests == []


async def test_tavily_mock_serves_async_clients(tavily_mock: FakeTavily) -> None:
    tavily_mock.fail_next(432, key=TEST_KEYS[0])
    async with httpx.AsyncClient(base_url="https://api.tavily.com") as client:
        spent = await client.get("/usage", headers={"Authorization": f"Bearer {TEST_KEYS[0]}"})
        other = await client.get("/usage", headers={"Authorization": f"Bearer {TEST_KEYS[1]}"})

    assert (spent.status_code, other.status_code) == (432, 200)


def test_tavily_server_sets_tavily_base_url(tavily_server: str, fake_tavily: FakeTavily) -> None:
    assert tavily_server.startswith("http://127.0.0.1:")
    assert os.environ["TAVILY_BASE_URL"] == tavily_server

    response = httpx.get(
        f"{tavily_server}/usage", headers={"Authorization": f"Bearer {TEST_KEYS[3]}"}
    )

    assert response.status_code == 200
    assert len(fake_tavily.usage_requests) == 1


# --- the plugin from the outside -------------------------------------------------------

# Inner sessions load the plugin by module name whatever is installed, so they
# behave the same in a source checkout and in an installed package.
INNER = ("-p", "no:searchfuse", "-p", PLUGIN, "-p", "no:cacheprovider", "-p", "no:asyncio")


def test_fixtures_restore_real_time(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from searchfuse import _clock
        from searchfuse.testing import is_testing

        def test_uses_fake_time(fake_clock):
            assert is_testing()
            fake_clock.advance(3600)

        def test_afterwards_real_time():
            assert not is_testing()
            assert _clock.now() > 0
        """
    )

    result = pytester.runpytest(*INNER)

    result.assert_outcomes(passed=2)


def test_a_cooldown_on_disk_does_not_outlive_its_test(pytester: pytest.Pytester) -> None:
    """The fake clock starts at the same instant in every test: a 429 cooldown one
    test wrote into the project's state file (or SEARCHFUSE_STATE) must not refuse
    the next test. Each test gets state of its own."""
    config = pytester.path / "config"
    config.mkdir()
    keys = [{"key": k} for k in ("tvly-dev-test0001", "tvly-dev-test0002")]
    (config / "keys.json").write_text(json.dumps({"format_version": 2, "keys": keys}))
    (config / "keys.json").chmod(0o600)
    pytester.makepyfile(
        """
        import os
        import pytest
        from searchfuse import RateLimited, Router

        @pytest.mark.parametrize("run", [1, 2])
        def test_from_config(tavily_server, fake_tavily, run):
            router = Router.from_config("config/keys.json")
            if run == 1:
                fake_tavily.fail_next(429, times=None, retry_after=3600)
                with pytest.raises(RateLimited):
                    router.search("q")
            else:
                assert router.search("q")["results"]
            router.close()

        @pytest.mark.parametrize("run", [1, 2])
        def test_from_env(tavily_server, fake_tavily, monkeypatch, run):
            monkeypatch.setenv("TAVILY_API_KEYS", "tvly-dev-test0001,tvly-dev-test0002")
            router = Router.from_env()
            assert "searchfuse-state" in os.environ["SEARCHFUSE_STATE"]
            if run == 1:
                fake_tavily.fail_next(429, times=None, retry_after=3600)
                with pytest.raises(RateLimited):
                    router.search("q")
            else:
                assert router.search("q")["results"]
            router.close()

        def test_an_explicit_state_is_used(tavily_server, fake_tavily, tmp_path):
            router = Router.from_config("config/keys.json", state=str(tmp_path / "mine.db"))
            router.search("q")
            router.close()
            assert (tmp_path / "mine.db").exists()
        """
    )
    result = pytester.runpytest(*INNER)
    result.assert_outcomes(passed=5)
    assert not (pytester.path / "state").exists()  # the project's state was never touched


def test_plugin_works_without_pytest_httpx(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_fake_tavily(fake_tavily):
            assert len(fake_tavily.keys) == 4

        def test_tavily_server(tavily_server):
            assert tavily_server.startswith("http://127.0.0.1:")

        def test_tavily_mock(tavily_mock):
            pass
        """
    )

    result = pytester.runpytest(*INNER, "-p", "no:pytest_httpx")

    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*tavily_mock fixture needs pytest-httpx*"])


def test_importing_the_plugin_imports_nothing_heavy() -> None:
    heavy = ["searchfuse.testing._fake", "searchfuse.testing._server", "pytest_httpx"]
    code = f"import sys, {PLUGIN}; print([m for m in {heavy!r} if m in sys.modules])"
    project_root = str(Path(searchfuse.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": project_root}

    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )

    assert out.stdout.strip() == "[]"


# --- tavily_mock answers Tavily's host only ---------------------------------------------


class _Hello(http.server.BaseHTTPRequestHandler):
    """Another service in the same test: an LLM endpoint, say."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.dumps({"echo": json.loads(self.rfile.read(length) or b"null")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def other_service() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_other_hosts_pass_through_tavily_mock(tavily_mock: FakeTavily, other_service: str) -> None:
    llm = httpx.post(f"{other_service}/v1/chat/completions", json={"prompt": "hi"}, timeout=5)
    search = httpx.post(
        "https://api.tavily.com/search",
        json={"query": "capital of France"},
        headers={"Authorization": f"Bearer {TEST_KEYS[0]}"},
    )

    assert llm.json() == {"echo": {"prompt": "hi"}}  # the real server answered
    assert search.status_code == 200
    assert [r.query for r in tavily_mock.searches] == ["capital of France"]
    assert len(tavily_mock.requests) == 1  # the other call never reached the fake


async def test_other_hosts_pass_through_tavily_mock_async(
    tavily_mock: FakeTavily, other_service: str
) -> None:
    async with httpx.AsyncClient(timeout=5) as client:
        llm = await client.post(f"{other_service}/v1/embeddings", json=[1, 2])
    assert llm.json() == {"echo": [1, 2]}
    assert tavily_mock.requests == []


def test_tavily_mock_and_tavily_server_together(
    tavily_mock: FakeTavily, tavily_server: str
) -> None:
    headers = {"Authorization": f"Bearer {TEST_KEYS[0]}"}
    assert httpx.get(f"{tavily_server}/usage", headers=headers).status_code == 200
    assert httpx.get("https://api.tavily.com/usage", headers=headers).status_code == 200
    assert len(tavily_mock.usage_requests) == 2  # one fake, served both ways


def test_should_mock_is_tavily_only() -> None:
    assert should_mock(httpx.Request("POST", "https://api.tavily.com/search"))
    for url in (
        "https://api.openai.com/v1/chat/completions",
        "http://127.0.0.1:8080/search",
        "https://api.tavily.com.example.org/search",
    ):
        assert not should_mock(httpx.Request("POST", url))


def test_a_tests_own_should_mock_is_kept(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import httpx
        import pytest

        @pytest.mark.httpx_mock(should_mock=lambda r: r.url.host == "llm.example")
        def test_both_mocked(tavily_mock, httpx_mock):
            httpx_mock.add_response(url="https://llm.example/v1", json={"ok": True})
            assert httpx.get("https://llm.example/v1").json() == {"ok": True}
            response = httpx.get(
                "https://api.tavily.com/usage",
                headers={"Authorization": "Bearer tvly-dev-test0001"},
            )
            assert response.status_code == 200
            assert len(tavily_mock.usage_requests) == 1

        def test_dynamic(request):
            fake = request.getfixturevalue("tavily_mock")
            with pytest.raises(httpx.ConnectError):
                httpx.get("http://127.0.0.1:9/nothing-listens-here", timeout=2)
            assert fake.requests == []
        """
    )

    result = pytester.runpytest(*INNER)

    result.assert_outcomes(passed=2)


# --- nothing leaks from one test into the next -----------------------------------------


def test_a_suite_wide_fake_clock_starts_afresh_in_every_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import searchfuse.testing

        def pytest_configure(config):
            searchfuse.testing.set_testing(True)

        def pytest_unconfigure(config):  # the inner session runs in this process
            searchfuse.testing.set_testing(False)
        """
    )
    pytester.makepyfile(
        """
        from searchfuse import _clock
        from searchfuse.testing import DEFAULT_START

        def test_first():
            assert _clock.now() == DEFAULT_START
            _clock.sleep(3600)
            assert _clock.now() == DEFAULT_START + 3600

        def test_second():
            assert _clock.now() == DEFAULT_START
        """
    )

    result = pytester.runpytest(*INNER)

    result.assert_outcomes(passed=2)


def test_reset_rewinds_the_installed_fake_clock_and_leaves_real_time_alone() -> None:
    with testing_mode() as clock:
        clock.advance(120)
        reset()
        assert clock() == DEFAULT_START
    before = _clock.now()
    reset()  # real time: nothing to rewind
    assert _clock.now() >= before


def test_a_429_in_one_test_does_not_refuse_the_next(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from searchfuse import RateLimited, guard

        calls = []

        class Upstream429(Exception):
            status_code = 429

        @guard  # module level: one guard for the whole test module, as in real suites
        def web_search(query: str) -> str:
            calls.append(query)
            if query == "overload":
                raise Upstream429("too many requests")
            return f"results for {query}"

        def test_first_trips_the_fuse():
            try:
                web_search("overload")
            except RateLimited:
                pass
            else:
                raise AssertionError("the 429 was not recognised")

        def test_second_searches_freely():
            assert web_search("a new query") == "results for a new query"
            assert calls == ["overload", "a new query"]
        """
    )

    result = pytester.runpytest(*INNER)

    result.assert_outcomes(passed=2)


def test_reset_forgets_every_guard() -> None:
    from searchfuse import CooldownActive, guard, turn

    class Upstream429(Exception):
        status_code = 429

    @guard
    def web_search(query: str) -> str:
        if query == "overload":
            raise Upstream429("too many requests")
        return query

    @guard(per_turn=1)
    def other(query: str) -> str:
        return query

    with testing_mode(), turn():
        with pytest.raises(searchfuse.RateLimited):
            web_search("overload")
        with pytest.raises(CooldownActive):
            web_search("next")
        other("one")
        with pytest.raises(searchfuse.TurnLimitReached):
            other("two")
        reset()
        assert web_search("next") == "next"
        assert other("two") == "two"
