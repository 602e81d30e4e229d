"""The chain under cases its first tests did not try, over real HTTP on loopback: a bound
one provider cannot honour, the fallback behind providers that are not Tavily, a pass-over
whose verdict would read "stale", and what each reached and was told.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from searchfuse import BadRequest, ConfigError, NoKeyAvailable, Router
from searchfuse.guard import web_tool
from searchfuse.testing import FakeBrave, FakeClock, FakeExa, FakeSearXNG, FakeTavily

TAVILY_KEY = "tvly-dev-test0001"
EXA_KEY = "0a1b2c3d-0000-4000-8000-00000000e5a1"
BRAVE_KEY = "BSAtest00000000000000000001"

MODES = pytest.mark.parametrize("mode", ["sync", "async"])


class Servers:
    """Every simulator on its own loopback port, sharing the test's clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.tavily = FakeTavily(keys=[TAVILY_KEY], clock=clock)
        self.exa = FakeExa(keys=[EXA_KEY], clock=clock)
        self.brave = FakeBrave(keys=[BRAVE_KEY], clock=clock)
        self.searxng = FakeSearXNG(clock=clock)
        self.urls: dict[str, str] = {}

    def router(self, keys: dict[str, list[str]], **kw: Any) -> Router:
        named = {name: self.urls[name] for name in keys if name in ("exa", "brave")}
        keys = {n: [self.urls["searxng"]] if n == "searxng" else k for n, k in keys.items()}
        return Router(
            keys,
            base_url=self.urls["tavily"],
            base_urls=named,
            clock=self.clock,
            sleep=self.clock.advance,
            **kw,
        )


@pytest.fixture
def servers(fake_clock: FakeClock) -> Iterator[Servers]:
    s = Servers(fake_clock)
    with (
        s.tavily.serve() as tavily,
        s.exa.serve() as exa,
        s.brave.serve() as brave,
        s.searxng.serve() as searxng,
    ):
        s.urls = {"tavily": tavily, "exa": exa, "brave": brave, "searxng": searxng}
        yield s


def search(router: Router, mode: str, query: str = "q", **params: Any) -> dict[str, Any]:
    if mode == "sync":
        return router.search(query, **params)
    return asyncio.run(router.asearch(query, **params))


def _moves(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "passed over" in r.getMessage()]


@MODES
def test_a_bound_one_provider_cannot_honour_passes_it_over(servers: Servers, mode: str) -> None:
    # Brave returns at most 20 results, Tavily too; Exa up to 100.
    for head in ("brave", "tavily"):
        key = BRAVE_KEY if head == "brave" else TAVILY_KEY
        router = servers.router({head: [key], "exa": [EXA_KEY]})
        result = search(router, mode, max_results=50)
        assert result["searchfuse"]["served_by"] == "exa"
        assert result["searchfuse"]["degraded"] == {
            "from": head,
            "reason": "unsupported",
            "serving": "exa",
        }
    assert servers.brave.searches == [] and servers.tavily.searches == []
    assert [r.body["numResults"] for r in servers.exa.searches] == [50, 50]  # type: ignore[index]
    # A value no provider can send is the caller's to fix: nothing is sent anywhere.
    router = servers.router({"brave": [BRAVE_KEY], "exa": [EXA_KEY]})
    with pytest.raises(BadRequest) as raised:
        search(router, mode, max_results="many")
    assert raised.value.sent is False and "Brave" in str(raised.value)
    assert len(servers.exa.searches) == 2 and servers.brave.searches == []


