"""An MCP server whose `web_search` and `tavily_search` tools are guarded and routed:
`searchfuse mcp`.

`pip install ".[mcp]"`, then point any MCP client (Claude Desktop,
Cursor, IDE agents, LangChain through `langchain-mcp-adapters`...) at
`searchfuse mcp`. It speaks stdio by default and streamable HTTP with
`--http PORT` (on 127.0.0.1 unless told otherwise).

`web_search` takes the parameters every provider can honour and is served
over the router's whole chain; `tavily_search` is Tavily's contract, as
before. Every call of either passes one [`Guard`][searchfuse.Guard] (cache,
fuse, turn budget: a reply's calls count together whichever tool they name)
and is served by a [`Router`][searchfuse.Router] over all keys. MCP carries no
id for the model reply a call belongs to, so the guard's burst rule decides
what a turn is: calls that overlap, or start within `min_interval` seconds
of the previous one, are one turn. A refusal is a tool result with
`isError: true` whose text is the refusal's message; the session goes on.
Budgets per conversation count each MCP session as one conversation (see
[`session_conversation`][searchfuse.integrations.mcp.session_conversation]).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio

try:
    from mcp.server.fastmcp import Context, FastMCP
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage
    from mcp.types import CallToolResult, TextContent, ToolAnnotations
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'searchfuse.integrations.mcp needs the MCP SDK: pip install ".[mcp]"'
    ) from exc

from searchfuse._secrets import redact
from searchfuse._serving import StartRefused, closing, run
from searchfuse._spend import conversation_scope
from searchfuse.guard import Guard
from searchfuse.integrations._names import ObjectNames
from searchfuse.integrations._tavily_tool import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    WEB_SEARCH_DESCRIPTION,
    WEB_SEARCH_NAME,
    DepthArgument,
    DomainsArgument,
    MaxResultsArgument,
    QueryArgument,
    TimeRangeArgument,
    TopicArgument,
    WebTopicArgument,
    answer,
    check_arguments,
)
from searchfuse.router import Router

__all__ = [
    "LOOPBACK",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "WEB_SEARCH_NAME",
    "build_server",
    "serve",
    "session_conversation",
]

logger = logging.getLogger("searchfuse.integrations.mcp")

#: Where `--http` listens unless told otherwise: this machine only.
LOOPBACK = "127.0.0.1"
_LOOPBACK_NAMES = frozenset({LOOPBACK, "localhost", "::1"})
#: The header naming a streamable HTTP session (MCP's transport spec).
SESSION_HEADER = "mcp-session-id"
#: Names for the sessions that carry no id of their own (stdio, in-memory).
_SESSIONS = ObjectNames()


def session_conversation(context: Context[Any, Any, Any]) -> str:
    """The conversation budgets count a tool call against: its MCP session.

    Over streamable HTTP that is the session the client opened, by its
    `Mcp-Session-Id` (`mcp:<id>`); over stdio the server process serves one
    client, and its one session is named at random (`mcp:session-<name>`).
    A stateless HTTP server opens a session per request: there every call is
    a conversation of its own.
    """
    request = context.request_context.request
    headers = getattr(request, "headers", None)
    session_id = headers.get(SESSION_HEADER) if headers is not None else None
    if session_id:
        return f"mcp:{session_id}"
    return f"mcp:session-{_SESSIONS.name(context.session)}"


def build_server(
    router: Router | None = None,
    *,
    host: str = LOOPBACK,
    port: int = 8000,
    name: str = "searchfuse",
    **guard_options: Any,
) -> FastMCP[Any]:
    """The MCP server: two tools, `web_search` and `tavily_search`, guarded and routed.

    Args:
        router: the router that serves the searches; default
            [`Router.from_env`][searchfuse.Router.from_env].
        host: where the streamable HTTP transport listens (default loopback).
        port: its port.
        name: the server's name, as MCP clients show it.
        **guard_options: options of [`Guard`][searchfuse.Guard] (`per_turn`,
            `min_interval`, `cache`, `cooldown`, `checklist`...).
    """
    if router is None:
        router = Router.from_env()
    rules = Guard(name=TOOL_NAME, router=router, **guard_options)
    secrets = tuple(entry.key for entry in router.keys)
    server: FastMCP[Any] = FastMCP(name, host=host, port=port, log_level="WARNING")

    async def run(
        context: Context[Any, Any, Any], tool: str, arguments: dict[str, Any]
    ) -> CallToolResult:
        # The framework does not check these (see `checked_here`): a bad argument
        # is told like an empty query ("not sent: ..."), and costs nothing.
        checked = check_arguments(arguments, web=tool == WEB_SEARCH_NAME)
        if isinstance(checked, str):
            return CallToolResult(content=[TextContent(type="text", text=checked)], isError=True)
        async with conversation_scope(session_conversation(context)):
            text, refused = await answer(rules, tool=tool, **checked)
        # What the model reads never holds a configured key, whatever a page echoed.
        shown = redact(text, secrets)
        return CallToolResult(content=[TextContent(type="text", text=shown)], isError=refused)

    hints = ToolAnnotations(readOnlyHint=True, openWorldHint=True)

    @server.tool(name=WEB_SEARCH_NAME, description=WEB_SEARCH_DESCRIPTION, annotations=hints)
    async def web_search(
        context: Context[Any, Any, Any],
        query: QueryArgument,
        max_results: MaxResultsArgument = 5,
        topic: WebTopicArgument = "general",
        time_range: TimeRangeArgument = None,
        include_domains: DomainsArgument = None,
        exclude_domains: DomainsArgument = None,
    ) -> CallToolResult:
        arguments = {
            "query": query,
            "max_results": max_results,
            "topic": topic,
            "time_range": time_range,
            "include_domains": include_domains,
            "exclude_domains": exclude_domains,
        }
        return await run(context, WEB_SEARCH_NAME, arguments)

    @server.tool(name=TOOL_NAME, description=TOOL_DESCRIPTION, annotations=hints)
    async def tavily_search(
        context: Context[Any, Any, Any],
        query: QueryArgument,
        max_results: MaxResultsArgument = 5,
        search_depth: DepthArgument = "basic",
        topic: TopicArgument = "general",
        time_range: TimeRangeArgument = None,
        include_domains: DomainsArgument = None,
        exclude_domains: DomainsArgument = None,
    ) -> CallToolResult:
        arguments = {
            "query": query,
            "max_results": max_results,
            "search_depth": search_depth,
            "topic": topic,
            "time_range": time_range,
            "include_domains": include_domains,
            "exclude_domains": exclude_domains,
        }
        return await run(context, TOOL_NAME, arguments)

    return server


class _ClientWentAway(logging.Filter):
    """Drops the MCP SDK's error log (with a traceback) for a stream whose client
    closed it: a client ending its session is how sessions end, not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, anyio.ClosedResourceError | anyio.BrokenResourceError)


