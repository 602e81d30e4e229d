"""What every simulated search API shares: faults, records, and the ways to serve it.

A simulator answers HTTP requests the way one provider does. This base holds
what does not depend on which provider: the fault API (`fail_next`,
`slow_next`, `clear_faults`), the record of every request (keys as
fingerprints only), and serving in-process (an httpx transport, pytest-httpx)
or on loopback. Each provider's simulator says how a request carries its key,
what its error bodies look like and how it answers (`_key_of`, `_error`,
`_process`), from that provider's own documentation, never from the client's
constants.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

import httpx

from searchfuse import _clock
from searchfuse._secrets import fingerprint

__all__ = ["Fault", "RecordedRequest", "Simulator"]

Json = dict[str, Any]

#: Retry-After of an injected 429 when the test does not choose one.
DEFAULT_FAULT_RETRY_AFTER = 60


@dataclass(frozen=True)
class RecordedRequest:
    """One request a simulator received, and how it answered.

    `key_fingerprint` is `searchfuse._secrets.fingerprint` of the key the
    request carried (`None` if there was none): the raw key is never stored.
    `body` is the parsed JSON object with any `api_key` field removed (`None`
    for a GET or a body that is not a JSON object); `params` the query
    string's parameters (`None` without one). `status` is `None` when the
    answer was an exception (`error` then names it: `"ReadTimeout"`,
    `"ConnectError"`). `credits` is what the request cost in the provider's
    unit; `injected` says whether a fault answered it.
    """

    method: str
    path: str
    key_fingerprint: str | None
    body: Json | None
    time: float
    status: int | None
    credits: float = 0
    error: str | None = None
    injected: bool = False
    params: dict[str, str] | None = None

    @property
    def query(self) -> str | None:
        """The search query, wherever the provider's request carries it (`query`, `q`)."""
        for source in (self.body, self.params):
            if source is None:
                continue
            for name in ("query", "q"):
                value = source.get(name)
                if isinstance(value, str):
                    return value
        return None


FaultKind = Literal["status", "timeout", "connect", "slow"]


@dataclass
class Fault:
    """A planned misbehaviour for the next matching requests (see
    [`FakeTavily.fail_next`][searchfuse.testing.FakeTavily.fail_next])."""

    kind: FaultKind
    remaining: int | None
    key_fingerprint: str | None = None
    path: str | None = None
    status: int = 0
    detail: str | None = None
    retry_after: float | str | None = None
    delay: float = 0.0

    def matches(self, key_fingerprint: str | None, path: str) -> bool:
        """Whether this fault applies to a request with this key and path."""
        if self.remaining is not None and self.remaining <= 0:
            return False
        if self.key_fingerprint is not None and self.key_fingerprint != key_fingerprint:
            return False
        return self.path is None or self.path == path


@dataclass
class _Answer:
    """What the model decided: a response or an exception, and how long to take."""

    response: httpx.Response | None = None
    error: httpx.TransportError | None = None
    delay: float = 0.0


class _CallbackRegistry(Protocol):
    """The part of pytest-httpx's `HTTPXMock` that `mount` uses."""

    def add_callback(self, callback: Callable[[httpx.Request], Any], **matchers: Any) -> None:
        """Answer matching requests with `callback`."""


