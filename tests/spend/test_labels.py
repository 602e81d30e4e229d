"""A budget tally's period label is read as far as it can be true: one that is no
period at all is reset, one years ahead (a clock set wrong that ran once) holds a
spent budget no longer than a tally of this clock's own period would -- on every store."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from searchfuse import Budget, BudgetExhausted, Router
from searchfuse.router.state import (
    JsonFileStore,
    RedisStore,
    SqliteStore,
    Store,
    _budgets,
    _values,
)
from searchfuse.testing import FakeClock, FakeTavily

from .conftest import K1, NOON

DAY = 86400.0
#: 2099-01-01 12:00 UTC: a clock set 72 years ahead.
YEARS_AHEAD = 4070952000.0
TALLY = "router:*:searches:day"


@pytest.fixture(autouse=True)
def warned_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each warning is said once per process: said again for each test."""
    monkeypatch.setattr(_budgets, "_TOLD", set())
    monkeypatch.setattr(_values, "_WARNED", set())


def router_at(store: Store, clock: FakeClock, fake: FakeTavily) -> Router:
    return Router(
        [K1],
        state=store,
        clock=clock,
        sleep=clock.advance,
        transport=fake.transport(),
        budgets=[Budget(2, per="router", period="day")],
        pace=False,
    )


def test_a_clock_years_ahead_holds_a_spent_budget_a_day_or_two_not_for_years(
    store_factory: Callable[[], Store], caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeTavily([K1], clock=FakeClock(NOON))
    wrong = router_at(store_factory(), FakeClock(YEARS_AHEAD), fake)
    wrong.search("first, on a clock set years ahead")
    wrong.search("second: the day's budget is spent")
    clock = FakeClock(NOON)
    router = router_at(store_factory(), clock, fake)
    with pytest.raises(BudgetExhausted) as refused:
        router.search("spent, as far as anyone can tell")
    wait = refused.value.retry_after
    assert wait is not None and wait <= 2 * DAY  # was 72 years
    assert "after this clock's next" in caplog.text
    clock.advance(wait + 1)
    assert router.search("served again")["searchfuse"]["budgets"][0]["used"] == 1.0
    assert len(fake.searches) == 3


def relabel(store: Store, label: str) -> None:
    """Write `label` as the router budget's period, as a person editing the store would."""
    if isinstance(store, RedisStore):
        store.client.hset(store.tally_key(TALLY), "period", label)
    elif isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute("UPDATE tallies SET period = ? WHERE name = ?", (label, TALLY))
        conn.close()
    else:
        assert isinstance(store, JsonFileStore)
        data = json.loads(Path(store.path).read_text())
        data["tallies"][TALLY]["period"] = label
        Path(store.path).write_text(json.dumps(data))


# A store in memory keeps no text for anyone to edit: only the stores written out.
@pytest.mark.parametrize("store_factory", ["json", "sqlite", "redis"], indirect=True)
@pytest.mark.parametrize("label", ["9", "someday", "2026-12-03T00"])
def test_a_period_that_is_no_period_is_reset_with_a_warning(
    store_factory: Callable[[], Store], label: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(NOON)
    fake = FakeTavily([K1], clock=clock)
    router = router_at(store_factory(), clock, fake)
    router.search("one")
    router.search("two")
    relabel(router.store, label)
    # Read as a later period than today's, it held the budget spent for ever.
    assert router.search("three")["searchfuse"]["budgets"][0]["used"] == 1.0
    assert f"budget {TALLY}: malformed; reset" in caplog.text
    assert len(fake.searches) == 3
