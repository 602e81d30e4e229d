"""Hermes: its real plugin manager, tool registry and parallel dispatch, on a simulated Tavily.

Hermes is imported once per module with ``HERMES_HOME`` pointing at a
temporary directory (importing it writes there). The model replies are
built by hand and handed to ``AIAgent._execute_tool_calls``, Hermes' own
dispatch of one reply's tool calls (parallel ones in threads), so no model
server is needed; ``examples/hermes_agent.py`` runs the full conversation
loop against a loopback one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from searchfuse import (
    Budget,
    BudgetExhausted,
    CooldownActive,
    RateLimited,
    Router,
    TurnLimitReached,
    spend_scope,
)
from searchfuse._secrets import fingerprint
from searchfuse.testing import TEST_KEYS, FakeClock, FakeTavily

KEY, OTHER = TEST_KEYS[0], TEST_KEYS[1]
ONE_PER_REPLY = TurnLimitReached(1).message

# A known context length spares AIAgent() its model-metadata lookups (network).
OFFLINE = "model:\n  context_length: 131072\n  ollama_num_ctx: 131072\n"
USE_SEARCHFUSE = "web:\n  search_backend: searchfuse\n"
ENABLE_PLUGIN = "plugins:\n  enabled: [searchfuse]\n"


def configure(home: Path, *sections: str) -> None:
    """Write ``config.yaml``; Hermes re-reads it when its size or mtime changes."""
    (home / "config.yaml").write_text("".join((OFFLINE, *sections)))


@pytest.fixture(scope="module")
def hermes(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    home = tmp_path_factory.mktemp("hermes-home")
    # Set before the first Hermes import, and left set for the rest of the
    # session: Hermes resolves HERMES_HOME on every call, and nothing may ever
    # reach the real ~/.hermes.
    os.environ["HERMES_HOME"] = str(home)
    configure(home, USE_SEARCHFUSE)
    import run_agent  # type: ignore[import-untyped]  # Hermes ships no types
    from agent import web_search_registry  # type: ignore[import-untyped]
    from hermes_cli import plugins  # type: ignore[import-untyped]

    agent = run_agent.AIAgent(
        base_url="http://127.0.0.1:9/v1",  # never called: replies are built by hand
        api_key="sk-local",
        model="scripted",
        provider="custom",
        enabled_toolsets=["web"],
        quiet_mode=True,
        skip_context_files=True,
        skip_memory=True,
        save_trajectories=False,
    )
    return SimpleNamespace(home=home, agent=agent, plugins=plugins, registry=web_search_registry)


def dispatch(
    hermes: SimpleNamespace, reply_id: str, *queries: str, session: str | None = None
) -> dict[str, dict[str, Any]]:
    """Hand Hermes one model reply with these ``web_search`` calls; what each call returned.

    ``session`` is the agent's ``session_id`` for that reply (else the agent's own)."""
    calls = [
        SimpleNamespace(
            id=f"{reply_id}-{i}",
            type="function",
            function=SimpleNamespace(name="web_search", arguments=json.dumps({"query": q})),
        )
        for i, q in enumerate(queries)
    ]
    reply = SimpleNamespace(role="assistant", content="", tool_calls=calls)
    agent = hermes.agent
    agent._current_turn_id = "session:task:turn"
    agent._current_api_request_id = f"session:task:turn:api:{reply_id}"
    messages: list[dict[str, Any]] = []
    own_session = agent.session_id
    agent.session_id = session or own_session
    try:
        agent._execute_tool_calls(reply, messages, "task")
    finally:
        agent.session_id = own_session
    return {m["tool_call_id"]: payload(m["content"]) for m in messages}


def payload(content: str) -> dict[str, Any]:
    """The JSON inside Hermes' ``<untrusted_tool_result>`` wrapper."""
    return dict(json.loads(content[content.index("{") : content.rindex("}") + 1]))


@pytest.fixture
def router(fake_tavily: FakeTavily) -> Iterator[Router]:
    """Two keys whose usage the router already knows, so searches go straight to /search."""
    with Router([KEY, OTHER], transport=fake_tavily.transport()) as router:
        router.test_keys()  # a fresh router would first ask /usage, once per key
        fake_tavily.reset_records()
        yield router


@pytest.fixture
def plugin(hermes: SimpleNamespace, router: Router) -> Iterator[Any]:
    """The plugin, registered with Hermes' real plugin manager as its loader would."""
    from hermes_cli.plugins import (  # type: ignore[import-untyped]
        PluginContext,
        PluginManifest,
    )

    from searchfuse.integrations.hermes import SearchFusePlugin

    plugin = SearchFusePlugin(router=router)
    manager = hermes.plugins.get_plugin_manager()
    plugin.register(PluginContext(PluginManifest(name="searchfuse", source="entrypoint"), manager))
    yield plugin
    plugin.uninstall()


