"""The store contract, run against every store: transactions, months, pacing logs, the cache."""

from __future__ import annotations

import threading

import pytest

from searchfuse.router.state import KeyUsage, State, acquire

from .conftest import Opener

NOW = 1_768_478_400.0  # 2026-01-15 12:00 UTC


def bump(state: State) -> int:
    ks = state.key("fp1")
    ks.searches += 1
    return ks.searches


def test_update_is_read_modify_write_and_a_new_handle_sees_it(opener: Opener) -> None:
    store = opener()
    assert [store.update(NOW, bump) for _ in range(3)] == [1, 2, 3]
    assert opener().read(NOW).keys["fp1"].searches == 3
    # A new month reads empty.
    assert opener().read(NOW + 40 * 86400).keys == {}


def test_threads_add_up(opener: Opener) -> None:
    store = opener()

    def work() -> None:
        for _ in range(25):
            store.update(NOW, bump)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.read(NOW).keys["fp1"].searches == 150


def test_park_and_hold_are_one_transaction(opener: Opener) -> None:
    store = opener()

    def park(state: State) -> None:
        state.key("fp1").park(NOW, 30.0, "rate_limited")
        state.hold("fp1", NOW + 30.0)

    store.update(NOW, park)
    other = opener()
    grant = other.update(
        NOW + 1, lambda s: acquire(s, "fp2", NOW + 1, rpm=100, window=60.0, honour_hold=True)
    )
    assert grant.verdict == "held"
    assert grant.wait == pytest.approx(29.0)
    assert grant.hold_key == "fp1"
    later = other.update(
        NOW + 31, lambda s: acquire(s, "fp1", NOW + 31, rpm=100, window=60.0, honour_hold=True)
    )
    assert later.verdict == "ok"  # an expired cooldown and hold are simply over


def test_typed_usage_figures_round_trip(opener: Opener) -> None:
    store = opener()

    def sync(state: State) -> None:
        state.key("fp1").last_usage = KeyUsage(key_usage=37.0, key_limit=1000.0, search_usage=30.0)
        state.account("acct").plan_limit = 4000.0

    store.update(NOW, sync)
    state = opener().read(NOW)
    assert state.keys["fp1"].last_usage == KeyUsage(37.0, 1000.0, 30.0)
    assert state.keys["fp1"].left() == 963.0
    assert state.accounts["acct"].left() == 4000.0


def test_pacing_log_admits_at_most_limit_in_any_window(opener: Opener) -> None:
    store = opener()

    def take(at: float) -> float:
        return store.update(at, lambda s: s.take("search:fp1", 3, 60.0, at))

    assert [take(NOW + t) for t in (0.0, 1.0, 2.0)] == [0.0, 0.0, 0.0]
    assert take(NOW + 30.0) == pytest.approx(30.0)  # the one at 0 leaves at 60
    assert take(NOW + 60.0) == 0.0
    assert take(NOW + 60.5) == pytest.approx(0.5)  # the one at 1 leaves at 61
    # Another handle (another process) shares the log.
    assert opener().update(NOW + 61, lambda s: s.take("search:fp1", 3, 60.0, NOW + 61)) == 0.0


def test_pacing_log_survives_a_new_month_and_a_clear(opener: Opener) -> None:
    store = opener()
    end = 1_769_903_999.0  # 2026-01-31 23:59:59 UTC
    for _ in range(2):
        assert store.update(end, lambda s: s.take("search:fp1", 2, 60.0, end)) == 0.0
    store.clear(end + 2)
    assert store.update(end + 2, lambda s: s.take("search:fp1", 2, 60.0, end + 2)) > 0


def test_pacing_log_resizes_keeping_the_newest(opener: Opener) -> None:
    store = opener()
    for t in range(4):
        store.update(NOW + t, lambda s, t=t: s.take("search:fp1", 4, 60.0, NOW + t))
    # Lowered to 2 per window: the two newest (at 2 and 3) still count.
    assert store.update(NOW + 10, lambda s: s.take("search:fp1", 2, 60.0, NOW + 10)) == (
        pytest.approx(52.0)
    )


