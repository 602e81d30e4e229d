"""``searchfuse mcp`` as a subprocess, spoken to by the MCP SDK's own client.

The server runs as an MCP client starts it (``python -m searchfuse mcp``),
with its keys from the environment and Tavily simulated on loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.memory import create_connected_server_and_client_session
from mcp.types import CallToolResult, TextContent

from searchfuse import (
    Budget,
    BudgetExhausted,
    CooldownActive,
    RateLimited,
    Router,
    TurnLimitReached,
)
from searchfuse.integrations.mcp import build_server
from searchfuse.testing import EXA_TEST_KEYS, TEST_KEYS, FakeClock, FakeExa, FakeTavily

K1, K2, K3, K4 = TEST_KEYS
PARAMETERS = {
    "query",
    "max_results",
    "search_depth",
    "topic",
    "time_range",
    "include_domains",
    "exclude_domains",
}
#: Every exchange with the server is bounded: a hung server fails the test, not the suite.
LIMIT = 60.0


def server_env(tavily_server: str) -> dict[str, str]:
    return {
        "TAVILY_API_KEYS": ",".join(TEST_KEYS),
        "TAVILY_BASE_URL": tavily_server,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def command(tmp_path: Path, *options: str) -> list[str]:
    state = str(tmp_path / "state" / "searchfuse.json")
    return ["-m", "searchfuse", "mcp", "--state", state, *options]


@asynccontextmanager
async def stdio_session(
    tavily_server: str, tmp_path: Path, *options: str
) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=command(tmp_path, *options),
        env=server_env(tavily_server),
        cwd=tmp_path,
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, read_timeout_seconds=timedelta(seconds=LIMIT)) as session,
    ):
        await session.initialize()
        yield session


def text(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


async def burst(session: ClientSession, queries: list[str]) -> list[CallToolResult]:
    """Overlapping calls, as a client sends the parallel tool calls of one model reply."""
    calls = [session.call_tool("tavily_search", {"query": q}) for q in queries]
    return list(await asyncio.gather(*calls))


async def test_lists_tavily_search_and_serves_one_search(
    fake_tavily: FakeTavily, tavily_server: str, tmp_path: Path
) -> None:
    async with asyncio.timeout(LIMIT), stdio_session(tavily_server, tmp_path) as session:
        listed = await session.list_tools()
        tools = {t.name: t for t in listed.tools}
        assert set(tools) == {"web_search", "tavily_search"}
        tool = tools["tavily_search"]
        assert set(tool.inputSchema["properties"]) == PARAMETERS
        assert tool.inputSchema["required"] == ["query"]

        found = await session.call_tool(
            "tavily_search",
            {"query": "python 3.13 release date", "max_results": 3, "topic": "news"},
        )
    assert not found.isError
    answer = json.loads(text(found))
    assert len(answer["results"]) == 3
    assert "searchfuse" not in answer and "usage" not in answer  # no operator data for the model
    (search,) = fake_tavily.searches
    assert search.body is not None
    assert (search.body["query"], search.body["max_results"], search.body["topic"]) == (
        "python 3.13 release date",
        3,
        "news",
    )


async def test_five_overlapping_calls_are_one_turn_one_request_four_refusals(
    fake_tavily: FakeTavily, tavily_server: str, tmp_path: Path
) -> None:
    # --min-interval 0: only overlap makes a burst here. The one search that
    # runs takes 0.5 s, so the other four arrive while it is in flight.
    fake_tavily.slow_next(0.5, path="/search")
    async with (
        asyncio.timeout(LIMIT),
        stdio_session(tavily_server, tmp_path, "--min-interval", "0") as session,
    ):
        results = await burst(session, [f"topic {i}" for i in range(5)])
        searched = [r for r in results if not r.isError]
        refused = [text(r) for r in results if r.isError]
        assert len(searched) == 1 and len(fake_tavily.searches) == 1
        assert refused == [TurnLimitReached(1).message] * 4

        # The next reply (the burst is over) may search again.
        (again,) = await burst(session, ["topic 5"])
    assert not again.isError
    assert len(fake_tavily.searches) == 2


async def test_a_429_refuses_the_next_burst_without_a_request(
    fake_tavily: FakeTavily, tavily_server: str, tmp_path: Path
) -> None:
    fake_tavily.fail_next(429, retry_after=30, path="/search")
    async with (
        asyncio.timeout(LIMIT),
        stdio_session(tavily_server, tmp_path, "--min-interval", "0") as session,
    ):
        (stopped,) = await burst(session, ["first"])
        assert stopped.isError
        assert text(stopped) == RateLimited(30).message
        assert [r.status for r in fake_tavily.searches] == [429]

        later = await burst(session, ["second", "third", "fourth"])
    assert all(r.isError for r in later)
    for result in later:
        refusal = text(result)
        assert refusal.startswith("Search refused: the search backend is cooling down")
        assert "Do not retry now" in refusal
    assert len(fake_tavily.searches) == 1  # refused locally: nothing was sent
    assert {text(r) for r in later} <= {CooldownActive(s).message for s in range(25, 31)}


# -- over streamable HTTP -------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def http_server(tavily_server: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, **server_env(tavily_server)}
    process = subprocess.Popen(
        [sys.executable, *command(tmp_path, "--http", str(port))],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + LIMIT
        while True:  # until it listens (bounded), or it died
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "searchfuse mcp --http did not listen"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def test_streamable_http_lists_and_searches(
    fake_tavily: FakeTavily, http_server: str
) -> None:
    async with (
        asyncio.timeout(LIMIT),
        streamable_http_client(http_server) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tool = {t.name: t for t in (await session.list_tools()).tools}["tavily_search"]
        found = await session.call_tool("tavily_search", {"query": "mcp streamable http"})
        refused = await session.call_tool("tavily_search", {"query": "within two seconds"})
    assert tool.name == "tavily_search"
    assert not found.isError and len(json.loads(text(found))["results"]) == 5
    # Default --min-interval 2: a call right after the previous one is the same turn.
    assert refused.isError and text(refused) == TurnLimitReached(1).message
    assert len(fake_tavily.searches) == 1


async def test_http_says_where_it_listens_and_a_client_leaving_is_no_error(
    tavily_server: str, tmp_path: Path
) -> None:
    import threading

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, *command(tmp_path, "--http", str(port))],
        cwd=tmp_path,
        env={**os.environ, **server_env(tavily_server)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    listening = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if "serving web_search and tavily_search on" in line:
                listening.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert await asyncio.to_thread(listening.wait, LIMIT), "".join(lines)
        url = f"http://127.0.0.1:{port}/mcp"
        assert f"searchfuse mcp: serving web_search and tavily_search on {url}" in "".join(lines)
        for _ in range(2):  # two clients come and go, each closing its session
            async with (
                asyncio.timeout(LIMIT),
                streamable_http_client(url) as (read_stream, write_stream, _),
                ClientSession(read_stream, write_stream) as session,
            ):
                await session.initialize()
                await session.list_tools()
        await asyncio.sleep(0.3)  # what the server logs as the sessions end
    finally:
        process.terminate()
        process.wait(timeout=10)
        reader.join(timeout=10)
    logged = "".join(lines)
    assert "Traceback" not in logged and "ERROR" not in logged, logged


def test_mcp_rejects_a_bad_port_with_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, *command(tmp_path, "--http", "70000")],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "70000 is not in 1-65535" in result.stderr
    assert "Traceback" not in result.stderr


def test_mcp_without_keys_says_so_and_writes_nothing_on_stdout(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAVILY_", "SEARCHFUSE_"))}
    result = subprocess.run(
        [sys.executable, *command(tmp_path)],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert result.stdout == ""  # stdout is the protocol channel of an MCP client
    assert "config error" in result.stderr and "TAVILY_API_KEY" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_query_refused_before_sending_leaves_the_burst_its_search(
    fake_tavily: FakeTavily, tavily_server: str, tmp_path: Path
) -> None:
    # --min-interval 600: the calls below are one burst, so one search between them.
    async with (
        asyncio.timeout(LIMIT),
        stdio_session(tavily_server, tmp_path, "--min-interval", "600") as session,
    ):
        (empty,) = await burst(session, ["   "])
        (found,) = await burst(session, ["python 3.13"])
        (refused,) = await burst(session, ["rust 2024"])
    assert empty.isError
    assert text(empty).startswith("the request was not sent")
    assert not found.isError
    assert text(refused) == TurnLimitReached(1).message
    assert [search.query for search in fake_tavily.searches] == ["python 3.13"]


def _run_mcp(tmp_path: Path, stdin: bytes, *options: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAVILY_", "SEARCHFUSE_"))}
    env["TAVILY_API_KEYS"] = ",".join(TEST_KEYS)
    return subprocess.run(
        [sys.executable, *command(tmp_path, *options)],
        input=stdin,
        capture_output=True,
        timeout=LIMIT,
        cwd=tmp_path,
        env=env,
    )


def test_garbage_on_stdio_is_rejected_and_the_session_goes_on(tmp_path: Path) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    garbage = b'garbage\n{"jsonrpc":"2.0"}\n\x00\xff\n'
    result = _run_mcp(tmp_path, garbage + json.dumps(initialize).encode() + b"\n" + garbage)
    assert result.returncode == 0
    err = result.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and "ExceptionGroup" not in err
    assert err.count("rejected a message that is not JSON-RPC") == 6
    # The one good message was answered, and nothing else reached stdout.
    (answer,) = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "searchfuse"


def test_garbage_alone_ends_cleanly_at_eof(tmp_path: Path) -> None:
    result = _run_mcp(tmp_path, b'garbage\n{"jsonrpc":"2.0"}\n\x00\xff\n')
    assert result.returncode == 0
    assert result.stdout == b""
    assert b"Traceback" not in result.stderr


def test_http_on_a_busy_port_or_a_bad_host_is_a_usage_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _run_mcp(tmp_path, b"", "--http", str(port))
    err = result.stderr.decode()
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in err
    assert "Traceback" not in err and "uvicorn" not in err.lower()
    result = _run_mcp(tmp_path, b"", "--http", "8765", "--host", "no-such-host.invalid")
    err = result.stderr.decode()
    assert result.returncode == 2
    assert "cannot listen on host 'no-such-host.invalid'" in err
    assert "Traceback" not in err


async def test_a_configured_key_echoed_in_a_result_reaches_the_model_masked(
    fake_tavily: FakeTavily, tavily_server: str, tmp_path: Path
) -> None:
    async with asyncio.timeout(LIMIT), stdio_session(tavily_server, tmp_path) as session:
        found = await session.call_tool("tavily_search", {"query": f"what is {K2}"})
    assert not found.isError
    shown = text(found)
    assert K2 not in shown
    assert "tvly-dev-…" in shown  # the page's echo is there, masked
    assert len(fake_tavily.searches) == 1


# -- spend: an MCP session is the conversation its budget counts -----------------------------

BUDGET = Budget(2, unit="searches", per="conversation")
OVER_BUDGET = BudgetExhausted(BUDGET, 2).message


async def searches(session: ClientSession, *queries: str) -> list[CallToolResult]:
    """One call at a time (each its own turn), as a client sends them reply after reply."""
    return [await session.call_tool("tavily_search", {"query": q}) for q in queries]


def served(results: list[CallToolResult]) -> list[bool]:
    return [not r.isError and len(json.loads(text(r))["results"]) == 5 for r in results]


async def test_a_conversation_budget_refuses_a_sessions_third_search_and_not_another_sessions(
    fake_tavily: FakeTavily, tavily_server: str
) -> None:
    assert "this conversation has used its 2 web searches" in OVER_BUDGET
    assert "answer from what you have" in OVER_BUDGET
    with Router(list(TEST_KEYS), base_url=tavily_server, budgets=[BUDGET]) as router:
        server = build_server(router, min_interval=0)
        async with (
            asyncio.timeout(LIMIT),
            create_connected_server_and_client_session(server) as one,
            create_connected_server_and_client_session(server) as other,
        ):
            first = await searches(one, "python 3.13", "rust 2024")
            second = await searches(other, "zig 0.14", "pep 703")
            (over,) = await searches(one, "go 1.24")
    assert served(first) == served(second) == [True, True]
    # The first session's third search is refused unsent; the model reads why.
    assert over.isError and text(over) == OVER_BUDGET
    assert [r.query for r in fake_tavily.searches] == [
        "python 3.13",
        "rust 2024",
        "zig 0.14",
        "pep 703",
    ]


async def test_an_agent_calling_steadily_without_reply_ids_keeps_getting_searches(
    fake_tavily: FakeTavily, tavily_server: str
) -> None:
    """MCP carries no reply ids, so the implicit burst rule is all that counts turns:
    a client calling every 1.5 s gets a search every other call, for as long as it
    calls (refused calls do not extend the burst)."""
    from searchfuse.testing import FakeClock

    clock = FakeClock()
    with Router(list(TEST_KEYS), base_url=tavily_server, clock=clock) as router:
        server = build_server(router, clock=clock)  # min_interval 2 s
        results = []
        async with asyncio.timeout(LIMIT), create_connected_server_and_client_session(server) as s:
            for i in range(12):
                results.append(await s.call_tool("tavily_search", {"query": f"q{i}"}))
                clock.advance(1.5)
    assert [not r.isError for r in results] == [True, False] * 6
    assert [r.query for r in fake_tavily.searches] == [f"q{i}" for i in range(0, 12, 2)]


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"max_results": 500}, "max_results is 500: it should be less than or equal to 20"),
        ({"max_results": -1}, "max_results is -1"),
        ({"max_results": "many"}, "max_results is 'many'"),
        ({"search_depth": "deep"}, "search_depth is 'deep': it should be 'basic'"),
        ({"topic": 5}, "topic is 5"),
        ({"time_range": "decade"}, "time_range is 'decade'"),
        ({"include_domains": "example.com"}, "include_domains is 'example.com'"),
        ({"exclude_domains": [1, 2]}, "exclude_domains is [1, 2]"),
    ],
)
async def test_an_argument_out_of_range_is_told_like_an_empty_query_and_costs_nothing(
    fake_tavily: FakeTavily, tavily_server: str, arguments: dict[str, object], named: str
) -> None:
    with Router(list(TEST_KEYS), base_url=tavily_server) as router:
        server = build_server(router, min_interval=0)
        async with asyncio.timeout(LIMIT), create_connected_server_and_client_session(server) as s:
            bad = await s.call_tool("tavily_search", {"query": "python 3.13", **arguments})
            good = await s.call_tool("tavily_search", {"query": "python 3.13", "max_results": "3"})
            tools = {t.name: t for t in (await s.list_tools()).tools}
            schema = tools["tavily_search"].inputSchema["properties"]
    assert bad.isError
    assert text(bad).startswith(f"the request was not sent: {named}")
    assert text(bad).endswith("retrying the same request will fail again.")
    assert "validation error" not in text(bad) and "pydantic" not in text(bad)
    assert not good.isError and len(json.loads(text(good))["results"]) == 3  # "3" is 3
    assert [r.query for r in fake_tavily.searches] == ["python 3.13"]  # only the good one
    # The schema the model reads still states every bound.
    assert schema["max_results"]["maximum"] == 20 and schema["max_results"]["minimum"] == 0
    assert schema["search_depth"]["enum"] == ["basic", "advanced", "fast", "ultra-fast"]


@pytest.fixture
def budget_http_server(tavily_server: str) -> Iterator[str]:
    """`build_server` over streamable HTTP, in this process, with a conversation budget."""
    import threading

    import uvicorn

    port = free_port()
    with Router(list(TEST_KEYS), base_url=tavily_server, budgets=[BUDGET]) as router:
        app = build_server(router, min_interval=0).streamable_http_app()
        web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=web.run, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + LIMIT
            while not web.started:
                assert thread.is_alive() and time.monotonic() < deadline, "no HTTP server"
                time.sleep(0.01)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            web.should_exit = True
            thread.join(LIMIT)


async def test_over_streamable_http_each_session_id_is_a_conversation(
    fake_tavily: FakeTavily, budget_http_server: str
) -> None:
    async with (
        asyncio.timeout(LIMIT),
        streamable_http_client(budget_http_server) as (read, write, one_id),
        ClientSession(read, write) as one,
        streamable_http_client(budget_http_server) as (read2, write2, other_id),
        ClientSession(read2, write2) as other,
    ):
        await one.initialize()
        await other.initialize()
        assert one_id() != other_id()
        first = await searches(one, "python 3.13", "rust 2024")
        second = await searches(other, "zig 0.14", "pep 703")
        (over,) = await searches(one, "go 1.24")
    assert served(first) == served(second) == [True, True]
    assert over.isError and text(over) == OVER_BUDGET
    assert len(fake_tavily.searches) == 4


async def test_web_search_is_served_over_the_chain_and_tavily_search_is_unchanged(
    fake_clock: FakeClock, fake_tavily: FakeTavily, tavily_server: str
) -> None:
    """Tavily's keys are spent: `web_search` is served by Exa (the model reads Tavily's
    shape, nothing of the router's accounting), and `tavily_search` keeps its schema."""
    exa = FakeExa(keys=EXA_TEST_KEYS, clock=fake_clock)
    for key in TEST_KEYS:
        fake_tavily.set_limit(key, 0)
    with exa.serve() as exa_url:
        keys = {"tavily": list(TEST_KEYS), "exa": list(EXA_TEST_KEYS)}
        router = Router(keys, base_url=tavily_server, base_urls={"exa": exa_url})
        server = build_server(router, min_interval=0)
        async with asyncio.timeout(LIMIT), create_connected_server_and_client_session(server) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            found = await s.call_tool("web_search", {"query": "zig comptime", "topic": "news"})
            bad = await s.call_tool("web_search", {"query": "q", "topic": "finance"})
    web = tools["web_search"].inputSchema["properties"]
    assert set(web) == PARAMETERS - {"search_depth"}
    assert web["topic"]["enum"] == ["general", "news"]
    assert set(tools["tavily_search"].inputSchema["properties"]) == PARAMETERS
    assert not found.isError
    answer = json.loads(text(found))
    assert len(answer["results"]) == 5 and "zig comptime" in answer["results"][0]["title"]
    assert not {"searchfuse", "raw", "usage"} & set(answer)
    (search,) = exa.searches
    assert search.body is not None and search.body["category"] == "news"
    assert bad.isError and text(bad).startswith("the request was not sent: topic is 'finance'")
    assert len(exa.searches) == 1
