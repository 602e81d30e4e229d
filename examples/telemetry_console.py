"""searchfuse's OpenTelemetry spans and metrics, printed to the console (offline).

Runs three searches through a router against the simulated Tavily on
loopback (made-up keys): one served, one answered 429, one refused during
the cooldown. The SDK's console exporters print the spans and, at exit,
the counters. Needs ``opentelemetry-sdk`` besides the ``otel`` extra.

    python examples/telemetry_console.py
"""

from __future__ import annotations

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from searchfuse import Router, SearchRefused
from searchfuse.testing import TEST_KEYS, FakeTavily

tracing = TracerProvider()
tracing.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
trace.set_tracer_provider(tracing)
metrics.set_meter_provider(
    MeterProvider(metric_readers=[PeriodicExportingMetricReader(ConsoleMetricExporter())])
)


def main() -> None:
    fake = FakeTavily(keys=TEST_KEYS[:2])
    with fake.serve() as url:
        router = Router(list(TEST_KEYS[:2]), base_url=url)
        router.search("capital of France")
        fake.fail_next(429, retry_after=30, path="/search")
        for query in ("capital of Italy", "capital of Spain"):
            try:
                router.search(query)
            except SearchRefused as refusal:
                print(f"refused: {refusal.reason}")


if __name__ == "__main__":
    main()
    metrics.get_meter_provider().shutdown()  # type: ignore[attr-defined]
