"""Every call is bounded and told the truth: deadlines, fail-over, breaker, /usage outages."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from searchfuse import (
    BadRequest,
    ConfigError,
    NoKeyAvailable,
    RateLimited,
    Router,
    SearchFuseError,
)
from searchfuse.cli import main
from searchfuse.router.state import MemoryStore, State
from searchfuse.testing import FakeClock

from ..conftest import leaks_in
from .rawserver import RawServer, Request, drip, respond, search_json, usage_json

KEYS = [f"tvly-dev-test000{i}" for i in range(1, 5)]
SEARCH = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2000\r\n\r\n"
    + b" " * 2000
)


def _usage_ok(conn: socket.socket, request: Request) -> bool:
    respond(conn, 200, usage_json())
    return True


def _timed(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    start = time.monotonic()
    try:
        call()
    except BaseException as exc:  # returned for the test to judge
        return time.monotonic() - start, exc
    return time.monotonic() - start, None


# -- deadlines: drip, silence, reset ---------------------------------------------------


@pytest.mark.parametrize("where", ["body", "head"])
def test_a_dripping_server_cannot_hold_a_call_past_its_deadline(where: str) -> None:
    stop = threading.Event()

    def behave(conn: socket.socket, request: Request) -> bool:
        if request.path == "/usage":
            return _usage_ok(conn, request)
        if where == "body":
            conn.sendall(SEARCH[: SEARCH.index(b"\r\n\r\n") + 4])
            drip(conn, b" " * 2000, 0.02, stop)
        else:
            drip(conn, SEARCH, 0.02, stop)
        return False

    with RawServer(behave) as server:
        router = Router(KEYS, base_url=server.url, timeout=1.0, deadline=0.4)
        took, exc = _timed(lambda: router.search("q"))
        stop.set()
    # Without the deadline the drip (a byte every 20 ms, under the 1 s read
    # timeout) would hold the call for over 40 s; the bound leaves a loaded
    # machine seconds of margin.
    assert took < 3.0, took
    assert isinstance(exc, NoKeyAvailable)
    assert exc.diagnosis is not None and exc.diagnosis.verdict == "upstream"
    assert "deadline" in str(exc.diagnosis.advice)


def test_a_never_answering_server_is_bounded_sync_and_async() -> None:
    stop = threading.Event()

    def behave(conn: socket.socket, request: Request) -> bool:
        stop.wait(30)  # read the request, never answer
        return False

    with RawServer(behave) as server:
        router = Router(KEYS, base_url=server.url, timeout=20.0, deadline=0.3)
        # Without the deadline each call would wait out the 20 s read timeout;
        # the bound leaves a loaded machine seconds of margin.
        took, exc = _timed(lambda: router.search("q"))
        assert took < 3.0 and isinstance(exc, NoKeyAvailable), (took, exc)
        took, exc = _timed(lambda: asyncio.run(router.asearch("q")))
        assert took < 3.0 and isinstance(exc, SearchFuseError), (took, exc)
        stop.set()
        # /usage was asked first and bounded to a share of the deadline: the whole
        # call, usage included, stayed within it.
        assert server.count("/search") <= 2


def test_a_reset_mid_body_is_an_upstream_failure_not_a_crash() -> None:
    def behave(conn: socket.socket, request: Request) -> bool:
        if request.path == "/usage":
            return _usage_ok(conn, request)
        conn.sendall(SEARCH[:200])
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # RST
        return False

    with RawServer(behave) as server:
        router = Router(KEYS[:2], base_url=server.url, clock=FakeClock())
        with pytest.raises(NoKeyAvailable) as info:
            router.search("q")
    assert info.value.diagnosis is not None
    assert info.value.diagnosis.verdict == "upstream"
    assert "healthy" not in info.value.message


# -- misdirected base URL: redirects and 404 -------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 307, 404, 405])
def test_a_redirect_or_404_from_search_is_a_configuration_problem(status: int) -> None:
    def behave(conn: socket.socket, request: Request) -> bool:
        if request.path == "/usage":
            respond(conn, status, b"", {"Location": "https://elsewhere.example/"})
            return True
        respond(conn, status, b"<html>not here</html>", {"Location": "https://elsewhere.example/"})
        return True

    with RawServer(behave) as server:
        url = server.url
        router = Router(KEYS, base_url=url, clock=FakeClock())
        with pytest.raises(ConfigError) as info:
            router.search("q")
        assert server.count("/search") == 1  # no fail-over: no key is at fault
    # The message names the server's address, whose random port may contain "400".
    message = str(info.value).replace(url, "<server>")
    assert "base_url" in message and f"<server> answered {status}" in message
    assert "400" not in message
    assert not isinstance(info.value, BadRequest)
    assert all(s.state == "available" and s.last_error is None for s in router.status())


# -- /usage outage: search anyway, never "healthy" -------------------------------------


@pytest.mark.parametrize("usage_status", [500, 404, 302])
def test_a_usage_outage_does_not_block_the_search(usage_status: int) -> None:
    def behave(conn: socket.socket, request: Request) -> bool:
        if request.path == "/usage":
            respond(conn, usage_status, {"detail": {"error": "usage down"}})
        else:
            respond(conn, 200, search_json())
        return True

    with RawServer(behave) as server:
        router = Router(KEYS[:1], base_url=server.url, clock=FakeClock())
        assert router.search("q")["searchfuse"]["key"] == "tvly-dev-…0001"
        two = Router(KEYS[:2], base_url=server.url, clock=FakeClock())
        assert two.search("q")["searchfuse"]["key"] == "tvly-dev-…0001"  # the best key serves
        assert server.count("/search") == 2


def test_usage_and_search_both_failing_is_not_called_healthy() -> None:
    def behave(conn: socket.socket, request: Request) -> bool:
        respond(conn, 500, {"detail": {"error": "down"}})
        return True

    with RawServer(behave) as server:
        router = Router(KEYS, base_url=server.url, clock=FakeClock())
        with pytest.raises(NoKeyAvailable) as info:
            router.search("q")
    assert info.value.diagnosis is not None
    assert info.value.diagnosis.verdict == "upstream"
    assert "Verdict: healthy" not in info.value.message


# -- 5xx storm: bounded fail-over, router-wide breaker ---------------------------------


def test_a_5xx_storm_is_bounded_per_call_and_opens_the_breaker() -> None:
    keys = [f"tvly-dev-test{i:04d}" for i in range(40)]
    searches: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/usage":
            return httpx.Response(200, json=usage_json())
        searches.append(request.headers["authorization"])
        return httpx.Response(503, json={"detail": {"error": "overloaded"}})

    clock = FakeClock()
    served: list[str] = []

    def fallback(query: str, **params: Any) -> dict[str, Any]:
        served.append(query)
        return {"results": []}

    router = Router(keys, clock=clock, transport=httpx.MockTransport(handler))
    with pytest.raises(NoKeyAvailable):
        router.search("one")
    assert len(searches) == 3  # max_keys_per_call
    with pytest.raises(NoKeyAvailable):
        router.search("two")
    assert len(searches) == 6  # six failures in a row: the breaker opens
    with pytest.raises(NoKeyAvailable) as info:
        router.search("three")
    assert len(searches) == 6  # refused without a request
    assert info.value.diagnosis is not None and info.value.diagnosis.verdict == "upstream"
    assert info.value.retry_after is not None and info.value.retry_after > 0
    with_fallback = Router(
        keys, clock=clock, transport=httpx.MockTransport(handler), fallback=fallback
    )
    for _ in range(3):
        with_fallback.search("q")
    assert served  # Tavily failing: the fallback serves
    clock.advance(61)
    with pytest.raises(NoKeyAvailable):
        router.search("four")  # half open: one key tried, the breaker opens again
    assert len(searches) <= 6 + 3 + 3 + 1


# -- on_429="retry": 10 s per call in total --------------------------------------------


@pytest.mark.parametrize("retry_after", ["8", "60", None])
def test_retry_waits_stay_within_ten_seconds_per_call(retry_after: str | None) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/usage":
            return httpx.Response(200, json=usage_json())
        headers = {"Retry-After": retry_after} if retry_after else {}
        return httpx.Response(429, headers=headers, json={"detail": {"error": "slow down"}})

    waits: list[float] = []
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)

    router = Router(
        KEYS[:1], clock=clock, sleep=sleep, on_429="retry", transport=httpx.MockTransport(handler)
    )
    with pytest.raises(RateLimited):
        router.search("q")
    assert sum(waits) <= 10.0


# -- a served result is never lost ---------------------------------------------------


class FlakyStore(MemoryStore):
    """A store whose writes fail while ``broken`` is set (disk full, lock timeout...)."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = False

    def update(self, now: float, change: Callable[[State], Any]) -> Any:
        if self.broken:
            raise OSError(28, "No space left on device")
        return super().update(now, change)


