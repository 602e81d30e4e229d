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

from searchfuse import _telemetry
from searchfuse.errors import BadRequest, RateLimited

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
        "searchfuse": {"served_by": "tavily", "key": "tvly-dev-…0001"},
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
    _telemetry.refused("turn_limit")
    _telemetry.refused("turn_limit")
    _telemetry.refused("cooldown")
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
            from searchfuse import _telemetry
            from searchfuse.errors import RateLimited

            with _telemetry.search_span() as span:
                span.served({"usage": {"credits": 1}})
            try:
                with _telemetry.search_span():
                    raise RateLimited(5)
            except RateLimited:
                pass
            _telemetry.refused("turn_limit")
            _telemetry.rate_limited("tvly-dev-…0001")
            _telemetry.paced_wait(1.0)
            _telemetry.cache_hit()
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