def test_changes_name_only_what_changed(opener: Opener) -> None:
    store = opener()
    for fp in ("fp1", "fp2", "fp3"):
        store.update(NOW, lambda s, fp=fp: setattr(s.key(fp), "searches", 1))
    first = store.changes(NOW, None)
    assert first.complete and set(first.keys) == {"fp1", "fp2", "fp3"}
    assert store.changes(NOW, first.token).keys == {}
    opener().update(NOW, lambda s: setattr(s.key("fp2"), "searches", 5))
    second = store.changes(NOW, first.token)
    assert not second.complete or set(second.keys) == {"fp1", "fp2", "fp3"}
    assert second.keys["fp2"].searches == 5
    store.clear(NOW)
    cleared = store.changes(NOW, second.token)
    assert cleared.complete and cleared.keys == {}


def test_reading_does_not_write(opener: Opener) -> None:
    store = opener()
    store.update(NOW, bump)
    token = store.changes(NOW, None).token
    store.update(NOW, lambda s: s.key("fp1").searches)  # looked at, not changed
    assert store.changes(NOW, token).keys == {}


def test_shared_cache_expires_on_the_callers_clock(opener: Opener) -> None:
    store = opener()
    store.cache_set("k1", '{"answer": 1}', NOW + 60, 10)
    assert opener().cache_get("k1", NOW + 59) == '{"answer": 1}'
    assert store.cache_keys(NOW) == ["k1"]
    assert store.cache_keys(NOW + 60) == []
    assert opener().cache_get("k1", NOW + 60) is None
    store.cache_delete("k1")
    assert store.cache_get("k1", NOW) is None


def test_shared_cache_keeps_at_most_maxsize(opener: Opener) -> None:
    store = opener()
    for i in range(5):
        store.cache_set(f"k{i}", str(i), NOW + 100 + i, 3)
    assert sorted(store.cache_keys(NOW)) == ["k2", "k3", "k4"]


def test_cache_outlives_clear(opener: Opener) -> None:
    store = opener()
    store.cache_set("k", "v", NOW + 100, 10)
    store.clear(NOW)
    assert store.cache_get("k", NOW) == "v"


def test_a_new_month_resets_usage_and_keeps_a_running_cooldown_and_hold(opener: Opener) -> None:
    store = opener()
    end = 1_764_547_190.0  # 2025-11-30 23:59:50 UTC

    def seed(state: State) -> None:
        state.key("cool").park(end, 3600.0, "rate_limited")
        state.key("cool").searches = 5
        state.key("used").searches = 9
        state.key("used").last_usage = KeyUsage(900.0, 1000.0, 900.0)
        state.account("acct").local_credits = 12.0
        state.hold("cool", end + 3600.0)

    store.update(end, seed)
    later = end + 3600.0  # well into December
    state = opener().read(later - 1)
    assert state.month == "2025-12"
    assert set(state.keys) == {"cool"}
    assert state.keys["cool"].cooling(later - 1) and state.keys["cool"].searches == 0
    assert state.accounts == {}
    assert state.hold_left(later - 1) == pytest.approx(1.0)


def test_handles_that_remember_what_they_read_still_see_every_write(opener: Opener) -> None:
    # Stores keep what they last read to skip parsing it again; that must never
    # hide another handle's write, nor let a caller's edit of a record reach the store.
    first, second = opener(), opener()
    for i in range(6):
        writer = first if i % 2 == 0 else second
        writer.update(NOW, lambda s: s.apply_success("fp1", "acc", "team", 2.0, NOW))
        for reader in (first, second):
            state = reader.read(NOW)
            assert state.keys["fp1"].searches == i + 1
            assert state.accounts["acc"].local_credits == 2.0 * (i + 1)
            state.keys["fp1"].searches = 999  # a caller's copy, not the store's
            state.accounts["acc"].local_credits = -1.0
    token = first.changes(NOW, None).token
    second.update(NOW, lambda s: setattr(s.key("fp1"), "cooldown_until", NOW + 30))
    seen = first.changes(NOW, token)
    assert seen.keys["fp1"].cooldown_until == NOW + 30
    assert seen.keys["fp1"].searches == 6
    assert (
        first.update(
            NOW, lambda s: acquire(s, "fp1", NOW, rpm=5, window=60.0, honour_hold=True)
        ).verdict
        == "blocked"
    )


