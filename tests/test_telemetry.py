"""OpenTelemetry: spans and counters through the SDK's in-memory exporters; nothing without it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from searchfuse import Router, _telemetry, guard, turn
from searchfuse.errors import BadRequest, CooldownActive, RateLimited, TurnLimitReached
from searchfuse.testing import TEST_KEYS, FakeClock, FakeTavily, testing_mode

ROOT = Path(__file__).resolve().parent.parent

# The global providers can be set once per process: one pair for the module.
_SPANS = InMemorySpanExporter()
_METRICS = InMemoryMetricReader()


def _install_sdk() -> None:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_SPANS))
        trace.set_tracer_provider(provider)
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(MeterProvider(metric_readers=[_METRICS]))


class Telemetry:
    """What searchfuse emitted during one test."""

    def __init__(self) -> None:
        _SPANS.clear()
        self._before = self._read()

    @staticmethod
    def _read() -> dict[tuple[str, frozenset[tuple[str, Any]]], float]:
        data = _METRICS.get_metrics_data()
        values: dict[tuple[str, frozenset[tuple[str, Any]]], float] = {}
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                if scope.scope.name != "searchfuse":
                    continue
                for metric in scope.metrics:
                    for point in metric.data.data_points:  # type: ignore[union-attr]
                        attributes = frozenset((point.attributes or {}).items())
                        values[(metric.name, attributes)] = point.value  # type: ignore[union-attr]
        return values

    def spans(self) -> list[ReadableSpan]:
        return [s for s in _SPANS.get_finished_spans() if s.name.startswith("searchfuse.")]

    def counts(self) -> dict[tuple[str, frozenset[tuple[str, Any]]], float]:
        """Counter increases since the test began, by (name, attributes)."""
        after = self._read()
        return {
            k: v - self._before.get(k, 0) for k, v in after.items() if v - self._before.get(k, 0)
        }

    def count(self, name: str, **attributes: Any) -> float:
        wanted = {(f"searchfuse.{k}", v) for k, v in attributes.items()}
        return sum(
            v for (n, attrs), v in self.counts().items() if n == name and wanted <= set(attrs)
        )


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    _install_sdk()
    yield Telemetry()


def test_a_served_search_is_one_span_with_key_outcome_served_by_and_credits(
    telemetry: Telemetry,
) -> None:
    result = {
        "results": [],
        "usage": {"credits": 2},
        "searchfuse": {"served_by": "tavily", "key": "tvly-dev-…0001", "degraded": None},
    }
    with _telemetry.search_span() as span:
        span.served(result)

    (recorded,) = telemetry.spans()
    assert recorded.name == "searchfuse.search"
    assert dict(recorded.attributes or {}) == {
        "searchfuse.outcome": "served",
        "searchfuse.served_by": "tavily",
        "searchfuse.key": "tvly-dev-…0001",
        "searchfuse.credits": 2,
    }
    assert telemetry.count("searchfuse.searches", outcome="served") == 1


def test_a_refusal_and_a_failure_are_outcomes(telemetry: Telemetry) -> None:
    with pytest.raises(RateLimited), _telemetry.search_span():
        raise RateLimited(30, key="tvly-dev-…0001")
    with pytest.raises(BadRequest), _telemetry.search_span():
        raise BadRequest("query is empty")

    refused, failed = telemetry.spans()
    assert refused.attributes is not None and failed.attributes is not None
    assert refused.attributes["searchfuse.outcome"] == "refused"
    assert refused.attributes["searchfuse.refusal.reason"] == "rate_limited"
    assert refused.attributes["searchfuse.retry_after"] == 30.0
    assert failed.attributes["searchfuse.outcome"] == "failed"
    assert failed.attributes["http.response.status_code"] == 400
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert telemetry.count("searchfuse.searches", outcome="refused") == 1
    assert telemetry.count("searchfuse.searches", outcome="failed") == 1
    assert telemetry.count("searchfuse.refusals", **{"refusal.reason": "rate_limited"}) == 1


def test_counters(telemetry: Telemetry) -> None:
    _telemetry.refused(TurnLimitReached())
    _telemetry.refused(TurnLimitReached())
    cooldown = CooldownActive(10)
    _telemetry.refused(cooldown)
    _telemetry.refused(cooldown)  # the same refusal, seen again on its way up: once
    _telemetry.rate_limited("tvly-dev-…0002")
    _telemetry.paced_wait(1.5)
    _telemetry.cache_hit()

    assert telemetry.count("searchfuse.refusals", **{"refusal.reason": "turn_limit"}) == 2
    assert telemetry.count("searchfuse.refusals", **{"refusal.reason": "cooldown"}) == 1
    assert telemetry.count("searchfuse.rate_limited", key="tvly-dev-…0002") == 1
    assert telemetry.count("searchfuse.paced_waits") == 1
    assert telemetry.count("searchfuse.cache_hits") == 1


_BLOCK_OTEL = textwrap.dedent(
    """
    import importlib.abc, sys

    class NoOpenTelemetry(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError(f"{name} is not installed (blocked by the test)")
            return None

    sys.meta_path.insert(0, NoOpenTelemetry())
    """
)


def _python(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TAVILY_BASE_URL", None)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_without_opentelemetry_nothing_is_imported_and_searches_work() -> None:
    out = _python(
        _BLOCK_OTEL
        + textwrap.dedent(
            """
            from searchfuse import Router, _telemetry, guard, turn
            from searchfuse.errors import RateLimited

            with _telemetry.search_span() as span:
                span.served({"usage": {"credits": 1}})
            try:
                with _telemetry.search_span():
                    raise RateLimited(5)
            except RateLimited:
                pass
            _telemetry.refused(RateLimited(3))
            _telemetry.rate_limited("tvly-dev-…0001")
            _telemetry.paced_wait(1.0)
            _telemetry.cache_hit()

            from searchfuse import Router, guard, turn
            from searchfuse.testing import TEST_KEYS, FakeTavily

            fake = FakeTavily(keys=TEST_KEYS)
            router = Router(list(TEST_KEYS), transport=fake.transport())

            @guard(router=router, on_refusal="return")
            def web_search(query: str) -> dict:
                "Search the web."

            with turn():
                assert web_search("q")["results"]
                assert "already used" in web_search("other")
            fake.fail_next(429, path="/search")
            with turn():
                assert "429" in web_search("third")
            print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
            """
        )
    )
    assert out == "[]"


def test_importing_searchfuse_does_not_import_opentelemetry() -> None:
    out = _python(
        "import sys, searchfuse, searchfuse.router, searchfuse.guard, searchfuse._telemetry; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    assert out == "[]"


# -- what the router and the guard emit, end to end (simulated Tavily, in-process) -------


def _router(fake: FakeTavily, **options: Any) -> Router:
    return Router(
        list(TEST_KEYS[:2]),
        transport=fake.transport(),
        async_transport=fake.transport(),
        **options,
    )


def _no_raw_key(telemetry: Telemetry) -> None:
    text = repr([dict(s.attributes or {}) for s in telemetry.spans()])
    text += repr(telemetry.counts())
    assert not any(key in text for key in TEST_KEYS)


def test_router_search_span(telemetry: Telemetry, fake_tavily: FakeTavily) -> None:
    router = _router(fake_tavily)
    router.search("capital of France", search_depth="advanced")

    (span,) = telemetry.spans()
    attributes = dict(span.attributes or {})
    assert attributes["searchfuse.outcome"] == "served"
    assert attributes["searchfuse.served_by"] == "tavily"
    assert attributes["searchfuse.key"] in {"tvly-dev-…0001", "tvly-dev-…0002"}
    assert attributes["searchfuse.credits"] == 2  # advanced
    assert telemetry.count("searchfuse.searches", outcome="served", operation="search") == 1
    _no_raw_key(telemetry)


async def test_async_search_and_other_endpoints(
    telemetry: Telemetry, fake_tavily: FakeTavily
) -> None:
    router = _router(fake_tavily)
    await router.asearch("capital of France")
    await router.arequest("/extract", {"urls": ["https://example.com"]})

    names = [s.name for s in telemetry.spans()]
    assert names == ["searchfuse.search", "searchfuse.extract"]
    assert telemetry.count("searchfuse.searches", outcome="served") == 2


def test_a_429_is_counted_once_through_guard_and_router(
    telemetry: Telemetry, fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    router = _router(fake_tavily)

    @guard(router=router, on_refusal="return")
    def web_search(query: str) -> dict[str, Any]:
        """Search the web."""
        raise AssertionError("the router serves it")

    fake_tavily.fail_next(429, retry_after=30, path="/search")
    with turn():
        assert "429" in web_search("capital of France")
    with turn():
        assert "cooling down" in web_search("capital of Spain")  # refused, nothing sent

    assert len(fake_tavily.searches) == 1
    (span,) = telemetry.spans()  # the refused call never reached the router's search
    assert dict(span.attributes or {})["searchfuse.outcome"] == "refused"
    assert "searchfuse.key" not in (span.attributes or {})  # nothing was served
    assert telemetry.count("searchfuse.rate_limited") == 1
    assert telemetry.count("searchfuse.refusals", **{"refusal.reason": "rate_limited"}) == 1
    assert telemetry.count("searchfuse.refusals", **{"refusal.reason": "cooldown"}) == 1
    assert telemetry.count("searchfuse.searches", outcome="refused") == 1
    _no_raw_key(telemetry)


def test_cache_hits_turn_limits_and_a_guarded_functions_own_429(telemetry: Telemetry) -> None:
    class Upstream429(Exception):
        status_code = 429

    @guard(cache=True, on_refusal="return")
    def web_search(query: str) -> str:
        if query == "overload":
            raise Upstream429("too many requests")
        return f"results for {query}"

    with testing_mode():
        with turn():
            web_search("a")
            web_search("b")  # the second search of the reply
        with turn():
            web_search("a")  # from the cache
        with turn():
            web_search("overload")

    assert telemetry.count("searchfuse.cache_hits") == 1
    assert telemetry.count("searchfuse.refusals", **{"refusal.reason": "turn_limit"}) == 1
    assert telemetry.count("searchfuse.rate_limited") == 1
    assert telemetry.count("searchfuse.refusals", **{"refusal.reason": "rate_limited"}) == 1
    assert telemetry.spans() == []  # no router, no search span


def test_paced_waits(
    telemetry: Telemetry,
    fake_tavily: FakeTavily,
    fake_clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SEARCHFUSE_RPM", "1")
    router = Router([TEST_KEYS[0]], transport=fake_tavily.transport(), max_wait=120, deadline=180)
    router.search("first")
    router.search("second")  # waits for the key's rate, on the fake clock

    assert len(fake_tavily.searches) == 2
    first, second = telemetry.spans()
    assert first.events == ()  # room at once
    waits = [e for e in second.events if e.name == "searchfuse.paced_wait"]
    assert (
        waits and sum(float((e.attributes or {})["searchfuse.wait_seconds"]) for e in waits) >= 60
    )
    assert telemetry.count("searchfuse.paced_waits") == len(waits)


def test_the_console_example_prints_spans_with_masked_keys() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "telemetry_console.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count('"name": "searchfuse.search"') == 3
    assert '"searchfuse.outcome": "served"' in proc.stdout
    assert '"searchfuse.refusal.reason": "rate_limited"' in proc.stdout
    assert '"searchfuse.refusal.reason": "cooldown"' in proc.stdout
    assert "searchfuse.rate_limited" in proc.stdout  # the counters, at exit
    assert not any(key in proc.stdout + proc.stderr for key in TEST_KEYS)


def test_with_the_api_but_no_sdk_a_search_builds_no_span_until_an_sdk_is_set() -> None:
    # The API alone hands out no-op providers: a search then skips the span
    # machinery, and an SDK configured later records from its first search on.
    out = _python(
        textwrap.dedent(
            """
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                InMemorySpanExporter,
            )
            from searchfuse import Router
            from searchfuse.testing import FakeTavily

            fake = FakeTavily()
            fake.add_key("tvly-dev-test0001")
            router = Router(["tvly-dev-test0001"], transport=fake.transport())
            router.search("before the sdk")
            spans = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(spans))
            trace.set_tracer_provider(provider)
            router.search("after the sdk")
            print([s.name for s in spans.get_finished_spans()], len(fake.searches))
            """
        )
    )
    assert out == "['searchfuse.search'] 2"