class Simulator:
    """The part of a simulated search API that does not depend on the provider.

    Subclasses set `default_url` (where the real API lives: `mount`'s
    default), `search_path` (what `searches` counts) and `reasons`
    (reason phrases for statuses HTTP does not name), and implement
    `_key_of`, `_error` and `_process`.
    """

    default_url: ClassVar[str] = "https://api.example.com"
    search_path: ClassVar[str] = "/search"
    reasons: ClassVar[Mapping[int, str]] = {}

    def __init__(
        self,
        *,
        clock: Callable[[], float] | None = None,
        sleeper: Callable[[float], None] | None = None,
    ) -> None:
        self._clock: Callable[[], float] = clock if clock is not None else _clock.now
        if sleeper is None:
            advance = getattr(clock, "advance", None)
            sleeper = advance if callable(advance) else _clock.sleep
        self._sleeper: Callable[[float], None] = sleeper
        self._lock = threading.RLock()
        self._faults: list[Fault] = []
        self._records: list[RecordedRequest] = []
        self._request_number = 0

    # -- what each provider says ----------------------------------------------------

    def _key_of(self, request: httpx.Request) -> str | None:
        """The key `request` carries in this provider's auth scheme (`None`: none)."""
        raise NotImplementedError

    def _error(
        self, status: int, detail: str | None = None, retry_after: float | str | None = None
    ) -> httpx.Response:
        """An error answer in this provider's shape."""
        raise NotImplementedError

    def _process(
        self, request: httpx.Request, key: str | None, raw: bytes, now: float
    ) -> tuple[httpx.Response, float]:
        """Route, authenticate, rate-limit and serve (under the lock). Returns the
        response and what it cost."""
        raise NotImplementedError

    def _reason(self, status: int) -> str:
        """The reason phrase for `status`."""
        return self.reasons.get(status) or httpx.codes.get_reason_phrase(status)

    # -- faults -------------------------------------------------------------------

    def fail_next(
        self,
        fault: int | Literal["timeout", "connect"],
        times: int | None = 1,
        *,
        key: str | None = None,
        path: str | None = None,
        retry_after: float | str | None = None,
        detail: str | None = None,
    ) -> None:
        """Make the next `times` matching requests fail.

        `times=None` makes every matching request fail until
        [`clear_faults`][searchfuse.testing.FakeTavily.clear_faults].

        `fault` is an HTTP status (503, 500, 401, 403, 432, 429...) answered
        with the provider's error body, `"timeout"` (raises
        `httpx.ReadTimeout`; the loopback server holds the connection
        instead) or `"connect"` (raises `httpx.ConnectError`; the loopback
        server resets the connection). `key` and `path` narrow which requests
        match. `retry_after` adds a `Retry-After` header (seconds, or any
        text such as an HTTP date); a 429 gets 60 unless told otherwise.
        `detail` replaces the error text.

        A faulted request is answered before anything else: it needs no valid
        key, costs nothing and does not count towards any rate window.
        Faults are used up in the order they were added.

        Example:
            ```python
            fake.fail_next(429, retry_after=30, key="tvly-dev-test0001")
            fake.fail_next("timeout", path="/search")
            ```
        """
        if times is not None and times < 1:
            raise ValueError("times must be at least 1 (or None for every request)")
        if isinstance(fault, bool) or not isinstance(fault, int | str):
            raise TypeError(f"unknown fault {fault!r}")
        if isinstance(fault, int):
            if not 400 <= fault <= 599:
                raise ValueError(f"an injected status must be an error (4xx/5xx), got {fault}")
            if fault == 429 and retry_after is None:
                retry_after = DEFAULT_FAULT_RETRY_AFTER
            new = Fault("status", times, status=fault, detail=detail, retry_after=retry_after)
        elif fault in ("timeout", "connect"):
            new = Fault(fault, times)
        else:
            raise ValueError(f"unknown fault {fault!r}: use a status, 'timeout' or 'connect'")
        self._add_fault(new, key, path)

    def slow_next(
        self,
        seconds: float,
        times: int | None = 1,
        *,
        key: str | None = None,
        path: str | None = None,
    ) -> None:
        """Make the next `times` matching requests take `seconds` longer.

        The request is processed as usual (and charged); only the answer is
        late. In-process (transport, pytest-httpx) the wait goes through the
        sleeper, so a [`FakeClock`][searchfuse.testing.FakeClock] just advances, and an answer later
        than the client's read timeout becomes `httpx.ReadTimeout`. The
        loopback server really waits.
        """
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"a delay must be a finite, non-negative number, got {seconds!r}")
        if times is not None and times < 1:
            raise ValueError("times must be at least 1 (or None for every request)")
        self._add_fault(Fault("slow", times, delay=seconds), key, path)

    def _add_fault(self, fault: Fault, key: str | None, path: str | None) -> None:
        fault.key_fingerprint = fingerprint(key) if key is not None else None
        fault.path = path
        with self._lock:
            self._faults.append(fault)

    def clear_faults(self) -> None:
        """Forget every pending fault."""
        with self._lock:
            self._faults.clear()

    @property
    def faults(self) -> list[Fault]:
        """The faults still pending, in the order they will be used (the live objects)."""
        with self._lock:
            return list(self._faults)

    def _take_fault(self, key_fingerprint: str | None, path: str) -> Fault | None:
        for index, fault in enumerate(self._faults):
            if fault.matches(key_fingerprint, path):
                if fault.remaining is not None:
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        del self._faults[index]
                return fault
        return None

    # -- records ------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first."""
        with self._lock:
            return list(self._records)

    @property
    def searches(self) -> list[RecordedRequest]:
        """The search requests received so far."""
        return [r for r in self.requests if r.path == self.search_path]

    def requests_for(self, key: str, path: str | None = None) -> list[RecordedRequest]:
        """The requests made with `key` (optionally only those to `path`)."""
        wanted = fingerprint(key)
        return [
            r
            for r in self.requests
            if r.key_fingerprint == wanted and (path is None or r.path == path)
        ]

    def requests_by_key(self, path: str | None = None) -> dict[str, int]:
        """How many requests (optionally only to `path`) each key fingerprint made."""
        counts = Counter(
            r.key_fingerprint
            for r in self.requests
            if r.key_fingerprint is not None and (path is None or r.path == path)
        )
        return dict(counts)

    def reset_records(self) -> None:
        """Forget the recorded requests (usage, windows and faults stay as they are)."""
        with self._lock:
            self._records.clear()

    @staticmethod
    def fingerprint(key: str) -> str:
        """The fingerprint a request with `key` is recorded under."""
        return fingerprint(key)

    # -- serving ------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        """Answer one request, as the provider would, and record it. Never sleeps, no I/O.

        Raises `httpx.ReadTimeout` or `httpx.ConnectError` for injected
        timeouts and connection errors. A slow answer
        ([`slow_next`][searchfuse.testing.FakeTavily.slow_next]) is returned at once with its delay
        in `response.extensions["delay"]`, for whoever serves it to honour.
        """
        answer = self._answer(request)
        if answer.error is not None:
            raise answer.error
        assert answer.response is not None
        if answer.delay:
            answer.response.extensions["delay"] = answer.delay
        return answer.response

    def transport(self) -> httpx.MockTransport:
        """An httpx transport serving this simulator, for `httpx.Client` and `httpx.AsyncClient`.

        Example:
            ```python
            client = httpx.Client(base_url="https://api.tavily.com", transport=fake.transport())
            ```
        """
        return httpx.MockTransport(self._serve_in_process)

    def mount(self, httpx_mock: _CallbackRegistry, base_url: str | None = None) -> None:
        """Serve this simulator through pytest-httpx's `httpx_mock` for every URL under
        `base_url` (default: the provider's public address).

        The callback is reusable and optional, so a test that makes no request
        does not fail for an unused response.
        """
        base = (base_url or self.default_url).rstrip("/")
        pattern = re.compile(re.escape(base) + r"(?:[/?#].*)?$")
        httpx_mock.add_callback(
            self._serve_in_process, url=pattern, is_reusable=True, is_optional=True
        )

    @contextmanager
    def serve(self, *, port: int = 0, timeout_hold: float = 30.0) -> Iterator[str]:
        """Serve this simulator over real HTTP on 127.0.0.1; yields the base URL.

        `port=0` picks a free port. A `"timeout"` fault holds the connection
        open for `timeout_hold` seconds without answering (or until the
        server stops); slow answers really wait. Leaving the block stops the
        server promptly, waking any held connection.

        Example:
            ```python
            with fake.serve() as url:
                httpx.get(f"{url}/usage", headers={"Authorization": "Bearer tvly-dev-test0001"})
            ```
        """
        from searchfuse.testing._server import LoopbackServer

        with LoopbackServer(self, port=port, timeout_hold=timeout_hold) as server:
            yield server.url

    def _serve_in_process(self, request: httpx.Request) -> httpx.Response:
        """Answer `request` in-process, turning delays into sleeper time or read timeouts."""
        answer = self._answer(request)
        timeout = _read_timeout(request)
        if isinstance(answer.error, httpx.TimeoutException):
            # A real timeout takes the client's whole timeout; let the clock show it.
            if timeout is not None:
                self._sleeper(timeout)
            raise answer.error
        if answer.error is not None:
            raise answer.error
        assert answer.response is not None
        if answer.delay:
            if timeout is not None and answer.delay >= timeout:
                self._sleeper(timeout)
                raise httpx.ReadTimeout(
                    f"simulated: the answer took {answer.delay:g} s, longer than the "
                    f"client's {timeout:g} s read timeout",
                    request=request,
                )
            self._sleeper(answer.delay)
        return answer.response

    # -- the model ----------------------------------------------------------------

    def _answer(self, request: httpx.Request) -> _Answer:
        """Decide the answer to `request` and record it. Never waits."""
        key = self._key_of(request)
        key_fp = fingerprint(key) if key else None
        path = request.url.path
        raw = request.read()
        params = dict(request.url.params) or None
        with self._lock:
            now = self._clock()
            record = _Recorder(
                self._records, request.method.upper(), path, key_fp, _body_for_record(raw), now
            )
            record.params = params
            fault = self._take_fault(key_fp, path)
            delay = 0.0
            if fault is not None and fault.kind != "slow":
                return self._answer_fault(fault, request, record)
            if fault is not None:
                delay = fault.delay
            response, credits = self._process(request, key, raw, now)
            record(response.status_code, credits=credits, injected=fault is not None)
            return _Answer(response=response, delay=delay)

    def _answer_fault(self, fault: Fault, request: httpx.Request, record: _Recorder) -> _Answer:
        if fault.kind == "timeout":
            record(None, error="ReadTimeout", injected=True)
            return _Answer(error=httpx.ReadTimeout("simulated read timeout", request=request))
        if fault.kind == "connect":
            record(None, error="ConnectError", injected=True)
            return _Answer(error=httpx.ConnectError("simulated connection error", request=request))
        response = self._error(fault.status, fault.detail, fault.retry_after)
        record(fault.status, injected=True)
        return _Answer(response=response)


# --- helpers -----------------------------------------------------------------------


class _Recorder:
    """Appends one [`RecordedRequest`][searchfuse.testing.RecordedRequest] once the answer is
    known."""

    def __init__(
        self,
        records: list[RecordedRequest],
        method: str,
        path: str,
        key_fingerprint: str | None,
        body: Json | None,
        time: float,
    ) -> None:
        self._records = records
        self._fields = (method, path, key_fingerprint, body, time)
        self.params: dict[str, str] | None = None

    def __call__(
        self,
        status: int | None,
        *,
        credits: float = 0,
        error: str | None = None,
        injected: bool = False,
    ) -> None:
        method, path, key_fp, body, time = self._fields
        self._records.append(
            RecordedRequest(
                method, path, key_fp, body, time, status, credits, error, injected, self.params
            )
        )


def retry_after_header(value: float | str) -> str:
    """A `Retry-After` value as a header writes it (whole seconds without a point)."""
    if isinstance(value, str):
        return value
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def sliding_window(window: deque[float], allowed: int, span: float, now: float) -> float | None:
    """Count a request in a sliding window of `span` seconds; `None` when it fits,
    else the seconds until it would (the request is then not counted)."""
    while window and window[0] <= now - span:
        window.popleft()
    if len(window) < allowed:
        window.append(now)
        return None
    return window[0] + span - now


def _read_timeout(request: httpx.Request) -> float | None:
    """The client's read timeout for `request`, if it set one."""
    timeouts = request.extensions.get("timeout")
    if isinstance(timeouts, dict):
        value = timeouts.get("read")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def _body_for_record(raw: bytes) -> Json | None:
    """The body as recorded: a JSON object without any key in it, else `None`."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    data.pop("api_key", None)
    return data


def json_object(raw: bytes) -> Json | None:
    """The body as a JSON object, or `None` when it is not one."""
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