def test_a_failed_state_write_after_a_served_search_keeps_the_result() -> None:
    store = FlakyStore()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/usage":
            return httpx.Response(200, json=usage_json())
        # The store fails while Tavily serves the second search (and charges for it).
        store.broken = b"served while" in request.content
        return httpx.Response(200, json=search_json())

    clock = FakeClock()
    router = Router(KEYS[:1], state=store, clock=clock, transport=httpx.MockTransport(handler))
    router.search("first")
    result = router.search("served while the store is down")
    assert result["results"] and result["searchfuse"]["served_by"] == "tavily"
    store.broken = False  # the disk has room again
    router.search("third")
    (record,) = router.status()
    assert record.searches == 3  # the failed write was retried with the next answer


# -- query edge cases --------------------------------------------------------------------


def test_a_lone_surrogate_is_a_bad_request_and_nothing_is_sent(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=usage_json())

    router = Router(KEYS[:1], transport=httpx.MockTransport(handler))
    with pytest.raises(BadRequest, match="surrogate"):
        router.search("weather \ud83d")
    with pytest.raises(BadRequest, match="surrogate"):
        asyncio.run(router.asearch("ok", include_domains=["\udc00.example"]))
    assert not sent
    monkeypatch.setenv("TAVILY_API_KEYS", KEYS[0])
    assert main(["search", "weather \ud83d"]) in (1, 2)
    err = capsys.readouterr().err
    assert "surrogate" in err and "Traceback" not in err


