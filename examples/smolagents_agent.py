"""A smolagents agent whose web searches go through searchfuse, offline.

    python examples/smolagents_agent.py          # a ToolCallingAgent: parallel tool calls
    python examples/smolagents_agent.py --code   # a CodeAgent: searches in a code action

The agents are smolagents' own; the model answers from a script (a
`smolagents.Model` whose `generate` reads the next reply), and Tavily is
simulated on a loopback port with made-up keys, so nothing leaves the
machine. Three questions, one step with searches each:

1. The model asks for three searches in one step: one runs, two are refused.
2. Tavily answers 429: the search stops and the fuse trips.
3. Every search of the next step is refused with the seconds left, and no
   request is sent.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")  # the simulated Tavily is local

from smolagents import ActionStep, CodeAgent, Model, ToolCallingAgent
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
)

from searchfuse import Router
from searchfuse.integrations.smolagents import WebSearchTool
from searchfuse.testing import FakeTavily

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]

#: Each question: one step asking for these searches, then the final answer.
QUESTIONS = [
    (
        "When did Python 3.13 come out, and what is new?",
        ["python 3.13 release date", "python 3.13 new features", "pep 703"],
        "Python 3.13 came out in October 2024.",
    ),
    (
        "And what about the Rust 2024 edition?",
        ["rust 2024 edition"],
        "Search is paused; I will answer from what I know.",
    ),
    (
        "Any news on Rust or Zig?",
        ["rust 2024 edition", "zig 0.14"],
        "Here is what I have so far.",
    ),
]


class ScriptedModel(Model):
    """The model: the next reply of the script (a real model decides here)."""

    def __init__(self, replies: list[ChatMessage]) -> None:
        super().__init__(model_id="scripted")
        self.replies = replies

    def generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> ChatMessage:
        return self.replies.pop(0)


def tool_calls(*calls: tuple[str, dict[str, Any]]) -> ChatMessage:
    """One reply of a ToolCallingAgent: these tool calls, run in parallel."""
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        content="",
        tool_calls=[
            ChatMessageToolCall(
                id=f"call_{i}",
                type="function",
                function=ChatMessageToolCallFunction(name=name, arguments=arguments),
            )
            for i, (name, arguments) in enumerate(calls)
        ],
    )


def code_action(*lines: str) -> ChatMessage:
    """One reply of a CodeAgent: a code action."""
    code = "\n".join(lines)
    return ChatMessage(role=MessageRole.ASSISTANT, content=f"Thought: go.\n<code>\n{code}\n</code>")


def script(code: bool) -> list[ChatMessage]:
    replies = []
    for _question, queries, answer in QUESTIONS:
        if code:
            replies.append(code_action(*(f"print(web_search({q!r}))" for q in queries)))
            replies.append(code_action(f"final_answer({answer!r})"))
        else:
            replies.append(tool_calls(*(("web_search", {"query": q}) for q in queries)))
            replies.append(tool_calls(("final_answer", {"answer": answer})))
    return replies


def summary(line: str) -> str:
    try:
        return f"{len(json.loads(line)['results'])} results"
    except ValueError:
        return f"refused: {line}"


def show(step: ActionStep) -> None:
    """What the model asked for in one step, and what each search told it."""
    for call in step.tool_calls or []:
        if call.name == "web_search":
            print(f"  model -> web_search({call.arguments['query']!r})")
        elif call.name == "python_interpreter":
            for line in str(call.arguments).splitlines():
                print(f"  model >  {line}")
    for line in (step.observations or "").splitlines():
        if line.startswith(("{", "Search ")):
            print(f"  tool  <- {summary(line)}")


def main(code: bool) -> None:
    fake = FakeTavily(keys=KEYS)
    # Router(...) or Router.from_config("config/keys.json"); closed at the end.
    with fake.serve() as tavily_url, Router(KEYS, base_url=tavily_url) as router:
        model = ScriptedModel(script(code))
        kind = CodeAgent if code else ToolCallingAgent
        agent = kind(tools=[WebSearchTool(router)], model=model, verbosity_level=-1)

        def ask(question: str) -> None:
            before = len(fake.searches)
            answer = agent.run(question)
            print(f"\nuser: {question}")
            for step in agent.memory.steps:
                if isinstance(step, ActionStep) and not step.is_final_answer:
                    show(step)
            print(f"  model: {answer}")
            print(f"  searches that reached Tavily: {len(fake.searches) - before}")

        print("1. Three searches in one step: one runs, two are refused.")
        ask(QUESTIONS[0][0])

        print("\n2. Tavily answers 429 (Retry-After: 30): the search stops.")
        fake.fail_next(429, retry_after=30, path="/search")
        ask(QUESTIONS[1][0])

        print("\n3. The next step: refused while the cooldown runs, nothing sent.")
        ask(QUESTIONS[2][0])


if __name__ == "__main__":
    main(code="--code" in sys.argv[1:])
