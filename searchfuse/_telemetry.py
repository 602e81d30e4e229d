"""OpenTelemetry spans and metrics, when `opentelemetry-api` is installed; nothing otherwise.

The `otel` extra (in a checkout: `pip install ".[otel]"`) brings the
API; an application that configures an OpenTelemetry SDK then sees:

- one span `searchfuse.search` per router search, with the masked key that
  served it, the outcome (`served`, `refused` or `failed`), who served
  (`tavily` or `fallback`), the credits Tavily charged, and the refusal
  reason or HTTP status when there was one;
- counters `searchfuse.searches` (by outcome), `searchfuse.refusals` (by
  reason), `searchfuse.rate_limited` (429 answers), `searchfuse.paced_waits`
  (waits for a key's request rate) and `searchfuse.cache_hits`.

Without `opentelemetry-api` every function here returns at once and nothing
is imported. Even with it, `import searchfuse` does not import it: the API
is loaded on the first search. Keys only ever appear masked.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from searchfuse.errors import SearchFailed, SearchRefused

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "SearchSpan",
    "cache_hit",
    "paced_wait",
    "rate_limited",
    "refused",
    "request_span",
    "search_span",
]

#: The instrumentation scope: what an exporter shows as the library's name.
SCOPE = "searchfuse"


class _Instruments:
    """The tracer and counters, made once from the global OpenTelemetry providers.

    They are the API's proxies: an SDK configured after the first search
    still receives everything from then on.
    """

    def __init__(self) -> None:
        from opentelemetry import metrics, trace

        from searchfuse import __version__

        self._trace, self._metrics = trace, metrics
        self.tracer: Tracer = trace.get_tracer(SCOPE, __version__)
        meter = metrics.get_meter(SCOPE, __version__)
        self.searches: Counter = meter.create_counter(
            "searchfuse.searches", unit="{search}", description="Searches through the router"
        )
        self.refusals: Counter = meter.create_counter(
            "searchfuse.refusals", unit="{refusal}", description="Searches refused, by reason"
        )
        self.rate_limited: Counter = meter.create_counter(
            "searchfuse.rate_limited", unit="{response}", description="HTTP 429 answers received"
        )
        self.paced_waits: Counter = meter.create_counter(
            "searchfuse.paced_waits",
            unit="{wait}",
            description="Waits for a key's request rate before sending",
        )
        self.cache_hits: Counter = meter.create_counter(
            "searchfuse.cache_hits", unit="{hit}", description="Searches answered from the cache"
        )

    def idle(self) -> bool:
        """True while no SDK is configured: a span and a count would go nowhere.

        Checked on every search (two lookups), so an SDK set up later is used
        from its first search on.
        """
        return (
            type(self._trace.get_tracer_provider()).__name__ in _IDLE_PROVIDERS
            and type(self._metrics.get_meter_provider()).__name__ in _IDLE_PROVIDERS
        )


#: The API's own providers: what it hands out until an application sets an SDK's.
_IDLE_PROVIDERS = frozenset(
    {"ProxyTracerProvider", "NoOpTracerProvider", "_ProxyMeterProvider", "NoOpMeterProvider"}
)
_lock = threading.Lock()
# None: not looked for yet; False: opentelemetry-api is not installed.
_instruments: _Instruments | bool | None = None


def _get() -> _Instruments | None:
    global _instruments
    if _instruments is None:
        with _lock:
            if _instruments is None:
                try:
                    _instruments = _Instruments()
                except ImportError:
                    _instruments = False
    return _instruments if isinstance(_instruments, _Instruments) else None


def _reset_for_tests() -> None:
    """Look for opentelemetry again on the next call (tests swap providers)."""
    global _instruments
    with _lock:
        _instruments = None


#: Set on a refusal once counted, so the guard does not count the router's again.
_COUNTED = "_searchfuse_counted"


def _mark(refusal: BaseException) -> None:
    # An exception class with __slots__ cannot be marked: count it twice, never crash.
    with contextlib.suppress(AttributeError):
        setattr(refusal, _COUNTED, True)


class SearchSpan:
    """What the router learns about one search, written onto its span when it ends."""

    def __init__(self, span: Span | None) -> None:
        self.span = span
        self.attributes: dict[str, str | int | float] = {}

    def served(self, result: Mapping[str, Any]) -> None:
        """Record who served `result` (Tavily's JSON with searchfuse's `searchfuse` entry)."""
        if self.span is None:
            return  # telemetry is off: nobody reads the attributes
        meta = result.get("searchfuse")
        if isinstance(meta, Mapping):
            if isinstance(meta.get("served_by"), str):
                self.attributes["searchfuse.served_by"] = meta["served_by"]
            if isinstance(meta.get("key"), str):
                self.attributes["searchfuse.key"] = meta["key"]
        usage = result.get("usage")
        credits = usage.get("credits") if isinstance(usage, Mapping) else None
        if isinstance(credits, int | float) and not isinstance(credits, bool):
            self.attributes["searchfuse.credits"] = credits


class _Unrecorded(contextlib.AbstractContextManager[SearchSpan]):
    """The span of a search when telemetry is off: nothing to build or record."""

    def __init__(self) -> None:
        self.span = SearchSpan(None)

    def __enter__(self) -> SearchSpan:
        return self.span

    def __exit__(self, *exc_info: object) -> None:
        return None


_UNRECORDED = _Unrecorded()


def search_span(operation: str = "search") -> contextlib.AbstractContextManager[SearchSpan]:
    """One span (and one `searchfuse.searches` count) around one router search.

    The block calls `SearchSpan.served` with the result; a refusal or
    failure raised from the block is recorded as the outcome and re-raised.
    """
    instruments = _get()
    if instruments is None or instruments.idle():
        return _UNRECORDED
    return _recorded_span(instruments, operation)


@contextmanager
def _recorded_span(instruments: _Instruments, operation: str) -> Iterator[SearchSpan]:
    with instruments.tracer.start_as_current_span(
        f"searchfuse.{operation}", record_exception=False, set_status_on_exception=False
    ) as span:
        recorder = SearchSpan(span)
        outcome = "served"
        refusal: SearchRefused | None = None
        try:
            yield recorder
        except SearchRefused as exc:
            outcome = "refused"
            refusal = exc
            recorder.attributes["searchfuse.refusal.reason"] = exc.reason
            if exc.retry_after is not None:
                recorder.attributes["searchfuse.retry_after"] = float(exc.retry_after)
            raise
        except SearchFailed as exc:
            outcome = "failed"
            if exc.status_code is not None:
                recorder.attributes["http.response.status_code"] = exc.status_code
            raise
        except BaseException as exc:
            outcome = "failed"
            recorder.attributes["error.type"] = type(exc).__qualname__
            raise
        finally:
            recorder.attributes["searchfuse.outcome"] = outcome
            span.set_attributes(recorder.attributes)
            if outcome == "failed":
                from opentelemetry.trace import Status, StatusCode

                span.set_status(Status(StatusCode.ERROR))
            attributes = {"searchfuse.operation": operation, "searchfuse.outcome": outcome}
            instruments.searches.add(1, attributes)
            if refusal is not None:
                refused(refusal)


def _counted(refusal: BaseException) -> bool:
    """Whether `refusal` (or the refusal it was raised from) is already counted."""
    seen: BaseException | None = refusal
    for _ in range(4):
        if seen is None:
            return False
        if getattr(seen, _COUNTED, False):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def refused(refusal: SearchRefused) -> None:
    """Count a refusal, once: a router search's refusal was counted by its span already."""
    instruments = _get()
    if instruments is not None and not _counted(refusal):
        instruments.refusals.add(1, {"searchfuse.refusal.reason": refusal.reason})
        _mark(refusal)


