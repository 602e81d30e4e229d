"""An OpenAI Agents SDK agent whose web searches go through searchfuse, offline.

    python examples/openai_agents_agent.py            # Runner.run
    python examples/openai_agents_agent.py --stream   # Runner.run_streamed

The agent is the SDK's own, with its own OpenAI chat-completions model; the
model's server is scripted (examples/fake_openai.py) and Tavily is simulated,
both on loopback ports, with made-up keys, so nothing leaves the machine.
Three questions, one model response with searches each:

1. The model asks for three searches at once: one runs, two are refused.
2. Tavily answers 429: the search stops and the fuse trips.
3. Every search of the next response is refused with the seconds left, and
   no request is sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")  # both servers are local

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner
from agents.items import ToolCallItem, ToolCallOutputItem
from fake_openai import ScriptedOpenAI  # the example's own helper, next to this file
from openai import AsyncOpenAI

from searchfuse import Router
from searchfuse.integrations.openai_agents import tavily_search_tool
from searchfuse.testing import FakeTavily

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]


def searches(*queries: str) -> list[tuple[str, dict[str, str]]]:
    """One model response asking for these searches in parallel."""
    return [("tavily_search", {"query": q}) for q in queries]


SCRIPT = [
    searches("python 3.13 release date", "python 3.13 new features", "pep 703"),
    "Python 3.13 came out in October 2024.",
    searches("rust 2024 edition"),
    "Search is paused; I will answer from what I know.",
    searches("rust 2024 edition", "zig 0.14"),
    "Here is what I have so far.",
]


def summary(output: str) -> str:
    try:
        return f"{len(json.loads(output)['results'])} results"
    except ValueError:
        return f"refused: {output}"


async def main(stream: bool) -> None:
    fake = FakeTavily(keys=KEYS)
    with fake.serve() as tavily_url, ScriptedOpenAI(SCRIPT) as llm:
        router = Router(KEYS, base_url=tavily_url)  # or Router.from_config("config/keys.json")
        model = OpenAIChatCompletionsModel(
            model="scripted", openai_client=AsyncOpenAI(base_url=llm.base_url, api_key="sk-local")
        )
        agent = Agent(
            name="researcher",
            instructions="Answer briefly; search the web when you must.",
            model=model,
            tools=[tavily_search_tool(router)],
        )
        offline = RunConfig(tracing_disabled=True)

        async def ask(question: str) -> None:
            before = len(fake.searches)
            if stream:
                streamed = Runner.run_streamed(agent, question, run_config=offline)
                async for _event in streamed.stream_events():
                    pass  # a UI would show the events; the outcome is the same
                result = streamed
            else:
                result = await Runner.run(agent, question, run_config=offline)
            print(f"\nuser: {question}")
            for item in result.new_items:
                if isinstance(item, ToolCallItem):
                    call = item.raw_item
                    query = json.loads(getattr(call, "arguments", "{}"))["query"]
                    print(f"  model -> tavily_search({query!r})")
                elif isinstance(item, ToolCallOutputItem):
                    print(f"  tool  <- {summary(str(item.output))}")
            print(f"  model: {result.final_output}")
            print(f"  searches that reached Tavily: {len(fake.searches) - before}")

        print("1. Three searches in one response: one runs, two are refused.")
        await ask("When did Python 3.13 come out, and what is new?")

        print("\n2. Tavily answers 429 (Retry-After: 30): the search stops.")
        fake.fail_next(429, retry_after=30, path="/search")
        await ask("And what about the Rust 2024 edition?")

        print("\n3. The next response: refused while the cooldown runs, nothing sent.")
        await ask("Any news on Rust or Zig?")


if __name__ == "__main__":
    asyncio.run(main(stream="--stream" in sys.argv[1:]))