def test_parallel_web_searches_in_one_reply_make_one_request(
    hermes: SimpleNamespace, plugin: Any, fake_tavily: FakeTavily
) -> None:
    results = dispatch(hermes, "1", "hermes agent", "tavily api", "searchfuse")

    assert [(r.path, r.query, r.key_fingerprint) for r in fake_tavily.requests] == [
        ("/search", "hermes agent", fingerprint(KEY))
    ]
    assert results["1-0"]["success"] is True
    assert len(results["1-0"]["data"]["web"]) == 5
    assert results["1-1"] == results["1-2"] == {"error": ONE_PER_REPLY}


def test_a_429_stops_the_turn_and_the_next_reply_is_refused_without_a_request(
    hermes: SimpleNamespace, plugin: Any, fake_tavily: FakeTavily, fake_clock: FakeClock
) -> None:
    fake_tavily.fail_next(429, retry_after=30, path="/search")

    stopped = dispatch(hermes, "1", "hermes agent", "tavily api")
    sent = len(fake_tavily.requests)
    fake_clock.advance(12)
    refused = dispatch(hermes, "2", "searchfuse")
    sent_during_cooldown = len(fake_tavily.requests) - sent
    fake_clock.advance(18)
    again = dispatch(hermes, "3", "searchfuse")

    assert stopped["1-0"] == {"success": False, "error": RateLimited(30.0).message}
    assert stopped["1-1"] == {"error": ONE_PER_REPLY}
    assert refused["2-0"] == {"error": CooldownActive(18.0).message}
    assert "18 more seconds" in refused["2-0"]["error"]
    assert again["3-0"]["success"] is True
    assert sent_during_cooldown == 0
    assert [(r.path, r.status) for r in fake_tavily.requests] == [
        ("/search", 429),
        ("/search", 200),
    ]


def test_each_reply_gets_its_own_search(
    hermes: SimpleNamespace, plugin: Any, fake_tavily: FakeTavily
) -> None:
    first = dispatch(hermes, "1", "hermes agent")  # one call: Hermes' sequential path
    second = dispatch(hermes, "2", "tavily api")
    cached = dispatch(hermes, "3", "Hermes  Agent", "searchfuse")

    assert first["1-0"]["success"] and second["2-0"]["success"]
    assert cached["3-0"]["success"] and cached["3-1"]["success"]  # a cache hit is free
    assert [r.query for r in fake_tavily.searches] == ["hermes agent", "tavily api", "searchfuse"]


def test_an_invalid_key_is_skipped(
    hermes: SimpleNamespace, plugin: Any, fake_tavily: FakeTavily
) -> None:
    fake_tavily.revoke(KEY)

    results = dispatch(hermes, "1", "hermes agent")

    assert results["1-0"]["success"] is True
    assert [(r.key_fingerprint, r.status) for r in fake_tavily.searches] == [
        (fingerprint(KEY), 401),  # the key was revoked upstream: the router moves on
        (fingerprint(OTHER), 200),
    ]


def test_hermes_loads_the_plugin_from_its_entry_point_when_enabled(
    hermes: SimpleNamespace, fake_tavily: FakeTavily, tavily_server: str
) -> None:
    from searchfuse.integrations.hermes import active_plugin

    keys_file = hermes.home / "searchfuse" / "config" / "keys.json"
    keys_file.parent.mkdir(parents=True, exist_ok=True)
    keys_file.write_text(json.dumps({"format_version": 2, "keys": [{"key": KEY}]}))
    configure(hermes.home, ENABLE_PLUGIN, USE_SEARCHFUSE, "searchfuse:\n  per_turn: 2\n")
    try:
        hermes.plugins.discover_plugins(force=True)
        loaded = hermes.plugins.get_plugin_manager()._plugins["searchfuse"]
        results = dispatch(hermes, "1", "hermes agent", "tavily api", "searchfuse")
    finally:
        configure(hermes.home, USE_SEARCHFUSE)
        hermes.plugins.discover_plugins(force=True)  # drops the plugin's hook again
        plugin = active_plugin()
        if plugin is not None:
            plugin.uninstall()
        keys_file.unlink()

    assert (loaded.enabled, loaded.error, loaded.manifest.source) == (True, None, "entrypoint")
    assert plugin is not None and plugin.per_turn == 2  # read from config.yaml
    assert sorted(str(r.query) for r in fake_tavily.searches) == ["hermes agent", "tavily api"]
    assert results["1-2"] == {"error": TurnLimitReached(2).message}


