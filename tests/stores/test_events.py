"""The event log on every store: written with the change that caused it, seen by every
router sharing the store, bounded, and never holding a raw key."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from searchfuse import RateLimited, Router
from searchfuse.router.state import (
    MAX_EVENTS,
    Event,
    JsonFileStore,
    RedisStore,
    SqliteStore,
    State,
    Store,
)
from searchfuse.testing import FakeClock, FakeTavily

from .conftest import Opener

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]


def router(store: Store, fake: FakeTavily, clock: FakeClock, **kw: Any) -> Router:
    return Router(
        KEYS, state=store, transport=fake.transport(), clock=clock, sleep=clock.advance, **kw
    )


def stored_text(store: Store) -> str:
    """Everything the store keeps, as text (to look for raw keys)."""
    if isinstance(store, JsonFileStore):
        return store.path.read_text()
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            return "\n".join(repr(row) for row in conn.execute("SELECT * FROM events"))
    if isinstance(store, RedisStore):
        return "\n".join(store.client.lrange(f"{store.ns}:events", 0, -1))
    return repr(store.events(MAX_EVENTS))


def test_a_429_in_one_router_shows_in_another_routers_events(opener: Opener) -> None:
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    first = router(opener(), fake, clock)
    fake.fail_next(429, retry_after=30, path="/search", detail="slow down")
    with pytest.raises(RateLimited):
        first.search("q")

    other = router(opener(), fake, clock)
    events = other.events()
    kinds = [e.kind for e in events]
    assert kinds[:2] == ["hold", "rate_limited"]  # newest first: the hold came with the 429
    limited = events[1]
    served_by = first.status()[0]
    assert limited.key == served_by.key and limited.fingerprint == served_by.fingerprint
    assert limited.provider == "tavily"
    assert limited.retry_after == pytest.approx(30)
    assert limited.until == pytest.approx(clock() + 30)
    assert limited.detail.startswith("429")
    shown = json.dumps([e.to_dict() for e in events])
    assert limited.to_dict()["time"].endswith("Z")
    for key in KEYS:
        assert key not in shown
        assert key not in stored_text(other._core.ledger.store)


def test_a_cooldown_that_ends_with_a_served_search_is_logged(opener: Opener) -> None:
    clock = FakeClock()
    fake = FakeTavily(KEYS[:1], clock=clock)
    one = Router(
        KEYS[:1], state=opener(), transport=fake.transport(), clock=clock, sleep=clock.advance
    )
    fake.fail_next(429, retry_after=5, path="/search")
    with pytest.raises(RateLimited):
        one.search("q")
    clock.advance(6)
    one.search("q")
    events = router(opener(), fake, clock).events()
    assert [e.kind for e in events][:1] == ["cooldown_cleared"]
    assert events[0].key == one.status()[0].key


def test_the_log_keeps_the_newest_events_only(opener: Opener) -> None:
    store = opener()
    for i in range(MAX_EVENTS + 30):
        store.update(float(1000 + i), lambda s, i=i: s.note(Event(1000.0 + i, "budget", None)))
    again = opener()
    events = again.events(MAX_EVENTS + 50)
    assert len(events) == MAX_EVENTS
    assert events[0].time == 1000.0 + MAX_EVENTS + 29
    assert events[-1].time == 1030.0
    assert [e.time for e in again.events(3)] == [1229.0, 1228.0, 1227.0]
    assert again.events(0) == []


def test_a_raw_key_in_an_event_text_is_never_stored(opener: Opener) -> None:
    store = opener()
    raw = "tvly-dev-abcdefghijklmnop1234"

    def change(state: State) -> None:
        state.note(Event(5.0, "passed_over", "tavily", None, f"upstream echoed {raw}"))

    store.update(5.0, change)
    (event,) = opener().events()
    assert raw not in event.detail and "upstream echoed" in event.detail
    assert raw not in stored_text(store)


def test_a_budget_refusal_is_logged(opener: Opener) -> None:
    from searchfuse import Budget, BudgetExhausted

    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    one = router(opener(), fake, clock, budgets=[Budget(limit=1, per="router")])
    one.search("q")
    with pytest.raises(BudgetExhausted):
        one.search("q2")
    events = router(opener(), fake, clock).events()
    assert events[0].kind == "budget" and "1 of 1" in events[0].detail


def test_a_damaged_stored_event_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    store.update(1.0, lambda s: s.note(Event(1.0, "hold", None, "fp1", "", 3.0, 4.0)))
    data = json.loads(path.read_text())
    data["events"].insert(0, {"time": "soon", "kind": 7})
    path.write_text(json.dumps(data))
    assert [e.kind for e in JsonFileStore(path).events()] == ["hold"]
