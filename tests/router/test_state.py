"""State stores: atomic private files, corrupt files moved aside, month rollover."""

from __future__ import annotations

import calendar
import json
import logging
import stat
import time
from pathlib import Path

import pytest

from searchfuse import ConfigError, NoKeyAvailable, Router
from searchfuse.router.state import JsonFileStore, MemoryStore, State, month_of
from searchfuse.testing import FakeClock

from ..scripted import KEYS, Upstream

K1 = KEYS[0]


def test_month_of_is_utc() -> None:
    assert month_of(1_764_547_199.0) == "2025-11"
    assert month_of(1_764_547_200.0) == "2025-12"


def test_month_of_names_the_month_of_each_instant_whatever_was_asked_before() -> None:
    # It remembers the last month's bounds: going back and forth across a
    # boundary, a year's end, a leap day or the epoch must not reuse them.
    instants = []
    for year, month in [(2025, 12), (2026, 1), (2028, 2), (2028, 3), (1970, 1), (2100, 1)]:
        first = calendar.timegm((year, month, 1, 0, 0, 0))
        instants += [first - 1e-6, first, first + 1e-6, first - 1, first + 86_400 * 27]
    for epoch in instants + instants[::-1] + [0.0, -1.0, 1e10]:
        assert month_of(epoch) == time.strftime("%Y-%m", time.gmtime(epoch)), epoch


@pytest.mark.parametrize("store_kind", ["memory", "file"])
def test_update_is_read_modify_write(store_kind: str, tmp_path: Path) -> None:
    store = MemoryStore() if store_kind == "memory" else JsonFileStore(tmp_path / "q.json")
    now = 1_768_478_400.0

    def bump(state: State) -> int:
        state.key("abc").searches += 1
        return state.key("abc").searches

    assert [store.update(now, bump) for _ in range(3)] == [1, 2, 3]
    assert store.read(now).keys["abc"].searches == 3
    # A new month reads empty.
    assert store.read(now + 40 * 86400).keys == {}


def test_state_file_is_private_and_holds_no_key(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = Router(KEYS, state=state_file, clock=clock)
    upstream.search(K1, 401)
    upstream.search(KEYS[1], 200)
    router.search("q")
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    text = state_file.read_text()
    assert all(key not in text for key in KEYS)
    data = json.loads(text)
    assert data["month"] == "2026-01"
    assert set(data["keys"]) <= {Router([k]).keys[0].fingerprint for k in KEYS}


@pytest.mark.parametrize(
    "content",
    # Damaged files of searchfuse's own are set aside instead (tests/faults/test_damaged_state.py).
    [
        b"{not json",
        b"[1, 2, 3]",
        b'{"version": 5}',
        b"\xff\xfe",
        b'{"keys": ["tvly-dev-test0001"]}',
    ],
)
def test_a_file_that_is_not_state_is_a_config_error_and_stays_untouched(
    content: bytes, clock: FakeClock, state_file: Path
) -> None:
    state_file.parent.mkdir(parents=True)
    state_file.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        Router([K1], state=state_file, clock=clock)
    assert str(state_file) in str(caught.value)
    assert state_file.read_bytes() == content
    assert sorted(p.name for p in state_file.parent.iterdir()) == ["quota.json"]


def test_a_bad_value_in_a_state_file_is_reset_with_a_warning(
    upstream: Upstream, clock: FakeClock, state_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fp = Router([K1]).keys[0].fingerprint
    state_file.parent.mkdir(parents=True)
    state_file.write_text(
        json.dumps(
            {
                "month": "2026-01",
                "keys": {fp: {"searches": "many", "cooldown_until": 1e309, "local_credits": 2}},
            }
        )
    )
    router = Router([K1], state=state_file, clock=clock)
    upstream.search(K1, 200)
    with caplog.at_level(logging.WARNING, logger="searchfuse.state"):
        assert router.search("q")["searchfuse"]["served_by"] == "tavily"
    record = json.loads(state_file.read_text())["keys"][fp]
    assert record["searches"] == 1  # reset to 0, then this search
    assert record["cooldown_until"] is None
    assert any("searches" in r.getMessage() for r in caplog.records)


def test_reset_month_clears_cooldowns(
    upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = Router([K1], state=state_file, clock=clock)
    upstream.search(K1, 503)
    with pytest.raises(NoKeyAvailable):
        router.search("q")
    assert router.status()[0].state == "cooling"
    router.reset_month()
    assert router.status()[0].state == "available"
    assert json.loads(state_file.read_text())["keys"] == {}


def test_unknown_fields_from_newer_versions_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text(
        json.dumps(
            {"month": "2026-01", "keys": {"abc": {"searches": 4, "future_field": 1}}, "new": 1}
        )
    )
    store = JsonFileStore(path)
    assert store.read(1_768_478_400.0).keys["abc"].searches == 4
    assert not list(tmp_path.glob("*.corrupt.*"))
