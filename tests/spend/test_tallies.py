"""Budget tallies stay bounded on every store: a quiet spender's tally is forgotten, an
active one's never is (a refusal counts as activity), a period's tally goes when the
period is over; and `Router.budgets()` reports what the store holds."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from searchfuse import Budget, BudgetExhausted, Router, spend_scope
from searchfuse.router.state import RedisStore, SqliteStore, Store
from searchfuse.testing import FakeClock, FakeTavily

from .conftest import K1, K2, Make

HOUR = 3600.0


def stored(router: Router) -> dict[str, float | None]:
    """Every tally the store still holds, expired or not: name -> expiry."""
    return {n: t.expires for n, t in router.store.tallies(-math.inf).items()}


def redis_ttls(router: Router) -> list[int]:
    store = router.store
    assert isinstance(store, RedisStore)
    return [store.client.pttl(k) for k in store.client.scan_iter(match=f"{store.ns}:t:*")]


def test_a_quiet_conversation_is_forgotten_and_the_store_stays_bounded(
    make: Make, clock: FakeClock
) -> None:
    fake, router = make(budgets=[Budget(2, per="conversation", forget_after=HOUR)])
    for n in range(30):
        with spend_scope(conversation=f"c-{n}"):
            router.search(f"question {n}")
    assert len(stored(router)) == 30
    clock.advance(HOUR + 1)
    with spend_scope(conversation="c-new"):
        router.search("a new conversation makes a new tally")
    if isinstance(router.store, RedisStore):
        # Redis forgets them itself: every tally has a TTL of at most an hour.
        ttls = redis_ttls(router)
        assert len(ttls) >= 1 and all(0 < ttl <= HOUR * 1000 for ttl in ttls)
    else:
        # The other stores dropped the 30 quiet ones when the new one was made.
        assert list(stored(router)) == ["conversation:c-new:searches:"]
    assert [s.spenders for s in router.budgets()] == [1]
    # A conversation that comes back after an hour of silence starts afresh.
    with spend_scope(conversation="c-0"):
        router.search("again")
        router.search("and again")
        with pytest.raises(BudgetExhausted):
            router.search("one too many")
    assert len(fake.searches) == 33


def test_a_conversation_that_keeps_searching_never_gets_a_new_budget(
    make: Make, clock: FakeClock
) -> None:
    fake, router = make(budgets=[Budget(3, per="conversation", forget_after=HOUR)])
    with spend_scope(conversation="long"):
        for n in range(3):
            router.search(f"question {n}")
            clock.advance(HOUR * 0.9)
        # Refused every 50 minutes for ten hours: each refusal keeps the tally.
        for _ in range(12):
            with pytest.raises(BudgetExhausted):
                router.search("more")
            clock.advance(HOUR * 0.9)
            with spend_scope(conversation=f"other-{clock()}"):
                router.search("others come and go, and prune what expired")
    assert len(fake.searches) == 3 + 12
    (report,) = router.budgets(conversation="long")
    assert (report.used, report.left) == (3, 0)


def test_a_conversation_refused_by_another_budget_is_still_active(
    make: Make, clock: FakeClock
) -> None:
    fake, router = make(
        budgets=[
            Budget(3, per="conversation", forget_after=HOUR),
            Budget(2, per="router", period="day"),
        ]
    )
    with spend_scope(conversation="long"):
        router.search("one")
        router.search("two")  # the service's two for today
        for _ in range(23):  # refused by the service's budget, every half hour till 23:30
            clock.advance(HOUR / 2)
            with pytest.raises(BudgetExhausted, match="this search service"):
                router.search("more")
        clock.advance(HOUR * 0.6)  # past UTC midnight: the service has two again
        router.search("three")  # the conversation's third
        with pytest.raises(BudgetExhausted, match="this conversation"):
            router.search("four")
    assert len(fake.searches) == 3


def test_a_periods_tally_goes_a_day_after_the_period(make: Make, clock: FakeClock) -> None:
    _, router = make(budgets=[Budget(5, per="user", period="day")])
    for n in range(10):
        with spend_scope(user=f"u-{n}"):
            router.search(f"question {n}")
    clock.advance(12 * HOUR)  # a new UTC day: every user's day starts afresh
    with spend_scope(user="u-0"):
        router.search("a new day")
    assert router.budgets(user="u-0")[0].used == 1
    if not isinstance(router.store, RedisStore):
        assert len(stored(router)) == 10  # yesterday's are kept a day, for late clocks
    clock.advance(25 * HOUR)
    with spend_scope(user="u-late"):
        router.search("the day after")
    if isinstance(router.store, RedisStore):
        assert all(0 < ttl <= 2 * 86400 * 1000 for ttl in redis_ttls(router))
    else:
        # Day one's nine are gone; u-0's day two is kept until day three is over.
        assert set(stored(router)) == {"user:u-0:searches:day", "user:u-late:searches:day"}


def test_forget_after_none_keeps_every_tally(make: Make, clock: FakeClock) -> None:
    _, router = make(budgets=[Budget(1, per="conversation", forget_after=None)])
    with spend_scope(conversation="kept"):
        router.search("once")
    clock.advance(400 * 86400)
    with spend_scope(conversation="another"):
        router.search("prunes nothing")
    with spend_scope(conversation="kept"), pytest.raises(BudgetExhausted):
        router.search("still spent a year later")
    assert set(stored(router)) == {
        "conversation:kept:searches:",
        "conversation:another:searches:",
    }


def test_budgets_report_the_router_each_named_spender_and_a_summary(
    make: Make, clock: FakeClock
) -> None:
    _, router = make(
        budgets=[
            Budget(10, per="router", period="day"),
            Budget(2, per="conversation"),
            Budget(3, unit="credits", per="user", period="month"),
        ]
    )
    with spend_scope(user="alice", conversation="c-1"):
        router.search("a", search_depth="advanced")  # 2 credits
        router.search("b")
    with spend_scope(user="bob", conversation="c-2"):
        router.search("c")
    day, conversation, month = router.budgets()
    assert (day.used, day.left, day.spenders) == (3, 7, None)
    assert day.resets_at == 1796342400.0  # the next UTC midnight
    assert (conversation.used, conversation.spenders, conversation.exhausted) == (None, 2, 1)
    assert conversation.top == (("c-1", 2), ("c-2", 1))
    assert (month.spenders, month.exhausted, month.top) == (2, 1, (("alice", 3), ("bob", 1)))
    # Named, by argument or by the running scope.
    with spend_scope(user="bob"):
        named = router.budgets(conversation="c-1")
    assert [(r.used, r.left, r.who) for r in named] == [(3, 7, None), (2, 0, "c-1"), (1, 2, "bob")]
    assert named[1].to_dict() == {
        "budget": "2 searches per conversation",
        "per": "conversation",
        "unit": "searches",
        "period": None,
        "limit": 2,
        "used": 2,
        "left": 0,
        "resets_at": None,
        "who": "c-1",
        "spenders": None,
        "exhausted": None,
        "top": [],
    }
    with pytest.raises(TypeError, match="spend_scope"):
        router.budgets(user=["alice"])  # type: ignore[arg-type]


def test_no_budgets_report_nothing(make: Make) -> None:
    _, router = make()
    router.search("a")
    assert router.budgets() == []


def test_a_database_from_before_expiry_keeps_its_tallies(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "s.db"
    SqliteStore(path).close()
    with sqlite3.connect(path) as conn:  # the table as the first budgets wrote it
        conn.execute("DROP TABLE tallies")
        conn.execute("CREATE TABLE tallies (name TEXT PRIMARY KEY, period TEXT, used REAL)")
        conn.execute("INSERT INTO tallies VALUES ('conversation:old:searches:', '', 2.0)")
    fake = FakeTavily((K1, K2), clock=clock)

    def router(store: Store) -> Router:
        return Router(
            [K1, K2],
            state=store,
            clock=clock,
            transport=fake.transport(),
            budgets=[Budget(2, per="conversation", forget_after=HOUR)],
        )

    first = router(SqliteStore(path))
    with spend_scope(conversation="old"), pytest.raises(BudgetExhausted):
        first.search("its two searches were counted before the upgrade")
    # The refusal gave the old row an expiry; once it passes, a new tally prunes it.
    clock.advance(HOUR + 1)
    with spend_scope(conversation="new"):
        first.search("new")
    assert list(stored(first)) == ["conversation:new:searches:"]


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (0, "forget_after"),
        (-1.0, "forget_after"),
        (math.inf, "forget_after"),
        (math.nan, "forget_after"),
        (True, "forget_after"),
        ("30d", "forget_after"),
    ],
)
def test_a_bad_forget_after_names_the_argument(value: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Budget(10, forget_after=value)  # type: ignore[arg-type]
