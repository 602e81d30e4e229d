"""The Redis grant script decides exactly as `acquire` does, in one round trip.

Each case runs twice on a real redis-server: through `RedisStore.grant` (the
script) and through `Store.grant` (`acquire` in a transaction, as every store
does it), on namespaces seeded alike; the grants, the records, the pacing log,
the budget tallies and the event log must come out the same.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from searchfuse.router.state import Charge, KeyUsage, RedisStore, State, Store
from searchfuse.router.state._budgets import Line, Tally

NOW = 1_768_478_400.0  # 2026-01-15 12:00 UTC
DAY_END = 1_768_521_600.0
FP, OTHER = "fp1", "fp2"
CHARGE = Charge(FP, "acct", "team", 1.0)


def line(
    limit: float,
    name: str = "conversation:c-1:searches:",
    amount: float = 1.0,
    keep: float | None = DAY_END + 86400,
    period: str = "2026-01-15",
) -> Line:
    return Line(0, name, period, limit, amount, resets_at=DAY_END, keep_until=keep)


def chat(limit: float, forget: float = 600.0) -> Callable[[float], Line]:
    """A conversation's budget without a period: kept `forget` s after its last call."""
    return lambda at: Line(
        0, "conversation:c-1:searches:", "", limit, 1.0, keep_until=NOW + at + forget
    )


def nothing(state: State) -> None:
    return None


def settled(state: State) -> None:
    ks = state.key(FP)
    ks.last_status = 200
    ks.searches = 4
    ks.local_credits = 4.0
    ks.last_usage = KeyUsage(10.0, 1000.0, 10.0)
    state.account("acct").local_credits = 4.0


def held(state: State) -> None:
    state.key(OTHER).park(NOW - 5, 30.0, "rate_limited")
    state.hold(OTHER, NOW + 25.0)


def cooling(state: State) -> None:
    state.key(FP).park(NOW - 5, 60.0, "server_error")


def spent_until_reset(state: State) -> None:
    state.key(FP).park(NOW - 5, 3600.0, "exhausted")  # Brave's month, until its reset


def disabled(state: State) -> None:
    state.key(FP).disabled = True


def exhausted(state: State) -> None:
    state.key(FP).exhausted = True


Seed = Callable[[State], object]
#: (seed, grants to ask for: (seconds after NOW, options)), by name.
CASES: dict[str, tuple[Seed, list[tuple[float, dict[str, Any]]]]] = {
    "a new key, paced, charged": (nothing, [(t, {}) for t in (0, 1, 2, 3, 61)]),
    "a key a success left clean": (settled, [(0, {}), (1, {})]),
    "no pacing, no charge": (nothing, [(0, {"rpm": None, "charge": None})] * 3),
    "held by another key's 429": (held, [(0, {}), (1, {"honour_hold": False}), (30, {})]),
    "cooling": (cooling, [(0, {}), (60, {})]),
    "exhausted until its provider's reset": (spent_until_reset, [(0, {}), (3600, {})]),
    "disabled": (disabled, [(0, {})]),
    "exhausted": (exhausted, [(0, {})]),
}


def tally(name: str, period: str, used: float, expires: float | None) -> Seed:
    return lambda state: state.set_tally(name, Tally(period, used, expires))


CONV = "conversation:c-1:searches:"
DAYS = "router::credits:day"
MONTHS = "user:u-1:usd:month"
MONTH_END = 1_769_904_000.0  # 2026-02-01 00:00 UTC


def month(limit: float) -> Line:
    """A user's monthly budget in dollars (January's)."""
    return Line(0, MONTHS, "2026-01", limit, 0.75, MONTH_END, keep_until=MONTH_END + 86400)