# -- secrets in tracebacks -----------------------------------------------------------------


def test_no_key_in_any_traceback_even_for_prefix_sharing_keys() -> None:
    keys = ["tvly-dev-test0001", "tvly-dev-test0001tail9", "tvly-dev-test0001tail9more"]

    def handler(request: httpx.Request) -> httpx.Response:
        key = request.headers["authorization"].removeprefix("Bearer ")
        if request.url.path == "/usage":
            return httpx.Response(200, json=usage_json())
        raise httpx.ConnectError(f"cannot reach Tavily with Bearer {key} ({key})")

    router = Router(keys, clock=FakeClock(), transport=httpx.MockTransport(handler))
    with pytest.raises(NoKeyAvailable) as info:
        router.search("q")
    text = "".join(traceback.format_exception(info.value))
    text += str(info.value.diagnosis) + repr(router) + str(router.status())
    for key in keys:
        assert key not in text
    assert not leaks_in(text), leaks_in(text)


def test_a_404_from_the_callers_own_function_is_its_own_error_not_our_base_url() -> None:
    router = Router(KEYS, clock=FakeClock())
    calls: list[str] = []

    def search_elsewhere(key: str) -> None:
        calls.append(key)
        request = httpx.Request("POST", "https://proxy.example/search")
        raise httpx.HTTPStatusError(
            "not found", request=request, response=httpx.Response(404, request=request)
        )

    with pytest.raises(httpx.HTTPStatusError):
        router.call(search_elsewhere)
    assert len(calls) == 1  # no fail-over, no key blamed
    assert all(s.state == "available" for s in router.status())
