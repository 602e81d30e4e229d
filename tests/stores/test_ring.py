"""A pacing log's copy shares its times until one of the two changes one: each
change stays in the ring it was made in, whoever made the copy and however the
change was made (an event, a clamp of a time ahead of the clock, a rolled-back
transaction)."""

from __future__ import annotations

import pytest

from searchfuse.router.state import State
from searchfuse.router.state._budgets import Tally
from searchfuse.router.state._ring import Ring
from searchfuse.router.state._trust import clamp_slots

from .conftest import Opener

NOW = 1_768_478_400.0


def filled(n: int, size: int = 10) -> Ring:
    ring = Ring(size)
    for i in range(n):
        assert ring.take(0.0, NOW + i) == 0.0
    return ring


@pytest.mark.parametrize("changed", ["the copy", "the original"])
def test_an_event_changes_only_the_ring_it_is_taken_in(changed: str) -> None:
    original = filled(4)
    before = list(original.slots)
    copy = original.copy()
    assert copy.slots == before
    ring, other = (copy, original) if changed == "the copy" else (original, copy)
    ring.take(0.0, NOW + 100)
    ring.take(0.0, NOW + 101)  # the second change: on the list it took the first time
    assert other.slots == before and other.seq == 4
    assert ring.slots == [*before, NOW + 100, NOW + 101] and ring.seq == 6


def test_copies_of_copies_stay_apart() -> None:
    first = filled(3)
    second = first.copy()
    third = second.copy()
    second.take(0.0, NOW + 50)
    third.set(0, NOW + 60)
    assert first.slots == [NOW, NOW + 1, NOW + 2]
    assert second.slots == [NOW, NOW + 1, NOW + 2, NOW + 50]
    assert third.slots == [NOW + 60, NOW + 1, NOW + 2]


def test_a_clamp_of_a_copy_leaves_the_original_as_it_was() -> None:
    original = filled(3)
    original.set(1, NOW + 86_400)  # a time a day ahead of the clock
    copy = original.copy()
    assert clamp_slots(copy, "search:fp", NOW + 10)
    assert copy.slots == [NOW, NOW + 10, NOW + 2]
    assert original.slots == [NOW, NOW + 86_400, NOW + 2]


def test_a_transaction_that_fails_leaves_every_store_as_it_was(opener: Opener) -> None:
    """All or nothing, on every store: a change that raises half way (a bug, a
    Ctrl-C) leaves no key, account, budget tally, pacing slot or hold behind."""
    store = opener()

    def take(state: State, at: float) -> None:
        assert state.take("search:fp", 10, 60.0, at) == 0.0

    def search(state: State, at: float) -> None:
        take(state, at)
        state.key("fp").searches += 1
        state.account("acct").local_credits += 1.0

    for i in range(3):
        store.update(NOW + i, lambda s, i=i: search(s, NOW + i))
    before = store.read(NOW + 3)

    def fails(state: State) -> None:
        search(state, NOW + 3)
        state.key("fp-new").searches = 5
        state.account("acct-new").local_credits = 5.0
        state.set_tally("day", Tally("2026-01-15", 3.0))
        state.hold("fp", NOW + 30)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.update(NOW + 3, fails)
    after = store.read(NOW + 3)
    assert after.keys == before.keys and after.accounts == before.accounts
    assert after.hold_until is None
    assert store.tallies(NOW + 3) == {}
    assert store.pacing_log("search:fp") == [NOW, NOW + 1, NOW + 2]
    store.update(NOW + 4, lambda s: search(s, NOW + 4))
    assert store.pacing_log("search:fp") == [NOW, NOW + 1, NOW + 2, NOW + 4]
    assert store.read(NOW + 4).keys["fp"].searches == 4