#: Grants with budgets: the script decides them too, tallies and all.
BUDGETS: dict[str, tuple[Seed, list[tuple[float, dict[str, Any]]]]] = {
    "a budget spent": (nothing, [(t, {"spend": (line(2),)}) for t in (0, 1, 2)]),
    "two budgets on one tally": (
        nothing,
        [(t, {"spend": (line(3), line(2))}) for t in (0, 1, 2)],
    ),
    "budgets in credits": (
        nothing,
        [(t, {"spend": (line(2.5, DAYS, 1.25),)}) for t in (0, 1, 2)],
    ),
    "two budgets, two tallies, the second refuses": (
        nothing,
        [(t, {"spend": (line(5), line(1.5, DAYS, 1.0))}) for t in (0, 1, 2)],
    ),
    "yesterday's tally counts as nothing": (
        tally(CONV, "2026-01-14", 2.0, DAY_END + 86400),
        [(t, {"spend": (line(2),)}) for t in (0, 1, 2)],
    ),
    "a clock ahead counts in its later day": (
        tally(CONV, "2026-01-16", 1.0, DAY_END + 2 * 86400),
        [(t, {"spend": (line(3),)}) for t in (0, 1, 2)],
    ),
    "an expired tally counts as nothing": (
        tally(CONV, "", 5.0, NOW - 1),
        [(t, {"spend": (chat(5)(t),)}) for t in (0, 1)],
    ),
    "a conversation's tally is kept from its last call, refused or not": (
        nothing,
        [(t, {"spend": (chat(2)(t),)}) for t in (0, 1, 2, 300, 800)],
    ),
    "a refusal keeps the later of two expiries": (
        tally(CONV, "", 2.0, NOW + 5000),
        [(t, {"spend": (chat(2)(t),)}) for t in (0, 1)],
    ),
    "a router's budget is kept for ever": (
        tally("router:*:searches:", "", 1.0, NOW + 50),
        [(t, {"spend": (line(2, "router:*:searches:", keep=None, period=""),)}) for t in (0, 1)],
    ),
    "a budget refuses before the hold": (
        held,
        [(0, {"spend": (line(0.5),)}), (1, {"spend": (line(3),)})],
    ),
    "a budget refuses before a cooling key": (
        cooling,
        [(0, {"spend": (line(0.5),)}), (1, {"spend": (line(3),)})],
    ),
    "a clock ahead counts in its later month": (
        tally(MONTHS, "2026-02", 1.0, MONTH_END + 29 * 86400),
        [(t, {"spend": (month(2),)}) for t in (0, 1, 2)],
    ),
    "a clock a month behind counts as nothing": (
        tally(MONTHS, "2025-12", 1.0, NOW + 86400),
        [(t, {"spend": (month(2),)}) for t in (0, 1, 2)],
    ),
    "a tally from before expiries": (
        tally(CONV, "2026-01-15", 1.0, None),
        [(t, {"spend": (line(2),)}) for t in (0, 1)],
    ),
    "a limit of 0 refuses even the free": (
        nothing,
        [(0, {"spend": (line(0, DAYS, 0.0), line(0))}), (1, {"spend": (line(0, DAYS, 0.0),)})],
    ),
    "a fraction short of the limit": (
        nothing,
        [(t, {"spend": (line(0.3, DAYS, 0.1),)}) for t in (0, 1, 2, 3)],
    ),
    "paced after the budget counts nothing": (
        nothing,
        [(t, {"spend": (line(10),)}) for t in (0, 1, 2, 3, 4)],
    ),
}


def grant(store: Store, at: float, options: dict[str, Any]) -> Any:
    kwargs: dict[str, Any] = {"rpm": 3, "window": 60.0, "honour_hold": True, "charge": CHARGE}
    kwargs.update(options)
    return store.grant(NOW + at, FP, **kwargs)


def outcome(store: RedisStore, at: float) -> Any:
    state = store.read(NOW + at)
    log = store.update(NOW + at, lambda s: s.ring(f"search:{FP}", 3).ordered())
    names = (CONV, DAYS, "router:*:searches:", MONTHS)
    tallies = store.update(NOW + at, lambda s: [s.tally(n) for n in names])
    # Each tally's time to live on the server, to the second (both count from `now`).
    ttls = [round(store.client.pttl(store.tally_key(n)) / 1000) for n in names]
    events = [(e.kind, e.key, e.detail) for e in store.events()]
    # The key's record, its account's and its pacing log expire (or are absent) alike.
    records = (store.k(FP), store.a("acct"), store.ring_key(f"search:{FP}"))
    expiring = [min(store.client.pttl(name), 1) for name in records]
    return (
        state.keys,
        state.accounts,
        state.hold_until,
        state.hold_key,
        log,
        tallies,
        ttls,
        events,
        expiring,
    )


