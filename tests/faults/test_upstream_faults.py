"""A misbehaving upstream: bounded reads, figures checked, one pool per event loop."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from searchfuse import ConfigError, NoKeyAvailable, Router, SearchFailed
from searchfuse.cli import main
from searchfuse.router.tavily import MAX_ERROR_TEXT

from .rawserver import RawServer, Request, respond, search_json, usage_json

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]


def _strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


# -- base URL ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "api.tavily.com",
        "localhost:8080",
        "ftp://api.tavily.com",
        "http://127.0.0.1:99999",
        "http://127.0.0.1:port",
        "http://127.0.0.1:0",
        "http:///search",
        "https://user:secret@api.tavily.com",
        "https://api.tavily .com",
        "https://api.tavily.com/?x=1",
    ],
)
def test_a_base_url_typo_is_a_config_error_at_construction(url: str, tmp_path: Path) -> None:
    state = tmp_path / "state" / "quota.json"
    with pytest.raises(ConfigError) as info:
        Router(KEYS, base_url=url, state=state)
    assert info.value.field == "base_url"
    assert "https://api.tavily.com" in info.value.fix
    assert not state.exists()  # no key was cooled for a typo


def test_tavily_base_url_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVILY_BASE_URL", "htp://api.tavily.com")
    with pytest.raises(ConfigError) as info:
        Router(KEYS)
    assert info.value.field == "TAVILY_BASE_URL"
    assert info.value.source == "environment"
    monkeypatch.setenv("TAVILY_BASE_URL", "http://127.0.0.1:8080/proxy/")
    assert Router(KEYS).http.base_url == "http://127.0.0.1:8080/proxy"


def test_the_cli_reports_a_bad_base_url_as_a_config_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("TAVILY_API_KEYS", ",".join(KEYS))
    monkeypatch.setenv("TAVILY_BASE_URL", "ftp://x")
    monkeypatch.chdir(tmp_path)
    assert main(["search", "q"]) == 2
    assert "TAVILY_BASE_URL" in capsys.readouterr().err


# -- server figures ------------------------------------------------------------------

BOGUS = ["-1000000", "NaN", "Infinity", "1e309", '"12"', "true", "1e15", "[]", "{}"]


@pytest.mark.parametrize("bogus", BOGUS)
def test_bogus_usage_figures_are_not_stored(
    bogus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = (
        '{"key": {"usage": %s, "limit": %s, "search_usage": %s},'
        ' "account": {"current_plan": "x", "plan_usage": %s, "plan_limit": %s}}'
    ) % ((bogus,) * 5)
    search = '{"query": "q", "results": [], "usage": {"credits": ' + bogus + "}}"

    def behave(conn: socket.socket, request: Request) -> None:
        if request.path == "/usage":
            respond(conn, 200, usage.encode(), {"Content-Type": "application/json"})
        else:
            respond(conn, 200, search.encode(), {"Content-Type": "application/json"})

    state = tmp_path / "state" / "quota.json"
    with RawServer(behave) as server:
        router = Router(KEYS[:1], base_url=server.url, state=state)
        result = router.search("q")
        assert result["query"] == "q"
        (record,) = router.status()
        for value in (record.key_usage, record.key_limit, record.plan_usage, record.plan_limit):
            assert value is None
        assert record.local_credits == 1.0  # the depth's price, not the server's figure
        _strict_json(json.dumps([r.to_dict() for r in router.status()], allow_nan=False))
        _strict_json(state.read_text())
        monkeypatch.setenv("TAVILY_API_KEYS", KEYS[0])
        monkeypatch.setenv("TAVILY_BASE_URL", server.url)
        assert main(["status", "--json", "--state", str(state)]) == 0
        _strict_json(capsys.readouterr().out)
        assert main(["status", "--state", str(state)]) == 0


# -- bounded reads ------------------------------------------------------------------


def test_a_huge_answer_is_refused_without_reading_it() -> None:
    sent = {"bytes": 0}

    def behave(conn: socket.socket, request: Request) -> bool:
        if request.path == "/usage":
            respond(conn, 200, usage_json())
            return True
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 300000000\r\n\r\n")
        block = b"x" * 65536
        try:
            while sent["bytes"] < 300_000_000:
                conn.sendall(block)
                sent["bytes"] += len(block)
        except OSError:
            pass
        return False

    with RawServer(behave) as server:
        router = Router(KEYS[:1], base_url=server.url)
        with pytest.raises(SearchFailed, match="larger than 16 MB"):
            router.search("q")
    assert sent["bytes"] < 64 * 1024 * 1024


def test_a_huge_error_text_is_cut_before_it_is_stored(tmp_path: Path) -> None:
    detail = "no " * 700_000  # a 2 MB 401 detail

    def behave(conn: socket.socket, request: Request) -> None:
        if request.path == "/usage":
            respond(conn, 200, usage_json())
        else:
            respond(conn, 401, {"detail": {"error": detail}})

    state = tmp_path / "quota.json"
    with RawServer(behave) as server:
        router = Router(KEYS, base_url=server.url, state=state)
        with pytest.raises(NoKeyAvailable) as info:
            router.search("q")
    assert len(str(info.value)) < 4 * MAX_ERROR_TEXT + 2000
    for record in router.status():
        assert record.last_error is not None and len(record.last_error) <= MAX_ERROR_TEXT + 10
    assert state.stat().st_size < 20_000


# -- connection pools ------------------------------------------------------------------


def test_one_router_serves_two_event_loops_against_a_keep_alive_server() -> None:
    def behave(conn: socket.socket, request: Request) -> None:
        body = usage_json() if request.path == "/usage" else search_json()
        respond(conn, 200, body)  # keep-alive: the connection stays open

    with RawServer(behave) as server:
        router = Router(KEYS[:1], base_url=server.url)
        for _ in range(3):
            result = asyncio.run(router.asearch("q"))
            assert result["results"]
        assert server.count("/search") == 3


def test_fifty_threads_share_one_sync_client(monkeypatch: pytest.MonkeyPatch) -> None:
    created = []
    original = httpx.Client.__init__

    def counting(self: httpx.Client, *args: Any, **kwargs: Any) -> None:
        created.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(httpx.Client, "__init__", counting)
    start = threading.Barrier(50)

    def behave(conn: socket.socket, request: Request) -> None:
        respond(conn, 200, usage_json() if request.path == "/usage" else search_json())

    with RawServer(behave) as server:
        router = Router(KEYS, base_url=server.url)
        errors: list[BaseException] = []

        def one() -> None:
            start.wait()
            try:
                router.search("q")
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=one) for _ in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert not errors
    assert len(created) == 1


# -- Retry-After floor and duration grammar -------------------------------------------


@pytest.mark.parametrize("value", ["0", "0.01", "0.5"])
def test_retry_after_zero_keeps_the_hold_and_the_fuse_on(value: str) -> None:
    from searchfuse import CooldownActive, RateLimited, guard, turn
    from searchfuse.testing import FakeClock

    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path == "/usage":
            return httpx.Response(200, json=usage_json())
        return httpx.Response(429, headers={"Retry-After": value}, json={"detail": {"error": "x"}})

    clock = FakeClock()
    router = Router(KEYS, clock=clock, transport=httpx.MockTransport(handler))
    with pytest.raises(RateLimited) as info:
        router.search("q")
    assert info.value.retry_after == 1.0
    assert "1 second." in info.value.message and "1 seconds" not in info.value.message
    searches = calls.count("/search")
    with pytest.raises(CooldownActive) as held:
        router.search("q")  # the hold is on: nothing is sent
    assert calls.count("/search") == searches
    assert "1 more second" in held.value.message

    clock.advance(1.0)

    @guard(router=router, clock=clock)
    def web_search(query: str) -> dict[str, Any]:
        raise AssertionError("delegated to the router")

    with turn(), pytest.raises(RateLimited):
        web_search("again")
    with turn(), pytest.raises(CooldownActive):
        web_search("and again")  # the fuse is tripped, not switched off by "0"