def test_a_month_stamped_by_a_clock_years_ahead_does_not_stop_rollover(opener: Opener) -> None:
    future = 1_907_668_800.0  # 2030-06-15 12:00 UTC
    opener().update(future, bump)
    store = opener()
    for _ in range(3):
        store.update(NOW, bump)
    feb = NOW + 20 * 86400.0  # 2026-02-04
    state = opener().read(feb)
    assert state.month == "2026-02"
    assert state.keys.get("fp1") is None or state.keys["fp1"].searches == 0


def test_the_next_month_from_a_clock_slightly_ahead_is_kept(opener: Opener) -> None:
    end = 1_769_903_990.0  # 2026-01-31 23:59:50 UTC
    opener().update(end + 60.0, bump)  # a clock a minute ahead: February
    opener().update(end, bump)
    state = opener().read(end)
    assert state.month == "2026-02"
    assert state.keys["fp1"].searches == 2


def test_a_month_rolled_on_a_clock_ahead_keeps_the_hold_and_cooldown_others_still_see(
    opener: Opener,
) -> None:
    end = 1_769_903_990.0  # 2026-01-31 23:59:50 UTC

    def rate_limited(state: State) -> None:
        state.key("fp1").park(end, 60.0, "rate_limited")
        state.key("fp1").searches = 3
        state.hold("fp1", end + 60.0)

    opener().update(end, rate_limited)
    # A process whose clock runs 15 minutes ahead: February past the grace, and
    # the hold over on its clock. It rolls the month...
    assert opener().update(end + 5 + 15 * 60, bump) == 1
    # ...and 15 s after the 429, on the right clock, the hold and the cooldown still run.
    right = end + 15
    state = opener().read(right)
    assert state.hold_left(right) == pytest.approx(45.0)
    assert state.keys["fp1"].cooling(right)
    grant = opener().update(
        right, lambda s: acquire(s, "fp2", right, rpm=100, window=60.0, honour_hold=True)
    )
    assert (grant.verdict, grant.hold_key) == ("held", "fp1")


def test_clocks_more_than_a_month_apart_do_not_reset_each_other_at_every_write(
    opener: Opener,
) -> None:
    right_now = 1_769_860_800.0  # 2026-01-31 12:00 UTC
    far_now = right_now + 31 * 86400.0  # 2026-03-03: two months on
    right, far = opener(), opener()
    counts = [
        right.update(right_now, bump) if i % 2 == 0 else far.update(far_now, bump) for i in range(8)
    ]
    # The month is settled once (the clock ahead is rolled back and then counts
    # into the month the other keeps); from then on every write adds up.
    assert counts[3:] == list(range(counts[3], counts[3] + 5)), counts
    assert right.read(right_now).keys["fp1"].searches == counts[-1]


def test_the_shared_cache_evicts_what_expires_soonest_in_every_store(opener: Opener) -> None:
    store = opener()
    store.cache_set("long", "kept", NOW + 900, 3)  # written first, expires last
    for i in range(3):
        store.cache_set(f"k{i}", str(i), NOW + 100 + i, 3)
    assert sorted(opener().cache_keys(NOW)) == ["k1", "k2", "long"]
    assert opener().cache_get("long", NOW) == "kept"


def test_one_claim_on_a_cache_entry_at_a_time(opener: Opener) -> None:
    import time

    store, other = opener(), opener()
    soon = time.time() + 30
    assert store.cache_claim("k", "first", soon)
    assert store.cache_claim("k", "first", soon)  # its own claim: still its own
    assert not other.cache_claim("k", "second", soon)
    store.cache_release("k", "second")  # not its claim: nothing happens
    assert not other.cache_claim("k", "third", soon)
    assert other.cache_claim("other", "third", soon)  # another entry: free
    store.cache_release("k", "first")
    assert other.cache_claim("k", "second", soon)  # released: free again
    assert store.cache_claim("gone", "first", time.time() - 1)  # claims that ran out...
    assert other.cache_claim("gone", "second", soon)  # ...are free
