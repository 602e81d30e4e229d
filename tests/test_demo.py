"""``searchfuse demo``: the offline session shows every rule, and its figures add up."""

from __future__ import annotations

import json
import subprocess
import sys

from searchfuse.demo import run_session


def test_session_shows_every_rule_and_counts_requests() -> None:
    result = run_session()
    outcomes = [e.outcome for e in result.events]
    assert outcomes == [
        "served",
        "refused (turn_limit)",
        "1 served, 7 refused",
        "refused (rate_limited)",
        "refused (cooldown)",
        "served from the cache",
        "answered locally",
        "served",
        "3 served by Exa",
    ]
    by_title = {e.title: e for e in result.events}
    assert by_title["reply 2: a burst of 8 parallel searches"].api_requests == 1
    cooldown = by_title["reply 4: search during the cooldown"]
    assert "25 more seconds" in cooldown.detail and cooldown.api_requests == 0
    assert by_title["reply 4: repeat an earlier search (cache)"].api_requests == 0
    assert by_title["reply 5: a question local notes answer"].api_requests == 0
    # The chain scene: Tavily's keys spent, Exa serves, the move named once.
    chain = by_title["replies 7-9: Tavily's credits are spent; the chain goes on"]
    assert "degraded from tavily" in chain.detail and "named the move 1 time(s)" in chain.detail
    assert result.chain_moves == [
        "Tavily is passed over (exhausted: every key is out of quota); Exa serves instead"
    ]
    # Every search request is accounted for, step by step (Tavily's 432s included).
    assert sum(e.api_requests for e in result.events) == result.api_searches == 10
    assert result.calls == 18
    assert result.saved == 8
    # The closing picture is the chain's, as the transcript left it: Tavily's keys
    # exhausted (its free /usage probe read the spent plans), Exa's key serving.
    assert [(s["provider"], s["state"]) for s in result.status] == [
        ("tavily", "exhausted"),
        ("tavily", "exhausted"),
        ("tavily", "exhausted"),
        ("tavily", "exhausted"),
        ("exa", "available"),
    ]
    assert result.diagnosis["by_provider"] == {"tavily": "exhausted", "exa": "healthy"}
    assert result.diagnosis["verdict"] == "healthy"


def test_cli_demo_prints_the_transcript_and_summary() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "searchfuse", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "summary: 18 web_search calls, 10 reached the API" in out
    assert "8 requests saved" in out
    assert "3 served by Exa" in out and "named the move 1 time(s)" in out
    assert "verdict: Tavily: exhausted" in out and "Exa: healthy" in out
    assert "\nexa\n" in "\n".join(line.strip() for line in out.splitlines())
    assert not [line for line in out.splitlines() if line != line.rstrip()]
    assert "tvly-dev-test000" not in out + proc.stderr
    assert "0000-4000-8000-0000000e0001" not in out + proc.stderr
    assert proc.stderr == ""


def test_cli_demo_json() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "searchfuse", "demo", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["summary"] == {"calls": 18, "api_searches": 10, "api_usage": 9, "saved": 8}
    assert data["diagnosis"]["verdict"] == "healthy"