def rate_limited(key: str | None = None) -> None:
    """Count one HTTP 429 answer; `key` is the masked key it came for, if known."""
    instruments = _get()
    if instruments is not None:
        instruments.rate_limited.add(1, {"searchfuse.key": key} if key else {})


def paced_wait(seconds: float) -> None:
    """Count one wait for a key's request rate (the wait's length goes on the current span)."""
    instruments = _get()
    if instruments is not None:
        instruments.paced_waits.add(1)
        from opentelemetry import trace

        trace.get_current_span().add_event(
            "searchfuse.paced_wait", {"searchfuse.wait_seconds": float(seconds)}
        )


def cache_hit() -> None:
    """Count one search answered from the guard's cache."""
    instruments = _get()
    if instruments is not None:
        instruments.cache_hits.add(1)


@contextmanager
def request_span(method: str, route: str) -> Iterator[dict[str, str | int | float]]:
    """One server span `searchfuse.gateway` around one HTTP request the gateway serves.

    The block fills the dict it gets (`http.response.status_code`,
    `searchfuse.served_by`, `searchfuse.key` masked, `searchfuse.client` by
    name); the router's own search span is its child. Nothing is recorded
    while no SDK is configured.
    """
    attributes: dict[str, str | int | float] = {
        "http.request.method": method,
        "http.route": route,
    }
    instruments = _get()
    if instruments is None or instruments.idle():
        yield attributes
        return
    from opentelemetry.trace import SpanKind, Status, StatusCode

    with instruments.tracer.start_as_current_span(
        "searchfuse.gateway",
        kind=SpanKind.SERVER,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield attributes
        finally:
            span.set_attributes(attributes)
            status = attributes.get("http.response.status_code")
            if not isinstance(status, int) or status >= 500:
                span.set_status(Status(StatusCode.ERROR))