@pytest.mark.parametrize("case", list(CASES) + list(BUDGETS))
def test_the_script_grants_exactly_as_acquire(
    redis_url: str, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed, asks = CASES.get(case) or BUDGETS[case]
    script = RedisStore(redis_url, namespace=f"t{uuid.uuid4().hex[:12]}")
    careful = RedisStore(redis_url, namespace=f"t{uuid.uuid4().hex[:12]}")
    for store in (script, careful):
        store.update(NOW - 10, seed)
    took_careful_path = []
    real = Store.grant

    def spy(self: Store, *args: Any, **kwargs: Any) -> Any:
        if self is script:
            took_careful_path.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Store, "grant", spy)
    for at, options in asks:
        by_script = grant(script, at, options)
        by_acquire = real(
            careful,
            NOW + at,
            FP,
            **{"rpm": 3, "window": 60.0, "honour_hold": True, "charge": CHARGE, **options},
        )
        assert by_script == by_acquire, (at, options)
    # Every grant was the script's (one round trip), budgets or not.
    assert took_careful_path == []
    last = asks[-1][0]
    assert outcome(script, last) == outcome(careful, last)
    script.close()
    careful.close()


def junk(field: str, value: str) -> Callable[[RedisStore], None]:
    def put(store: RedisStore) -> None:
        store.client.hset(store.k(FP), field, value)

    return put


def clean_but(field: str) -> Callable[[RedisStore], None]:
    """The key as a success left it, but for `field` stored empty."""

    def put(store: RedisStore) -> None:
        store.client.hset(store.k(FP), mapping={"last_status": "200", field: ""})

    return put


def held_by(name: str) -> Callable[[RedisStore], None]:
    def put(store: RedisStore) -> None:
        store.client.hset(store.hold_key, mapping={"until": repr(NOW + 100), "key": name})

    return put


