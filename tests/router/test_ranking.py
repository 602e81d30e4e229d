"""The incremental ranking picks what sorting every key picks, however the state changes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from searchfuse.router.config import KeyEntry
from searchfuse.router.selection import Ranking, candidates, rank
from searchfuse.router.state import AccountUsage, KeyState, KeyUsage, State

ENTRIES = [KeyEntry(f"tvly-dev-test{i:04d}", account=("a" if i % 2 else None)) for i in range(6)]
NOW = 1_768_478_400.0

records = st.builds(
    KeyState,
    cooldown_until=st.none() | st.floats(NOW - 50, NOW + 50),
    exhausted=st.booleans(),
    disabled=st.booleans(),
    searches=st.integers(0, 5),
    local_credits=st.floats(0, 50),
    last_used_at=st.none() | st.floats(NOW - 100, NOW),
    last_usage=st.none() | st.builds(KeyUsage, st.floats(0, 100), st.floats(0, 100)),
)
steps = st.lists(
    st.tuples(st.integers(0, 5), records, st.none() | st.floats(0, 200), st.floats(-60, 60)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(steps)
def test_ranking_matches_a_full_sort(
    changes: list[tuple[int, KeyState, float | None, float]],
) -> None:
    ranking = Ranking(ENTRIES)
    state = State(month="2026-01")
    ranking.update(state, None, ())
    for index, record, plan_used, dt in changes:
        fp = ENTRIES[index].fingerprint
        accounts = dict(state.accounts)
        if plan_used is not None:
            accounts["a"] = AccountUsage(plan_limit=100.0, plan_usage=plan_used)
        state = State(month="2026-01", keys={**state.keys, fp: record}, accounts=accounts)
        ranking.update(state, [fp], ["a"] if plan_used is not None else [])
        now = NOW + dt
        expected = rank(candidates(ENTRIES, state), now)
        got = ranking.best(now)
        assert [c.entry for c in got] == [c.entry for c in expected[:1]]
        skip = {expected[0].entry.fingerprint} if expected else set()
        assert [c.entry for c in ranking.best(now, skip)] == [
            c.entry for c in rank(candidates(ENTRIES, state), now, skip)[:1]
        ]
