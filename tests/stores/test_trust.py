"""Stored values are believed only as far as they can be true, in every store.

A pacing log written by a clock a day ahead (or by hand) must not park a key
for a day, and a log whose stored size reads 200 million must not be built.
"""

from __future__ import annotations

import json
import sqlite3
import tracemalloc
import uuid
from pathlib import Path

import pytest

from searchfuse import Router, Throttled
from searchfuse.router.config import KeyEntry
from searchfuse.router.state import JsonFileStore, RedisStore, SqliteStore, Store
from searchfuse.testing import FakeClock, FakeTavily

from .conftest import Opener

NOW = 1_768_478_400.0  # 2026-01-15 12:00 UTC
DAY = 86_400.0
K1 = "tvly-dev-test0001"


def take(store: Store, at: float, name: str = "search:fp1", limit: int = 3) -> float:
    return store.update(at, lambda s: s.take(name, limit, 60.0, at))


@pytest.mark.parametrize("kind", ["search", "usage"])
def test_a_log_written_by_a_clock_a_day_ahead_costs_one_window_at_most(
    opener: Opener, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"{kind}:{uuid.uuid4().hex[:8]}"  # the warning is said once per log and process
    ahead = opener()
    assert [take(ahead, NOW + DAY, name) for _ in range(3)] == [0.0, 0.0, 0.0]
    store = opener()
    wait = take(store, NOW, name)
    assert 0.0 < wait <= 60.0  # not the day of skew
    assert "after this clock's now" in caplog.text
    # Every slot was read as now: one window later the log is free again,
    # not one slot a minute for the next day.
    assert [take(opener(), NOW + 60.0, name) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert take(store, NOW + 60.0, name) == pytest.approx(60.0)


def test_a_log_resized_after_a_clock_ahead_keeps_times_no_later_than_now(
    opener: Opener,
) -> None:
    ahead = opener()
    for _ in range(4):
        take(ahead, NOW + DAY, limit=4)
    # The rate lowered to 2 at the same time: the two newest times are kept, as now.
    assert 0.0 < take(opener(), NOW, limit=2) <= 60.0
    assert [take(opener(), NOW + 60.0, limit=2) for _ in range(2)] == [0.0, 0.0]


def test_a_router_beside_a_clock_a_day_ahead_is_throttled_for_its_window_only(
    opener: Opener,
) -> None:
    clock = FakeClock(NOW)
    fake = FakeTavily([K1], clock=clock)
    fake.set_rpm(K1, 1000)
    ahead = FakeClock(NOW + DAY)
    keys = [KeyEntry(K1, rpm=2)]
    skewed = Router(keys, state=opener(), clock=ahead, transport=fake.transport())
    for _ in range(2):
        skewed.search("q")
    router = Router(
        keys,
        state=opener(),
        clock=clock,
        sleep=clock.advance,
        transport=fake.transport(),
        max_wait=0.0,
    )
    with pytest.raises(Throttled) as caught:
        router.search("q")
    assert caught.value.retry_after is not None
    assert 0.0 < caught.value.retry_after <= 61.0  # the window, plus pacing's second
    assert len(fake.searches) == 2  # nothing sent for the refused one
    clock.advance(caught.value.retry_after)
    assert router.search("q")["results"]
    assert len(fake.searches) == 3


# -- a stored size never built -------------------------------------------------------------

HUGE = 200_000_000


def _claim_size(store: Store, tmp_path: Path, name: str, size: int) -> None:
    """Edit the stored size of pacing log `name` behind the store's back."""
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute("UPDATE rings SET size = ? WHERE name = ?", (size, name))
    elif isinstance(store, RedisStore):
        store.client.hset(store.ring_key(name), "size", str(size))
    else:
        assert isinstance(store, JsonFileStore)
        data = json.loads(store.path.read_text())
        data["rings"][name]["size"] = size
        store.path.write_text(json.dumps(data))


@pytest.mark.parametrize("kind", ["sqlite", "redis", "json"])
def test_a_huge_stored_log_size_is_never_materialised(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    def opener() -> Store:
        if kind == "sqlite":
            return SqliteStore(tmp_path / "searchfuse.db")
        if kind == "json":
            return JsonFileStore(tmp_path / "quota.json")
        return RedisStore(request.getfixturevalue("redis_url"), namespace=tmp_path.name)

    store = opener()
    for t in range(3):
        assert take(store, NOW + t) == 0.0
    # The JSON file refuses sizes over a million on read; the databases take any number.
    _claim_size(store, tmp_path, "search:fp1", 1_000_000 if kind == "json" else HUGE)
    tracemalloc.start()
    try:
        wait = take(opener(), NOW + 10.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000  # bytes: what three real slots cost, not a list of the size
    assert wait == pytest.approx(50.0)  # the three real times still count
    assert take(opener(), NOW + 60.0) == 0.0


def test_a_slot_a_moment_ahead_is_another_process_racing_and_is_believed_silently(
    opener: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    # Two processes of one host: the one that read its clock first writes second.
    name = f"search:{uuid.uuid4().hex[:8]}"
    other, store = opener(), opener()
    assert [take(other, NOW + 0.3, name) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = take(store, NOW, name)
    assert wait == pytest.approx(60.3)  # the other's grant, as it was stamped
    assert "after this clock's now" not in caplog.text
    assert take(store, NOW + 60.3, name) == 0.0


def test_the_redis_script_decides_a_slot_a_moment_ahead_itself(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ns = f"t{uuid.uuid4().hex[:12]}"
    other, store = RedisStore(redis_url, namespace=ns), RedisStore(redis_url, namespace=ns)
    ask = {"rpm": 2, "window": 60.0, "honour_hold": True}
    assert store.grant(NOW - 100, "fp1", **ask).verdict == "ok"  # the month seen
    for at in (NOW + 0.2, NOW + 0.4):
        assert other.grant(at, "fp1", **ask).verdict == "ok"
    careful: list[object] = []
    real = Store.grant
    monkeypatch.setattr(Store, "grant", lambda *a, **k: careful.append(a) or real(*a, **k))
    found = store.grant(NOW, "fp1", **ask)
    assert (found.verdict, round(found.wait, 6)) == ("paced", 60.2)
    assert careful == [] and "after this clock's now" not in caplog.text
    other.close()
    store.close()