def test_install_routes_a_script_without_the_plugin_system(
    hermes: SimpleNamespace,
    router: Router,
    fake_tavily: FakeTavily,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tools.web_tools import web_search_tool  # type: ignore[import-untyped]

    from searchfuse.integrations.hermes import SearchFusePlugin, install

    bundled = hermes.registry.get_provider("tavily")
    configure(hermes.home)  # no search backend chosen: Hermes picks tavily by its key
    monkeypatch.setenv("TAVILY_API_KEY", KEY)
    plugin = install(SearchFusePlugin(router=router))
    try:
        first = json.loads(web_search_tool("hermes agent"))
        second = json.loads(web_search_tool("tavily api"))  # the same burst: one turn
    finally:
        plugin.uninstall()
        configure(hermes.home, USE_SEARCHFUSE)

    assert first["success"] is True
    assert second == {"success": False, "error": ONE_PER_REPLY}
    # Hermes' own provider sends the key in the body, which the fake refuses:
    # a bearer key on the one request proves searchfuse served it.
    assert [(r.path, r.key_fingerprint) for r in fake_tavily.requests] == [
        ("/search", fingerprint(KEY))
    ]
    assert hermes.registry.get_provider("tavily") is bundled
    assert hermes.registry.get_provider("searchfuse") is None


def test_the_hook_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    from searchfuse.integrations.hermes import SearchFusePlugin

    class BrokenRouter:
        def ensure_available(self) -> None:
            raise RuntimeError("state file unreadable")

    plugin = SearchFusePlugin(router=BrokenRouter())  # type: ignore[arg-type]

    with caplog.at_level(logging.ERROR, logger="searchfuse.integrations.hermes"):
        answer = plugin.pre_tool_call(
            tool_name="web_search", args={"query": "q"}, api_request_id="r:api:1"
        )

    assert answer is None  # allowed (the provider still guards the search), and said so
    assert "hook failed" in caplog.text


def test_the_hook_admits_exactly_per_turn_searches_from_many_threads(router: Router) -> None:
    from searchfuse.integrations.hermes import SearchFusePlugin

    plugin = SearchFusePlugin(router=router, per_turn=2)
    start = threading.Barrier(16)
    answers: list[dict[str, str] | None] = []
    lock = threading.Lock()

    def call(n: int) -> None:
        start.wait()
        answer = plugin.pre_tool_call(
            tool_name="web_search", args={"query": f"q{n}"}, api_request_id="r:api:1"
        )
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=call, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert answers.count(None) == 2
    blocked = [a for a in answers if a is not None]
    assert blocked == [{"action": "block", "message": TurnLimitReached(2).message}] * 14


def test_a_second_install_replaces_the_first(
    hermes: SimpleNamespace,
    fake_tavily: FakeTavily,
    fake_clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tools.web_tools import web_search_tool  # type: ignore[import-untyped]

    from searchfuse.integrations.hermes import SearchFusePlugin, active_plugin, install

    elsewhere = FakeTavily(keys=[OTHER], clock=fake_clock)  # another upstream, another key
    bundled = hermes.registry.get_provider("tavily")
    manager = hermes.plugins.get_plugin_manager()
    configure(hermes.home)  # no search backend chosen: Hermes picks tavily by its key
    monkeypatch.setenv("TAVILY_API_KEY", KEY)
    first_router = Router([KEY], transport=fake_tavily.transport(), clock=fake_clock)
    second_router = Router([OTHER], transport=elsewhere.transport(), clock=fake_clock)
    first = install(SearchFusePlugin(router=first_router))
    second = install(SearchFusePlugin(router=second_router))
    try:
        found = json.loads(web_search_tool("hermes agent"))
        hooks = list(manager._hooks.get("pre_tool_call", []))
        serving = hermes.registry.get_provider("tavily")
        active = active_plugin()
    finally:
        second.uninstall()
        configure(hermes.home, USE_SEARCHFUSE)

    assert found["success"] is True
    assert fake_tavily.searches == []  # the first plugin's keys and upstream serve nothing
    assert [r.key_fingerprint for r in elsewhere.searches] == [fingerprint(OTHER)]
    assert first.pre_tool_call not in hooks and second.pre_tool_call in hooks
    assert serving._plugin is second and serving._forward is bundled
    assert active is second
    # Uninstalled: Hermes is as it was, and no plugin is active.
    assert active_plugin() is None
    assert hermes.registry.get_provider("tavily") is bundled
    assert hermes.registry.get_provider("searchfuse") is None
    assert second.pre_tool_call not in manager._hooks.get("pre_tool_call", [])


@pytest.mark.parametrize("bad", ["", "   ", "x" * 401, "\ud800"])
def test_a_query_refused_before_sending_leaves_the_reply_its_search(
    router: Router, fake_tavily: FakeTavily, bad: str
) -> None:
    from searchfuse.integrations.hermes import SearchFusePlugin

    plugin = SearchFusePlugin(router=router)

    def hook(query: str) -> dict[str, str] | None:
        answer: dict[str, str] | None = plugin.pre_tool_call(
            tool_name="web_search", args={"query": query}, api_request_id="r:api:1"
        )
        return answer

    assert hook(bad) is None
    failed = plugin.search(bad)
    assert failed["success"] is False
    assert failed["error"].startswith("the request was not sent")
    assert hook("python 3.13") is None  # the reply's one search is still there
    assert plugin.search("python 3.13")["success"] is True
    assert [r.query for r in fake_tavily.searches] == ["python 3.13"]


def test_after_a_failed_search_the_hook_says_it_failed(
    router: Router, fake_tavily: FakeTavily
) -> None:
    from searchfuse.integrations.hermes import SearchFusePlugin

    plugin = SearchFusePlugin(router=router)
    fake_tavily.fail_next(400, path="/search")
    assert (
        plugin.pre_tool_call(
            tool_name="web_search", args={"query": "python 3.13"}, api_request_id="r:api:1"
        )
        is None
    )
    assert plugin.search("python 3.13")["success"] is False
    blocked = plugin.pre_tool_call(
        tool_name="web_search", args={"query": "rust 2024"}, api_request_id="r:api:1"
    )
    assert blocked is not None
    assert blocked["message"] == TurnLimitReached(1, failed=True).message
    assert "Use the result" not in blocked["message"]


# -- spend: a Hermes session is the conversation its budget counts ---------------------------


def test_a_conversation_budget_refuses_a_sessions_third_search_and_not_another_sessions(
    hermes: SimpleNamespace, fake_tavily: FakeTavily, tavily_server: str
) -> None:
    from hermes_cli.plugins import (  # type: ignore[import-untyped]
        PluginContext,
        PluginManifest,
    )

    from searchfuse.integrations.hermes import SearchFusePlugin

    budget = Budget(2, unit="searches", per="conversation")
    refused = BudgetExhausted(budget, 2).message
    assert "this conversation has used its 2 web searches" in refused
    assert "answer from what you have" in refused
    manager = hermes.plugins.get_plugin_manager()
    with Router([KEY, OTHER], base_url=tavily_server, budgets=[budget]) as router:
        plugin = SearchFusePlugin(router=router)
        plugin.register(PluginContext(PluginManifest(name="searchfuse"), manager))
        try:
            # One reply per search, each reply id its query.
            a = [dispatch(hermes, q, q, session="s-a")[f"{q}-0"] for q in "abc"]
            b = [dispatch(hermes, q, q, session="s-b")[f"{q}-0"] for q in "de"]
            # An application's own spend_scope(conversation=...) wins over the session.
            with spend_scope(conversation="chat-7"):
                chat = [dispatch(hermes, q, q, session=f"s-{q}")[f"{q}-0"] for q in "fgh"]
        finally:
            plugin.uninstall()

    # Each session's first two searches were served; the third in session a was
    # refused unsent, and the model read why as the tool's result.
    assert [r.query for r in fake_tavily.searches][:4] == ["a", "b", "d", "e"]
    assert [r["success"] for r in a[:2] + b] == [True] * 4
    assert a[2] == {"success": False, "error": refused}
    assert [r.query for r in fake_tavily.searches][4:] == ["f", "g"]
    assert chat[2] == {"success": False, "error": refused}


def test_a_missing_query_is_the_models_to_fix_and_sends_nothing(
    router: Router, fake_tavily: FakeTavily
) -> None:
    from searchfuse.integrations.hermes import SearchFusePlugin

    plugin = SearchFusePlugin(router=router)
    failed = plugin.search(None)  # type: ignore[arg-type]  # a model's malformed call
    assert failed["success"] is False
    assert failed["error"].startswith("the request was not sent: query must be")
    assert plugin.search("python 3.13")["success"] is True
    assert [r.query for r in fake_tavily.searches] == ["python 3.13"]


def test_an_unforeseen_error_is_told_in_the_same_words_and_logged_keys_masked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import httpx

    from searchfuse.integrations._search_tools import UNFORESEEN
    from searchfuse.integrations.hermes import SearchFusePlugin

    def explode(request: httpx.Request) -> httpx.Response:
        raise RuntimeError(f"proxy plugin failed for {KEY}")

    with Router([KEY, OTHER], transport=httpx.MockTransport(explode)) as router:
        failed = SearchFusePlugin(router=router).search("python 3.13")
    assert failed["success"] is False
    assert failed["error"] == UNFORESEEN.format(error="RuntimeError")
    assert "proxy plugin failed" in caplog.text and KEY not in caplog.text
