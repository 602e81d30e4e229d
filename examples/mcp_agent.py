"""A LangChain agent searching through ``searchfuse mcp``, offline.

    python examples/mcp_agent.py

The agent gets its tools from the MCP server through langchain-mcp-adapters;
the server is ``searchfuse mcp`` as an MCP client starts it (a subprocess on
stdio). The model is scripted and Tavily is simulated on a loopback port,
with made-up keys, so nothing leaves the machine. Three model replies:

1. The model asks for three searches at once: one runs, two are refused.
2. Tavily answers 429: the search stops and the server's fuse trips.
3. Every search of the next reply is refused with the seconds left, and no
   request is sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")  # the simulated Tavily is local

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools

from searchfuse.testing import FakeTavily

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]


class ScriptedModel(FakeMessagesListChatModel):
    """Answers from a script, one reply per model call; tools need no binding."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def searches(*queries: str) -> AIMessage:
    """One model reply asking for these searches in parallel."""
    calls = [
        {"name": "tavily_search", "args": {"query": q}, "id": f"call_{i}", "type": "tool_call"}
        for i, q in enumerate(queries, start=1)
    ]
    return AIMessage(content="", tool_calls=calls)


def mcp_client(tavily_url: str, state: Path) -> MultiServerMCPClient:
    """The server as Claude Desktop or Cursor would start it: a command with an environment."""
    return MultiServerMCPClient(
        {
            "searchfuse": {
                "transport": "stdio",
                "command": sys.executable,
                # --min-interval 0: only calls that overlap are one turn (no wait
                # between this script's replies, which come faster than a model's).
                "args": ["-m", "searchfuse", "mcp", "--state", str(state), "--min-interval", "0"],
                "env": {
                    "TAVILY_API_KEYS": ",".join(KEYS),
                    "TAVILY_BASE_URL": tavily_url,
                    "NO_PROXY": "127.0.0.1,localhost",
                },
            }
        }
    )


@asynccontextmanager
async def searchfuse_tools(client: MultiServerMCPClient) -> AsyncIterator[list[BaseTool]]:
    """The server's tools over one session: the server counts turns per process, so
    every tool call of the agent must reach the same one."""
    async with client.session("searchfuse") as session:
        yield await load_mcp_tools(session)


def summary(message: ToolMessage) -> str:
    text = message.text if isinstance(message.content, list) else str(message.content)
    if message.status == "error":
        return f"error: {text}"
    return f"{len(json.loads(text)['results'])} results"


def show(question: str, messages: list[BaseMessage], requests: int) -> None:
    print(f"\nuser: {question}")
    for message in messages:
        if isinstance(message, AIMessage) and message.tool_calls:
            for call in message.tool_calls:
                print(f"  model -> tavily_search({call['args']['query']!r})  [{call['id']}]")
        elif isinstance(message, ToolMessage):
            print(f"  tool  <- [{message.tool_call_id}] {summary(message)}")
        elif isinstance(message, AIMessage):
            print(f"  model: {message.content}")
    print(f"  searches that reached Tavily: {requests}")


async def main() -> None:
    fake = FakeTavily(keys=KEYS)
    with fake.serve() as tavily_url, tempfile.TemporaryDirectory() as folder:
        client = mcp_client(tavily_url, Path(folder) / "state.json")
        async with searchfuse_tools(client) as tools:
            model = ScriptedModel(
                responses=[
                    searches("python 3.13 release date", "python 3.13 new features", "pep 703"),
                    AIMessage("Python 3.13 came out in October 2024."),
                    searches("rust 2024 edition"),
                    AIMessage("Search is paused; I will answer from what I know."),
                    searches("rust 2024 edition", "zig 0.14"),
                    AIMessage("Here is what I have so far."),
                ]
            )
            agent = create_agent(model, tools=tools)

            async def ask(question: str) -> None:
                before = len(fake.searches)
                result = await agent.ainvoke({"messages": [HumanMessage(question)]})
                show(question, result["messages"][1:], len(fake.searches) - before)

            print("1. Three searches in one reply: one runs, two are refused.")
            # Tavily takes a few hundred milliseconds, so a reply's parallel calls
            # overlap at the server, as they do with the real API.
            fake.slow_next(0.3, path="/search")
            await ask("When did Python 3.13 come out, and what is new?")

            print("\n2. Tavily answers 429 (Retry-After: 30): the search stops.")
            fake.fail_next(429, retry_after=30, path="/search")
            await ask("And what about the Rust 2024 edition?")

            print("\n3. The next reply: refused while the cooldown runs, nothing sent.")
            await ask("Any news on Rust or Zig?")


if __name__ == "__main__":
    asyncio.run(main())