def serve(
    router: Router | None = None,
    *,
    http_port: int | None = None,
    host: str = LOOPBACK,
    ready: Callable[[str], None] | None = None,
    **guard_options: Any,
) -> None:
    """Run the server until the client goes away (stdio) or the process is stopped (HTTP).

    `http_port=None` speaks MCP over stdin/stdout; a port serves streamable
    HTTP at `http://HOST:PORT/mcp`, and `ready` is called with that address
    once the port listens. The router is closed at the end.
    """
    if router is None:
        router = Router.from_env()
    if http_port is not None and host not in _LOOPBACK_NAMES:
        logger.warning(
            "serving web_search and tavily_search on %s:%d: anyone who reaches this "
            "address can spend your search credits",
            host,
            http_port,
        )
    server = build_server(router, host=host, port=http_port or 8000, **guard_options)
    try:
        if http_port is None:
            anyio.run(_stdio_then_close, server, router)
            return
        quiet = _ClientWentAway()
        logging.getLogger("mcp.server.streamable_http").addFilter(quiet)
        try:
            run(
                closing(server.streamable_http_app(), router.aclose),
                host,
                http_port,
                shutdown_timeout=5.0,
                ready=None if ready is None else (lambda url: ready(f"{url}/mcp")),
                option="--http",
                lifespan=True,
            )
        except StartRefused as exc:
            raise OSError(str(exc)) from None
        finally:
            logging.getLogger("mcp.server.streamable_http").removeFilter(quiet)
    finally:
        router.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


async def _stdio_then_close(server: FastMCP[Any], router: Router) -> None:
    """`_stdio`, then the router's async pools closed on this loop (and its store)."""
    try:
        await _stdio(server)
    finally:
        await router.aclose()


async def _stdio(server: FastMCP[Any]) -> None:
    """Serve over stdin/stdout until EOF, rejecting lines that are not JSON-RPC.

    The SDK hands a line it cannot parse to the session as an exception, and
    the session answers it on a stream that may already be closed at EOF (a
    traceback, exit 1). Here such a line is logged and dropped: the session
    sees only messages, and the server ends cleanly when stdin does.
    """
    lowlevel = server._mcp_server
    async with stdio_server() as (read_stream, write_stream):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def only_messages() -> None:
            async with send, read_stream:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        logger.warning(
                            "rejected a message that is not JSON-RPC: %s", _first_line(item)
                        )
                        continue
                    await send.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(only_messages)
            await lowlevel.run(receive, write_stream, lowlevel.create_initialization_options())
