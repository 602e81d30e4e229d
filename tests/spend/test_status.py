"""Budgets where people and programs look: `SEARCHFUSE_BUDGETS` configures them for
routers made from the environment or a keys file (so for the CLI and the gateway), and
`searchfuse status` shows what every process sharing the store has used and has left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchfuse import Budget, BudgetExhausted, ConfigError, Router, spend_scope
from searchfuse.cli import main
from searchfuse.testing import FakeTavily

from ..scripted import isolate_cli
from .conftest import K1, K2

BUDGETS = "3 searches per conversation, 10 credits per router, 4 searches per user a month"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch)
    path = tmp_path / "state.db"
    monkeypatch.setenv("SEARCHFUSE_STATE", str(path))
    monkeypatch.setenv("TAVILY_API_KEYS", f"{K1},{K2}")
    monkeypatch.setenv("SEARCHFUSE_BUDGETS", BUDGETS)
    return path


def spend_some(fake: FakeTavily) -> None:
    """What an application sharing the store spent: c-1 all of its 3, c-2 one."""
    router = Router.from_env(transport=fake.transport())
    with spend_scope(user="alice", conversation="c-1"):
        for n in range(3):
            router.search(f"question {n}", search_depth="advanced" if n == 0 else "basic")
        with pytest.raises(BudgetExhausted):
            router.search("one too many")
    with spend_scope(user="bob", conversation="c-2"):
        router.search("bob's question")


def test_searchfuse_budgets_configures_a_router_from_the_environment(state: Path) -> None:
    router = Router.from_env()
    assert router.budgets()[0].budget == Budget(3, per="conversation")
    assert [r.budget.describe() for r in router.budgets()] == [
        b.strip() for b in BUDGETS.split(",")
    ]
    # budgets= wins over the variable.
    assert Router.from_env(budgets=[]).budgets() == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ten searches per user", "the limit 'ten' is not a number"),
        ("10 searches per team", "per must be one of"),
        ("10 searches per user a week", "LIMIT UNIT per WHOSE [a day | a month]"),
        ("10 searches", "LIMIT UNIT per WHOSE"),
        ("-1 searches per user", "finite number of 0 or more"),
        ("nan searches per user", "finite number of 0 or more"),
        ("10 dollars per user", "unit must be one of"),
    ],
)
def test_a_bad_budget_in_the_environment_names_the_variable(
    state: Path, monkeypatch: pytest.MonkeyPatch, text: str, says: str
) -> None:
    monkeypatch.setenv("SEARCHFUSE_BUDGETS", f"3 searches per conversation, {text}")
    with pytest.raises(ConfigError, match="SEARCHFUSE_BUDGETS") as refused:
        Router.from_env()
    assert says in str(refused.value)


def test_status_shows_each_budgets_use(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeTavily((K1, K2))
    spend_some(fake)
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    budgets = out[out.index("\nbudgets\n") :].splitlines()[2:]
    assert budgets[0] == (
        "  3 searches per conversation: 2 conversations counted, 1 used all; most c-1 3, c-2 1"
    )
    assert budgets[1] == "  10 credits per router: 5 used, 5 left"
    assert budgets[2].startswith(
        "  4 searches per user a month: 2 users counted, 0 used all; most alice 3, bob 1, "
        "resets in "
    )


def test_status_budgets_json_for_one_conversation_and_user(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spend_some(FakeTavily((K1, K2)))
    assert main(["status", "--budgets", "--json", "--conversation", "c-1", "--user", "bob"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["budget"], r["used"], r["left"], r.get("who")) for r in rows] == [
        ("3 searches per conversation", 3, 0, "c-1"),
        ("10 credits per router", 5, 5, None),
        ("4 searches per user a month", 1, 3, "bob"),
    ]
    assert main(["status", "--budgets"]) == 0
    assert capsys.readouterr().out.startswith("budgets\n  3 searches per conversation: 2 ")


def test_status_without_budgets_shows_no_budget_section(
    state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SEARCHFUSE_BUDGETS")
    assert main(["status"]) == 0
    assert "budgets" not in capsys.readouterr().out
    assert main(["status", "--budgets"]) == 0
    assert capsys.readouterr().out == "budgets\n  no budgets set\n"
    assert main(["status", "--budgets", "--user", " "]) == 2
    assert "must not be blank" in capsys.readouterr().err