@MODES
def test_the_fallback_is_the_last_link_after_a_provider_that_cannot_honour(
    servers: Servers, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    def fallback(query: str, **params: Any) -> dict[str, Any]:
        asked.append((query, params))
        return {"query": query, "results": [{"title": "t", "url": "https://local/1"}]}

    async def afallback(query: str, **params: Any) -> dict[str, Any]:
        return fallback(query, **params)

    servers.exa.revoke(EXA_KEY)
    router = servers.router(
        {"exa": [EXA_KEY], "searxng": ["-"]}, fallback=fallback if mode == "sync" else afallback
    )
    # Exa rejects its key; SearXNG cannot limit results to a domain: the fallback serves.
    result = search(router, mode, "rust", max_results=3, include_domains=["rust-lang.org"])
    assert result["searchfuse"]["served_by"] == "fallback"
    assert result["searchfuse"]["degraded"] == {
        "from": "exa",
        "reason": "auth",
        "serving": "fallback",
    }
    assert asked == [("rust", {"max_results": 3, "include_domains": ["rust-lang.org"]})]
    assert servers.searxng.searches == []
    assert [m for m in _moves(caplog)] == [
        "Exa is passed over (auth: every key was rejected (401/403)); fallback serves instead"
    ]


@MODES
def test_the_fallback_is_given_the_callers_parameters_behind_any_provider(
    servers: Servers, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    def fallback(query: str, **params: Any) -> dict[str, Any]:
        asked.append((query, params))
        return {"query": query, "results": []}

    async def afallback(query: str, **params: Any) -> dict[str, Any]:
        return fallback(query, **params)

    servers.tavily.revoke(TAVILY_KEY)
    servers.brave.revoke(BRAVE_KEY)
    router = servers.router(
        {"tavily": [TAVILY_KEY], "brave": [BRAVE_KEY]},
        fallback=fallback if mode == "sync" else afallback,
    )
    result = search(router, mode, "zig", max_results=4, time_range="week")
    # Brave's wire format (`q`, `count`, `freshness`) is Brave's; the fallback gets Tavily's.
    assert asked == [("zig", {"max_results": 4, "time_range": "week"})]
    assert result["searchfuse"]["served_by"] == "fallback"
    assert [r.status for r in servers.brave.searches] == [422]
    # Every provider the call went past is named, the last one too.
    assert [m.split(" (")[0] for m in _moves(caplog)] == [
        "Tavily is passed over",
        "Brave is passed over",
    ]


@MODES
def test_a_key_flagged_exhausted_is_passed_over_as_exhausted_not_stale(
    servers: Servers, mode: str
) -> None:
    router = servers.router({"tavily": [TAVILY_KEY], "exa": [EXA_KEY]})
    # A 432 flags the key exhausted, while Tavily's /usage still shows room: the
    # diagnosis of the key reads "stale", but the key is out of the chain for now.
    servers.tavily.fail_next(432, path="/search")
    first = search(router, mode)
    second = search(router, mode, "again")
    for result in (first, second):
        assert result["searchfuse"]["degraded"] == {
            "from": "tavily",
            "reason": "exhausted",
            "serving": "exa",
        }
    assert [r.status for r in servers.tavily.searches] == [432]


def test_brave_s_last_search_of_the_month_makes_a_fresh_key_exhausted(servers: Servers) -> None:
    # The key's first answer through this router is its month's last: Brave's headers
    # say 0 left, and nothing more is sent to Brave this month.
    servers.brave.set_spent(BRAVE_KEY, 1999)
    router = servers.router({"brave": [BRAVE_KEY], "exa": [EXA_KEY]})
    assert router.search("q")["searchfuse"]["served_by"] == "brave"
    (brave, _) = router.status()
    assert brave.state == "exhausted"
    servers.clock.advance(2)
    result = router.search("next")
    assert result["searchfuse"]["served_by"] == "exa"
    assert result["searchfuse"]["degraded"]["reason"] == "exhausted"
    assert [r.status for r in servers.brave.searches] == [200]


def _texts(diagnosis: Any) -> str:
    parts = [diagnosis.advice]
    for step in diagnosis.steps:
        parts.append(step.finding)
        parts.extend(str(ev) for ev in step.evidence)
    return "\n".join(parts)


def test_a_diagnosis_names_each_provider_s_own_probe(servers: Servers) -> None:
    servers.brave.set_spent(BRAVE_KEY, 1999)
    router = servers.router({"brave": [BRAVE_KEY], "exa": [EXA_KEY], "searxng": ["-"]})
    router.search("the month's last")
    # Exa fails: its only key parks after a 503.
    servers.exa.fail_next(503)
    servers.clock.advance(2)
    assert router.search("next")["searchfuse"]["served_by"] == "searxng"
    healthz = len([r for r in servers.searxng.requests if r.path == "/healthz"])
    for probe in (False, True):
        diagnosis = router.diagnose(probe=probe)
        assert diagnosis.verdict == "healthy"
        assert diagnosis.by_provider == {
            "brave": "exhausted",
            "exa": "upstream",
            "searxng": "healthy",
        }
        text = _texts(diagnosis)
        findings = {s.name: s.finding for s in diagnosis.steps}
        # Tavily's /usage is no part of a chain without Tavily.
        assert "/usage" not in text and "Tavily" not in text
        assert "Brave: not probed: a probe costs a search" in findings["probe"]
        assert "Exa: not probed: a probe costs a search" in findings["probe"]
        assert "Exa: upstream: Exa failed for every key" in findings["verdict"]
        # Until Brave's own month resets (its X-RateLimit-Reset), not the calendar's.
        assert "Brave: exhausted: every key is out of credits until 20" in findings["verdict"]
        assert "(Brave's own reset)" in findings["verdict"]
    assert "SearXNG: /healthz answered 200 for 1 of 1" in findings["probe"]
    probes = [r.status for r in servers.searxng.requests if r.path == "/healthz"]
    assert probes[healthz:] == [200]  # the one probe of diagnose(probe=True)
    # Only SearXNG's free probe was asked: no search was spent by the diagnosis.
    assert [r.status for r in servers.brave.searches] == [200]
    assert [r.status for r in servers.exa.searches] == [503]
    brave = router.status()[0]
    # The key's month ends on Brave's cycle (X-RateLimit-Reset), here 30 days on.
    assert brave.blocked_reason is not None
    assert brave.blocked_reason.startswith("quota exhausted until 20")
    assert brave.blocked_reason.endswith("(Brave's reset, in 30 d)")


@pytest.mark.parametrize(
    ("env", "field", "problem", "fix"),
    [
        (
            {"EXA_API_KEYS": f"{EXA_KEY},{TAVILY_KEY}"},
            "EXA_API_KEYS",
            "key 2 of 2: tvly-dev-…0001 looks like Tavily's key, not Exa's",
            "move it to TAVILY_API_KEYS",
        ),
        (
            {"TAVILY_API_KEY": BRAVE_KEY},
            "TAVILY_API_KEY",
            "key 1 of 1: …0001 looks like Brave's key, not Tavily's",
            "move it to BRAVE_API_KEYS",
        ),
        (
            {"SEARXNG_URL": "searx.local:8888"},
            "SEARXNG_URL",
            "has no http:// or https:// scheme",
            "SEARXNG_URL=http://127.0.0.1:8888",
        ),
    ],
)
def test_a_mistake_in_the_environment_names_the_variable_and_its_own_fix(
    env: dict[str, str], field: str, problem: str, fix: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        Router.from_env(environ=env)
    error = raised.value
    assert (error.source, error.field) == ("environment", field)
    assert problem in error.problem and fix in error.fix
    for value in env.values():  # no key of any provider in the message
        if value not in ("exa", "searx.local:8888"):
            for key in value.split(","):
                assert key not in str(error)


def test_a_return_and_the_next_move_down_are_named_by_whichever_router_sees_them(
    servers: Servers, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two routers sharing SQLite (two processes of a fleet): one meets Tavily's outage
    and names it; only the other serves after it ends, and meets the next outage."""
    state = tmp_path / "state" / "searchfuse.db"
    one, two = (
        servers.router({"tavily": [TAVILY_KEY], "exa": [EXA_KEY]}, state=state) for _ in "12"
    )
    caplog.set_level(logging.INFO, "searchfuse")
    servers.tavily.fail_next(503, times=None, path="/search")
    for i in range(3):
        assert one.search(f"down{i}")["searchfuse"]["served_by"] == "exa"
    servers.tavily.clear_faults()
    servers.clock.advance(3600)
    for i in range(3):
        assert two.search(f"back{i}")["searchfuse"]["served_by"] == "tavily"
    servers.tavily.fail_next(503, times=None, path="/search")
    servers.clock.advance(1)
    for i in range(4):
        router = (two, one)[i % 2]
        assert router.search(f"again{i}")["searchfuse"]["served_by"] == "exa"
    moves = [
        (r.levelno, r.getMessage().split(" (")[0])
        for r in caplog.records
        if "passed over" in r.getMessage() or "serves again" in r.getMessage()
    ]
    assert moves == [
        (logging.WARNING, "Tavily is passed over"),
        (logging.INFO, "Tavily serves again"),
        (logging.WARNING, "Tavily is passed over"),
    ]
    kinds = [e.kind for e in one.events(200) if e.kind in ("passed_over", "serves_again")]
    assert kinds == ["passed_over", "serves_again", "passed_over"]  # newest first


@pytest.mark.parametrize(
    ("entry", "fix"),
    [
        (
            {"provider": "exa", "key": EXA_KEY, "url": "http://127.0.0.1:9"},
            'set EXA_BASE_URL or Router(base_urls={"exa": ...})',
        ),
        (
            {"key": TAVILY_KEY, "url": "http://127.0.0.1:9"},
            "set TAVILY_BASE_URL or Router(base_url=...)",
        ),
    ],
)
def test_a_url_on_an_entry_whose_key_is_not_an_address_is_refused(
    tmp_path: Path, entry: dict[str, str], fix: str
) -> None:
    path = tmp_path / "config" / "keys.json"
    path.parent.mkdir()
    text = json.dumps({"format_version": 2, "keys": [entry]})
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(ConfigError) as raised:
        Router.from_config(path)
    error = raised.value
    assert (error.source, error.field) == (str(path), "keys[0].url")
    assert "only a SearXNG entry has a url" in error.problem and fix in error.fix
    assert EXA_KEY not in str(error) and TAVILY_KEY not in str(error)
    assert path.read_text() == text  # the file is left as it was


@MODES
def test_a_misconfigured_instance_passes_searxng_over(
    servers: Servers, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    servers.searxng.json_enabled = False  # search.formats lacks json: every search is a 403
    router = servers.router({"searxng": ["-"], "exa": [EXA_KEY]})
    results = [search(router, mode, f"q{i}") for i in range(3)]
    assert all(
        r["searchfuse"]["degraded"] == {"from": "searxng", "reason": "config", "serving": "exa"}
        for r in results
    )
    assert len(servers.exa.searches) == 3
    (warning,) = _moves(caplog)
    assert "SearXNG is passed over (config:" in warning
    assert "add json to search.formats" in warning and "Exa serves instead" in warning
    # Alone, the instance's fix is the caller's to make.
    alone = servers.router({"searxng": ["-"]})
    with pytest.raises(ConfigError, match=r"search\.formats"):
        search(alone, mode)


@MODES
def test_a_request_one_provider_refuses_is_served_by_the_next(servers: Servers, mode: str) -> None:
    router = servers.router({"exa": [EXA_KEY], "tavily": [TAVILY_KEY]})
    servers.exa.fail_next(400, detail="numResults is above your plan's limit")
    result = search(router, mode, max_results=12)
    assert result["searchfuse"]["served_by"] == "tavily"
    assert result["searchfuse"]["degraded"] == {
        "from": "exa",
        "reason": "unsupported",
        "serving": "tavily",
    }
    (refused,) = servers.exa.searches
    assert refused.status == 400
    # The key that was refused a request is not penalised: the next search uses it.
    assert search(router, mode, "next")["searchfuse"]["served_by"] == "exa"
    # The last provider's refusal reaches the caller, with its words.
    servers.tavily.fail_next(400, detail="query is malformed", path="/search")
    servers.exa.fail_next(400, detail="query is malformed")
    with pytest.raises(BadRequest, match="Tavily rejected the request"):
        search(router, mode, "third")


@pytest.mark.parametrize("chained", [False, True])
def test_the_guards_web_search_reaches_the_fallback_when_no_provider_can_serve(
    servers: Servers, chained: bool
) -> None:
    asked: list[str] = []

    def fallback(query: str, **params: Any) -> dict[str, Any]:
        asked.append(query)
        return {"query": query, "results": [{"title": "t", "url": "https://local/1"}]}

    keys = {"tavily": [TAVILY_KEY], "exa": [EXA_KEY]} if chained else {"tavily": [TAVILY_KEY]}
    router = servers.router(keys, fallback=fallback)
    servers.tavily.revoke(TAVILY_KEY)
    servers.exa.revoke(EXA_KEY)
    web_search = web_tool(router, on_refusal="return", per_turn=None)
    first = web_search("rust 2024")
    # Every key is now refused, and the state says so: the guard still lets the
    # fallback stand in instead of refusing the search.
    second = web_search("zig 0.14")
    assert not isinstance(first, str) and not isinstance(second, str)
    assert [r["searchfuse"]["served_by"] for r in (first, second)] == ["fallback", "fallback"]
    assert asked == ["rust 2024", "zig 0.14"]
    # A rate limit is another matter: the fallback does not stand in during a hold.
    servers.tavily.restore(TAVILY_KEY)
    servers.clock.advance(3601)
    servers.tavily.fail_next(429, retry_after=30, path="/search")
    assert "429" in str(web_search("held"))
    assert "cooling down" in str(web_search("still held"))
    assert asked == ["rust 2024", "zig 0.14"]


@MODES
def test_the_diagnosis_is_healthy_while_a_provider_whose_state_was_stale_can_serve(
    servers: Servers, mode: str
) -> None:
    router = servers.router({"tavily": [TAVILY_KEY], "exa": [EXA_KEY]})
    servers.tavily.revoke(TAVILY_KEY)
    servers.exa.fail_next(503)
    with pytest.raises(NoKeyAvailable):
        search(router, mode)
    servers.clock.advance(61)  # Exa's cooldown ran out: the state is stale, Exa can serve
    diagnosis = router.diagnose() if mode == "sync" else asyncio.run(router.adiagnose())
    assert diagnosis.by_provider == {"tavily": "auth", "exa": "stale"}
    assert diagnosis.verdict == "healthy" and diagnosis.retry_after is None
    assert search(router, mode, "now")["searchfuse"]["served_by"] == "exa"


@MODES
def test_retry_spends_each_provider_s_retries_while_another_s_hold_runs(
    servers: Servers, mode: str
) -> None:
    router = servers.router(
        {"tavily": [TAVILY_KEY], "exa": [EXA_KEY], "brave": [BRAVE_KEY]}, on_429="retry"
    )
    servers.tavily.fail_next(429, times=3, retry_after=5, path="/search")
    assert search(router, mode, "one")["searchfuse"]["served_by"] == "exa"
    # Tavily's hold runs; Exa's own 429s are retried as Tavily's were, then Brave serves.
    servers.exa.fail_next(429, times=3, retry_after=1)
    result = search(router, mode, "two")
    assert result["searchfuse"]["served_by"] == "brave"
    assert [r.status for r in servers.tavily.searches] == [429, 429, 429]
    assert [r.status for r in servers.exa.searches] == [200, 429, 429, 429]
    assert servers.exa.faults == []


def test_a_provider_whose_every_key_is_disabled_is_said_to_go_down_the_chain(
    servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    router = servers.router({"exa": [{"key": EXA_KEY, "disabled": True}], "tavily": [TAVILY_KEY]})
    (startup,) = [
        r.getMessage() for r in caplog.records if "disabled or exhausted" in r.getMessage()
    ]
    # Not "searches will fail": the chain has another provider.
    assert startup.endswith("searches go down the chain to Tavily")
    result = router.search("q")
    assert result["searchfuse"]["degraded"] == {
        "from": "exa",
        "reason": "config",
        "serving": "tavily",
    }
    assert servers.exa.requests == []
    assert router.diagnose().verdict == "healthy"


@MODES
def test_a_busy_provider_spilling_over_is_one_move_over_a_hundred_searches(
    servers: Servers, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    servers.brave.set_balance(BRAVE_KEY, None)  # one a second, no monthly quota
    router = servers.router({"brave": [BRAVE_KEY], "exa": [EXA_KEY]}, overflow=True)
    caplog.set_level(logging.INFO, "searchfuse")

    async def many(count: int, step: float) -> list[str]:
        out = []
        for i in range(count):
            out.append((await router.asearch(f"q{i}"))["searchfuse"]["served_by"])
            servers.clock.advance(step)
        return out

    def run(count: int, step: float) -> list[str]:
        if mode == "async":
            return asyncio.run(many(count, step))
        out = []
        for i in range(count):
            out.append(router.search(f"q{i}")["searchfuse"]["served_by"])
            servers.clock.advance(step)
        return out

    # Two searches a second against Brave's one: every other search spills to Exa.
    served = run(100, 0.5)
    assert served.count("brave") >= 33 and served.count("exa") >= 50
    assert [m.split(" (")[0] for m in _moves(caplog)] == ["Brave is passed over"]
    # Calm again: Brave serves everything, and its return is named once, a minute on.
    servers.clock.advance(5)
    assert set(run(40, 2.0)) == {"brave"}
    infos = [r.getMessage() for r in caplog.records if "serves again" in r.getMessage()]
    assert infos == ["Brave serves again"]


@MODES
def test_when_every_provider_is_passed_over_the_caller_gets_each_one_s_verdict(
    servers: Servers, mode: str
) -> None:
    servers.tavily.revoke(TAVILY_KEY)  # Tavily: its only key is rejected
    servers.exa.set_balance(EXA_KEY, 0)  # Exa: out of credits
    router = servers.router({"tavily": [TAVILY_KEY], "exa": [EXA_KEY]})
    with pytest.raises(NoKeyAvailable) as raised:
        search(router, mode)
    diagnosis = raised.value.diagnosis
    assert diagnosis is not None
    assert diagnosis.by_provider == {"tavily": "auth", "exa": "exhausted"}
    assert diagnosis.to_dict()["by_provider"] == {"tavily": "auth", "exa": "exhausted"}
    # Every provider's keys are in the reasons, not only the last provider's.
    assert len(raised.value.reasons) == 2
    # As on the path where one provider served: diagnose() gives the same breakdown.
    assert router.diagnose().by_provider == {"tavily": "auth", "exa": "exhausted"}
    # With a fallback function, its result carries the same breakdown.
    backed = servers.router(
        {"tavily": [TAVILY_KEY], "exa": [EXA_KEY]}, fallback=lambda query, **kw: {"results": []}
    )
    result = search(backed, mode)
    assert result["searchfuse"]["served_by"] == "fallback"
    assert result["searchfuse"]["by_provider"] == {"tavily": "auth", "exa": "exhausted"}


@MODES
def test_a_budget_refusal_on_the_first_provider_does_not_move_down_the_chain(
    servers: Servers, mode: str
) -> None:
    from searchfuse import Budget, BudgetExhausted

    # A Tavily search is priced over what is left of the day's dollars; an Exa one is not.
    budget = Budget(0.04, unit="usd", per="router", period="day")
    router = servers.router(
        {"tavily": [TAVILY_KEY], "exa": [EXA_KEY]},
        budgets=[budget],
        prices={"tavily": 0.05, "exa": 0.005},
    )
    with pytest.raises(BudgetExhausted) as raised:
        search(router, mode)
    assert raised.value.reason == "budget" and raised.value.budget == budget
    # The budget is the caller's limit, not a provider's failure: nobody was asked.
    assert servers.tavily.searches == [] and servers.exa.searches == []
