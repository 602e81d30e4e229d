"""A Hermes agent whose web_search goes through searchfuse, offline.

    python examples/hermes_agent.py             # the plugin, enabled in config.yaml
    python examples/hermes_agent.py --install   # a script, without the plugin system

Nothing leaves the machine: HERMES_HOME is a fresh temporary directory (the
real ~/.hermes is never touched), Tavily is simulated on a loopback port with
made-up keys, and the model is a scripted OpenAI-compatible server on
another loopback port (fake_openai.py, next to this file).

With the plugin, three model replies:

1. The model asks for three searches at once: one runs, two are blocked.
2. Tavily answers 429: the search stops and the fuse trips.
3. The next reply is blocked with the seconds left, without a request.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

# Hermes writes into HERMES_HOME as soon as it is imported: point it at a
# temporary directory first.
HERMES_HOME = Path(tempfile.mkdtemp(prefix="hermes-home-"))
os.environ["HERMES_HOME"] = str(HERMES_HOME)
os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
for name in ("TAVILY_API_KEY", "TAVILY_API_KEYS", "TAVILY_BASE_URL"):
    os.environ.pop(name, None)

from fake_openai import Reply, ScriptedOpenAI  # noqa: E402  (the example's own helper)

from searchfuse import Router  # noqa: E402
from searchfuse.integrations.hermes import SearchFusePlugin, install  # noqa: E402
from searchfuse.testing import FakeTavily  # noqa: E402

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]

# Offline: a known context length spares Hermes its model-metadata lookups,
# and no environment probe runs while the system prompt is built.
OFFLINE = """\
model:
  context_length: 131072
  ollama_num_ctx: 131072
agent:
  environment_probe: false
"""

PLUGIN_CONFIG = """\
plugins:
  enabled: [searchfuse]
web:
  search_backend: searchfuse
searchfuse:
  per_turn: 1
"""


def write_hermes_home(tavily_url: str) -> None:
    """The ~/.hermes layout the plugin reads: config.yaml, and the keys in .env."""
    (HERMES_HOME / "config.yaml").write_text(PLUGIN_CONFIG + OFFLINE)
    (HERMES_HOME / ".env").write_text(
        f"TAVILY_API_KEYS={','.join(KEYS)}\nTAVILY_BASE_URL={tavily_url}\n"
    )


def install_searchfuse(tavily_url: str) -> SearchFusePlugin:
    """Route this script's Hermes web searches through searchfuse (no plugins.enabled)."""
    router = Router(KEYS, base_url=tavily_url)  # or router_from_hermes(): keys from ~/.hermes
    return install(SearchFusePlugin(router=router, per_turn=1))


def tool_payload(content: str) -> dict[str, Any]:
    """The JSON inside Hermes' <untrusted_tool_result> wrapper."""
    return dict(json.loads(content[content.index("{") : content.rindex("}") + 1]))


def show(question: str, result: dict[str, Any], searches: int) -> None:
    print(f"\nuser: {question}")
    for message in result["messages"]:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                query = json.loads(call["function"]["arguments"])["query"]
                print(f"  model -> web_search({query!r})  [{call['id']}]")
        elif message.get("role") == "tool":
            payload = tool_payload(message["content"])
            if payload.get("success"):
                outcome = f"{len(payload['data']['web'])} results"
            else:
                outcome = f"error: {payload.get('error')}"
            print(f"  tool  <- [{message['tool_call_id']}] {outcome}")
    print(f"  model: {result['final_response']}")
    print(f"  searches that reached Tavily: {searches}")


def new_agent(llm_url: str) -> Any:
    import run_agent  # type: ignore[import-untyped]  # Hermes ships no types

    return run_agent.AIAgent(
        base_url=llm_url,
        api_key="sk-local",
        model="scripted",
        provider="custom",
        enabled_toolsets=["web"],
        quiet_mode=True,
        skip_context_files=True,
        skip_memory=True,
        save_trajectories=False,
        max_iterations=4,
    )


def with_the_plugin(fake: FakeTavily, tavily_url: str) -> None:
    """Hermes loads the plugin itself: `searchfuse` is in plugins.enabled."""
    write_hermes_home(tavily_url)
    script: list[Reply] = [
        [("web_search", {"query": q}) for q in ("hermes agent", "tavily api", "searchfuse")],
        "Hermes is an agent framework; I searched once.",
        [("web_search", {"query": "rust 2024 edition"})],
        "Search is paused; I will answer from what I know.",
        [("web_search", {"query": "python 3.13 release date"})],
        "I will wait for search to come back.",
    ]
    with ScriptedOpenAI(script) as llm:
        agent = new_agent(llm.base_url)

        def ask(question: str) -> None:
            before = len(fake.searches)
            result = agent.run_conversation(question)
            show(question, result, len(fake.searches) - before)

        print("1. Three searches in one reply: one runs, two are blocked.")
        ask("What are Hermes, Tavily and searchfuse?")

        print("\n2. Tavily answers 429 (Retry-After: 30): the search stops.")
        fake.fail_next(429, retry_after=30, path="/search")
        ask("And the Rust 2024 edition?")

        print("\n3. The next reply is blocked with the seconds left, without a request.")
        ask("When did Python 3.13 come out?")


def without_the_plugin_system(fake: FakeTavily, tavily_url: str) -> None:
    """A script: no plugins.enabled, Hermes' usual TAVILY_API_KEY setup."""
    (HERMES_HOME / "config.yaml").write_text(OFFLINE)
    os.environ["TAVILY_API_KEY"] = KEYS[0]  # what makes Hermes pick its tavily backend

    plugin = install_searchfuse(tavily_url)

    script: list[Reply] = [
        [("web_search", {"query": q}) for q in ("hermes agent", "tavily api", "searchfuse")],
        "I searched once.",
    ]
    with ScriptedOpenAI(script) as llm:
        agent = new_agent(llm.base_url)
        print("1. An agent in a script: three searches in one reply, one runs.")
        before = len(fake.searches)
        result = agent.run_conversation("What are Hermes, Tavily and searchfuse?")
        show("What are Hermes, Tavily and searchfuse?", result, len(fake.searches) - before)

    from tools.web_tools import web_search_tool  # type: ignore[import-untyped]

    print("\n2. Calling Hermes' web_search tool directly goes through searchfuse too.")
    for query in ("hermes agent", "rust 2024 edition", "pep 703"):
        before = len(fake.searches)
        answer = json.loads(web_search_tool(query))
        if answer.get("success"):
            outcome = f"{len(answer['data']['web'])} results"
        else:
            outcome = f"error: {answer.get('error')}"
        print(f"  web_search_tool({query!r}) -> {outcome}")
        print(f"    searches that reached Tavily: {len(fake.searches) - before}")
    plugin.uninstall()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="  [%(name)s] %(message)s", stream=sys.stdout)
    # Hermes logs plenty of its own; keep the transcript to searchfuse's lines.
    logging.getLogger().handlers[0].addFilter(lambda record: record.name.startswith("searchfuse"))
    fake = FakeTavily(keys=KEYS)
    with fake.serve() as tavily_url:
        if "--install" in sys.argv[1:]:
            without_the_plugin_system(fake, tavily_url)
        else:
            with_the_plugin(fake, tavily_url)
    shutil.rmtree(HERMES_HOME, ignore_errors=True)


if __name__ == "__main__":
    main()