@pytest.mark.parametrize(
    "spoil",
    [
        junk("searches", "many"),
        junk("cooldown_until", "soon"),
        junk("disabled", "yes"),
        lambda store: store.client.hset(store.ring_key(f"search:{FP}"), "s0", repr(NOW + 86400)),
        lambda store: store.client.hset(store.ring_key(f"search:{FP}"), "size", "7"),
        lambda store: store.client.hset(store.hold_key, "until", "later"),
        # Found after the pacing slot is chosen: nothing may have been written yet.
        lambda store: store.client.hset(store.a("acct"), "local_credits", "lots"),
        lambda store: store.client.hset(store.tally_key(CONV), "used", "some"),
        lambda store: store.client.hset(store.tally_key(CONV), "period", "someday"),
        lambda store: store.client.hset(store.tally_key(CONV), "period", "2099-01-01"),
        # Lua reads hexadecimal as a number; the stores' reader does not (reset).
        lambda store: store.client.hset(store.tally_key(CONV), "used", "0x9"),
        lambda store: store.client.hset(store.tally_key(CONV), "expires", hex(int(NOW))),
        junk("searches", "0x2"),
        junk("local_credits", "0x10"),
        junk("cooldown_until", hex(int(NOW + 100))),
        junk("last_status", "0xc8"),
        lambda store: store.client.hset(store.a("acct"), "local_credits", "0x3"),
        lambda store: store.client.hset(store.hold_key, mapping={"until": hex(int(NOW + 100))}),
        lambda store: store.client.hset(store.ring_key(f"search:{FP}"), "s1", hex(int(NOW))),
        lambda store: store.client.hset(store.ring_key(f"search:{FP}"), "seq", "0x1"),
        lambda store: store.client.hset(store.ring_key(f"search:{FP}"), "size", "3.0"),
        lambda store: store.client.hset(store.ring_key(f"search:{FP}"), "seq", "1" + "0" * 19),
        # Lua's tonumber stops at a NUL; the stores' reader resets such a value.
        junk("searches", "3\x00junk"),
        junk("cooldown_until", repr(NOW + 100) + "\x00"),
        lambda store: store.client.hset(store.a("acct"), "local_credits", "2\x009"),
        # An empty field reads as no value: the key still looks as a success left it.
        *(
            clean_but(field)
            for field in ("last_error", "cooldown_reason", "cooldown_started", "cooldown_until")
        ),
        # The hold's key is read as text the stores trust (masked, bounded).
        held_by("tvly-dev-abcdefghijklmnop1234"),
        held_by("f" * 3000),
        # Records an older version or a hand left without an expiry: given one again.
        lambda store: store.client.persist(store.k(FP)),
        lambda store: store.client.persist(store.a("acct")),
        lambda store: store.client.persist(store.ring_key(f"search:{FP}")),
    ],
    ids=[
        "bad count",
        "bad time",
        "bad flag",
        "a time ahead",
        "another size",
        "bad hold",
        "bad account",
        "bad tally",
        "a period that is none",
        "a period years ahead",
        "hex tally",
        "hex tally expiry",
        "hex count",
        "hex credits",
        "hex cooldown",
        "hex status",
        "hex account",
        "hex hold",
        "hex slot",
        "hex position",
        "a size of 3.0",
        "a position past what a double holds",
        "a count with a NUL",
        "a time with a NUL",
        "credits with a NUL",
        "empty last_error",
        "empty cooldown_reason",
        "empty cooldown_started",
        "empty cooldown_until",
        "a hold naming a raw key",
        "a hold naming a long key",
        "a key kept for ever",
        "an account kept for ever",
        "a pacing log kept for ever",
    ],
)
def test_what_the_script_does_not_take_as_it_is_goes_the_careful_way(
    redis_url: str, spoil: Callable[[RedisStore], None]
) -> None:
    script = RedisStore(redis_url, namespace=f"t{uuid.uuid4().hex[:12]}")
    careful = RedisStore(redis_url, namespace=f"t{uuid.uuid4().hex[:12]}")
    spend = {"spend": (line(10),)}
    for store in (script, careful):
        grant(store, 0, spend)  # made the records and the log the usual way
        spoil(store)
    for at in (1, 2, 3):
        assert grant(script, at, spend) == Store.grant(
            careful, NOW + at, FP, rpm=3, window=60.0, honour_hold=True, charge=CHARGE, **spend
        )
    assert outcome(script, 3) == outcome(careful, 3)


def test_a_month_turn_goes_the_careful_way_and_the_script_takes_over_again(
    redis_url: str,
) -> None:
    store = RedisStore(redis_url, namespace=f"t{uuid.uuid4().hex[:12]}")
    end = 1_769_903_990.0  # 2026-01-31 23:59:50 UTC
    store.grant(end, FP, rpm=3, window=60.0, honour_hold=True, charge=CHARGE)
    assert store.read(end).keys[FP].searches == 1
    feb = end + 3600.0
    store.grant(feb, FP, rpm=3, window=60.0, honour_hold=True, charge=CHARGE)
    state = store.read(feb)
    assert state.month == "2026-02" and state.keys[FP].searches == 1  # rolled, then counted
    store.grant(feb + 1, FP, rpm=3, window=60.0, honour_hold=True, charge=CHARGE)
    assert store.read(feb + 1).keys[FP].searches == 2


def test_a_grant_is_one_round_trip_to_the_server(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis.connection

    store = RedisStore(redis_url, namespace=f"t{uuid.uuid4().hex[:12]}")
    for at in (0, 0.5):  # the month seen, then the script loaded on the server
        grant(store, at, {})
    sent: list[int] = []
    real = redis.connection.AbstractConnection.send_packed_command

    def count(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", count)
    verdicts = [grant(store, at, {}).verdict for at in (1, 2, 3)]
    assert verdicts == ["ok", "paced", "paced"]  # three a minute: counted, then paced
    assert len(sent) == 3
    store.close()
