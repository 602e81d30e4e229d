"""The examples run offline, as a user runs them, and say what happened.

Each runs as ``python examples/<name>.py`` in a subprocess (all of them at
once, to keep the suite quick), against its own simulated Tavily on
loopback; these tests read the transcripts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from searchfuse import TurnLimitReached

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RUNS = {
    "langchain": ("langchain_agent.py",),
    "hermes": ("hermes_agent.py",),
    "hermes --install": ("hermes_agent.py", "--install"),
    "mcp": ("mcp_agent.py",),
    "openai-agents": ("openai_agents_agent.py",),
    "openai-agents --stream": ("openai_agents_agent.py", "--stream"),
    "pydantic-ai": ("pydantic_ai_agent.py",),
    "smolagents": ("smolagents_agent.py",),
    "smolagents --code": ("smolagents_agent.py", "--code"),
}
ONE_PER_REPLY = TurnLimitReached(1).message


@pytest.fixture(scope="module")
def transcripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    cwd = tmp_path_factory.mktemp("examples")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TAVILY_", "HERMES_", "OPENAI_", "SEARCHFUSE_"))
    }
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    running = {
        name: subprocess.Popen(
            [sys.executable, str(EXAMPLES / script), *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, (script, *args) in RUNS.items()
    }
    outputs = {}
    for name, process in running.items():
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 0, f"{name} failed:\n{output}"
        outputs[name] = output
    return outputs


def searches_per_reply(transcript: str) -> list[int]:
    return [int(n) for n in re.findall(r"searches that reached Tavily: (\d+)", transcript)]


def cooldown_seconds(transcript: str) -> list[int]:
    return [int(n) for n in re.findall(r"for (\d+) more seconds", transcript)]


#: How many searches of the last reply each example's cooldown refuses (the
#: LangChain example's other search of that reply is served from the cache).
REFUSED_IN_COOLDOWN = {
    "langchain": 1,
    "hermes": 1,
    "mcp": 2,
    "openai-agents": 2,
    "openai-agents --stream": 2,
    "pydantic-ai": 2,
    "smolagents": 2,
    "smolagents --code": 2,
}


@pytest.mark.parametrize("name", list(REFUSED_IN_COOLDOWN))
def test_one_search_per_reply_then_a_429_then_a_refusal_without_a_request(
    transcripts: dict[str, str], name: str
) -> None:
    transcript = transcripts[name]

    assert searches_per_reply(transcript) == [1, 1, 0]
    assert transcript.count(ONE_PER_REPLY) == 2
    assert "answered 429 (too many requests). It is cooling down for 30 seconds" in transcript
    left = cooldown_seconds(transcript)
    assert len(left) == REFUSED_IN_COOLDOWN[name]
    assert all(25 <= s <= 30 for s in left)  # real time passes while the example runs
    assert "Traceback" not in transcript
    assert "tvly-dev-test" not in transcript  # keys only ever appear masked


def test_the_langchain_example_serves_a_cached_search_during_the_cooldown(
    transcripts: dict[str, str],
) -> None:
    last_reply = transcripts["langchain"].split("3. ")[1]

    assert "3 results (served with key tvly-dev-…0001)" in last_reply
    assert "cooling down after a rate limit" in last_reply


def test_the_hermes_example_without_the_plugin_system(transcripts: dict[str, str]) -> None:
    transcript = transcripts["hermes --install"]

    # The agent's reply, then three direct tool calls: cached, searched, refused.
    assert searches_per_reply(transcript) == [1, 0, 1, 0]
    assert transcript.count(ONE_PER_REPLY) == 3
    assert "web_search_tool('hermes agent') -> 5 results" in transcript
    assert "Traceback" not in transcript
