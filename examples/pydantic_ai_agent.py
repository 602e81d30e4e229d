"""A Pydantic AI agent whose web searches go through searchfuse, offline.

    python examples/pydantic_ai_agent.py

The agent is Pydantic AI's own; its model is Pydantic AI's `FunctionModel`
answering from a script, and Tavily is simulated on a loopback port with
made-up keys, so nothing leaves the machine. Three questions, one model
response with searches each:

1. The model asks for three searches at once: one runs, two are refused.
2. Tavily answers 429: the search stops and the fuse trips.
3. Every search of the next response is refused with the seconds left, and
   no request is sent.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")  # the simulated Tavily is local

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from searchfuse import Router
from searchfuse.integrations.pydantic_ai import web_search_tool
from searchfuse.testing import FakeTavily

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]

#: Each question: one response asking for these searches in parallel, then the answer.
SCRIPT: list[list[str] | str] = [
    ["python 3.13 release date", "python 3.13 new features", "pep 703"],
    "Python 3.13 came out in October 2024.",
    ["rust 2024 edition"],
    "Search is paused; I will answer from what I know.",
    ["rust 2024 edition", "zig 0.14"],
    "Here is what I have so far.",
]


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: the next entry of the script (a real model decides here)."""
    reply = SCRIPT.pop(0)
    if isinstance(reply, str):
        return ModelResponse(parts=[TextPart(reply)])
    return ModelResponse(
        parts=[ToolCallPart("web_search", {"query": query}) for query in reply],
    )


def summary(output: str) -> str:
    try:
        return f"{len(json.loads(output)['results'])} results"
    except ValueError:
        return f"refused: {output}"


def main() -> None:
    fake = FakeTavily(keys=KEYS)
    # Router(...) or Router.from_config("config/keys.json"); closed at the end.
    with fake.serve() as tavily_url, Router(KEYS, base_url=tavily_url) as router:
        agent = Agent(
            FunctionModel(scripted),
            instructions="Answer briefly; search the web when you must.",
            tools=[web_search_tool(router)],
        )

        def ask(question: str) -> None:
            before = len(fake.searches)
            result = agent.run_sync(question)
            print(f"\nuser: {question}")
            for message in result.new_messages():
                for part in message.parts:
                    if isinstance(part, ToolCallPart):
                        print(f"  model -> web_search({part.args_as_dict()['query']!r})")
                    elif isinstance(part, ToolReturnPart):
                        print(f"  tool  <- {summary(str(part.content))}")
            print(f"  model: {result.output}")
            print(f"  searches that reached Tavily: {len(fake.searches) - before}")

        print("1. Three searches in one response: one runs, two are refused.")
        ask("When did Python 3.13 come out, and what is new?")

        print("\n2. Tavily answers 429 (Retry-After: 30): the search stops.")
        fake.fail_next(429, retry_after=30, path="/search")
        ask("And what about the Rust 2024 edition?")

        print("\n3. The next response: refused while the cooldown runs, nothing sent.")
        ask("Any news on Rust or Zig?")


if __name__ == "__main__":
    main()
