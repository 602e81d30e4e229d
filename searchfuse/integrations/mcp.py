"""An MCP server whose `tavily_search` tool is guarded and routed: `searchfuse mcp`.

`pip install ".[mcp]"`, then point any MCP client (Claude Desktop,
Cursor, IDE agents, LangChain through `langchain-mcp-adapters`...) at
`searchfuse mcp`. It speaks stdio by default and streamable HTTP with
`--http PORT` (on 127.0.0.1 unless told otherwise).

Every call passes one [`Guard`][searchfuse.Guard] (cache, fuse, turn budget)
and is served by a [`Router`][searchfuse.Router] over all keys. MCP carries no
id for the model reply a call belongs to, so the guard's burst rule decides
what a turn is: calls that overlap, or start within `min_interval` seconds
of the previous one, are one turn. A refusal is a tool result with
`isError: true` whose text is the refusal's message; the session goes on.
"""

from __future__ import annotations

import logging
from typing import Any

try:
    from mcp.server.fastmcp import FastMCP
    from mcp.types import CallToolResult, TextContent, ToolAnnotations
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'searchfuse.integrations.mcp needs the MCP SDK: pip install ".[mcp]"'
    ) from exc

from searchfuse.guard import Guard
from searchfuse.integrations._tavily_tool import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    Depth,
    Domains,
    MaxResults,
    Query,
    TimeRange,
    Topic,
    answer,
)
from searchfuse.router import Router

__all__ = ["LOOPBACK", "TOOL_DESCRIPTION", "TOOL_NAME", "build_server", "serve"]

logger = logging.getLogger("searchfuse.integrations.mcp")

#: Where `--http` listens unless told otherwise: this machine only.
LOOPBACK = "127.0.0.1"
_LOOPBACK_NAMES = frozenset({LOOPBACK, "localhost", "::1"})


def build_server(
    router: Router | None = None,
    *,
    host: str = LOOPBACK,
    port: int = 8000,
    name: str = "searchfuse",
    **guard_options: Any,
) -> FastMCP[Any]:
    """The MCP server: one tool, `TOOL_NAME`, guarded and routed.

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
    server: FastMCP[Any] = FastMCP(name, host=host, port=port, log_level="WARNING")

    @server.tool(
        name=TOOL_NAME,
        description=TOOL_DESCRIPTION,
        annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=True),
    )
    async def tavily_search(
        query: Query,
        max_results: MaxResults = 5,
        search_depth: Depth = "basic",
        topic: Topic = "general",
        time_range: TimeRange = None,
        include_domains: Domains = None,
        exclude_domains: Domains = None,
    ) -> CallToolResult:
        text, refused = await answer(
            rules,
            query,
            max_results=max_results,
            search_depth=search_depth,
            topic=topic,
            time_range=time_range,
            include_domains=include_domains,
            exclude_domains=exclude_domains,
        )
        return CallToolResult(content=[TextContent(type="text", text=text)], isError=refused)

    return server


def serve(
    router: Router | None = None,
    *,
    http_port: int | None = None,
    host: str = LOOPBACK,
    **guard_options: Any,
) -> None:
    """Run the server until the client goes away (stdio) or the process is stopped (HTTP).

    `http_port=None` speaks MCP over stdin/stdout; a port serves streamable
    HTTP at `http://HOST:PORT/mcp`. The router is closed at the end.
    """
    if router is None:
        router = Router.from_env()
    if http_port is not None and host not in _LOOPBACK_NAMES:
        logger.warning(
            "serving tavily_search on %s:%d: anyone who reaches this address can spend "
            "your Tavily credits",
            host,
            http_port,
        )
    server = build_server(router, host=host, port=http_port or 8000, **guard_options)
    try:
        server.run("streamable-http" if http_port is not None else "stdio")
    finally:
        router.close()
