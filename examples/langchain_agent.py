"""A LangChain agent whose web searches go through searchfuse, offline.

    python examples/langchain_agent.py

The model is scripted (langchain-core's fake chat model) and Tavily is
simulated on a loopback port, with made-up keys, so nothing leaves the
machine. Three model replies:

1. The model asks for three searches at once: one runs, two are refused.
2. Tavily answers 429: the search stops and the fuse trips.
3. The next reply is served from the cache where it can be, and every
   other search is refused with the seconds left, without a request.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")  # the simulated Tavily is local

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from searchfuse import Router
from searchfuse.integrations.langchain import RoutedTavilySearch, SearchFuseMiddleware
from searchfuse.testing import FakeTavily

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]


class ScriptedModel(FakeMessagesListChatModel):
    """Answers from a script, one reply per model call; tools need no binding."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def build_agent(model: BaseChatModel, router: Router) -> Any:
    """Tavily served by the router (several keys), every search guarded by the middleware."""
    return create_agent(
        model,
        tools=[RoutedTavilySearch(router=router, max_results=3)],
        middleware=[SearchFuseMiddleware(per_turn=1)],
    )


def searches(*queries: str) -> AIMessage:
    """One model reply asking for these searches in parallel."""
    calls = [
        {"name": "tavily_search", "args": {"query": q}, "id": f"call_{i}", "type": "tool_call"}
        for i, q in enumerate(queries, start=1)
    ]
    return AIMessage(content="", tool_calls=calls)


def summary(message: ToolMessage) -> str:
    if message.status == "error":
        return f"error: {message.content}"
    result = json.loads(str(message.content))  # what the model reads: Tavily's JSON
    served = (message.artifact or {}).get("searchfuse", {}).get("key", "?")  # for people
    return f"{len(result['results'])} results (served with key {served})"


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


def main() -> None:
    # searchfuse says what it does (keys masked) on its loggers; show it inline.
    logging.basicConfig(level=logging.WARNING, format="  [%(name)s] %(message)s", stream=sys.stdout)
    fake = FakeTavily(keys=KEYS)
    with fake.serve() as tavily_url:
        model = ScriptedModel(
            responses=[
                searches("python 3.13 release date", "python 3.13 new features", "pep 703"),
                AIMessage("Python 3.13 came out in October 2024."),
                searches("rust 2024 edition"),
                AIMessage("Search is paused; I will answer from what I know."),
                searches("Python 3.13  release date", "rust 2024 edition"),
                AIMessage("Here is what I have so far."),
            ]
        )

        router = Router(KEYS, base_url=tavily_url)  # or Router.from_config("config/keys.json")
        agent = build_agent(model, router)

        def ask(question: str) -> None:
            before = len(fake.searches)
            result = agent.invoke({"messages": [HumanMessage(question)]})
            show(question, result["messages"][1:], len(fake.searches) - before)

        print("1. Three searches in one reply: one runs, two are refused.")
        ask("When did Python 3.13 come out, and what is new?")

        print("\n2. Tavily answers 429 (Retry-After: 30): the search stops.")
        fake.fail_next(429, retry_after=30, path="/search")
        ask("And what about the Rust 2024 edition?")

        print("\n3. The next reply: the cache still answers, everything else waits.")
        ask("Remind me of both, please.")


if __name__ == "__main__":
    main()
