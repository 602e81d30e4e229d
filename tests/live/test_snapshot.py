"""What the live views read, on every store: each key's pacing window, the hold, the
budgets and the events another router recorded, and that reading writes nothing."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from searchfuse import Budget, RateLimited, Router
from searchfuse._live import snapshot
from searchfuse.router.state import JsonFileStore, RedisStore, SqliteStore, Store
from searchfuse.testing import FakeClock, FakeTavily

from ..stores.conftest import Opener

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]


def router(store: Store, fake: FakeTavily, clock: FakeClock, **options: Any) -> Router:
    return Router(
        KEYS, state=store, transport=fake.transport(), clock=clock, sleep=clock.advance, **options
    )


def test_each_keys_window_counts_every_routers_searches(opener: Opener) -> None:
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    one, two = router(opener(), fake, clock), router(opener(), fake, clock)
    for i in range(3):
        one.search(f"one {i}")
    clock.advance(30)
    for i in range(2):
        two.search(f"two {i}")
    watcher = router(opener(), fake, clock)
    sent = fake.requests_by_key("/search")
    window = {s.key: s.window_requests for s in watcher.status()}
    assert sum(window.values()) == 5 == sum(sent.values())
    assert {s.window_limit for s in watcher.status()} == {100}  # tvly-dev- keys: 100/min
    clock.advance(31)  # the first three searches are now older than a minute
    assert sum(s.window_requests or 0 for s in watcher.status()) == 2
    clock.advance(30)
    assert [s.window_requests for s in watcher.status()] == [0, 0]
    unpaced = router(opener(), fake, clock, pace=False)
    assert [s.window_requests for s in unpaced.status()] == [None, None]


def test_the_hold_names_the_key_whose_429_set_it(opener: Opener) -> None:
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    one = router(opener(), fake, clock)
    assert one.hold() is None
    fake.fail_next(429, retry_after=45, path="/search")
    with pytest.raises(RateLimited) as caught:
        one.search("q")
    hold = router(opener(), fake, clock).hold()
    assert hold is not None
    assert (hold.key, hold.provider) == (caught.value.key, "tavily")
    assert hold.seconds_left == pytest.approx(45) and hold.until == pytest.approx(clock() + 45)
    clock.advance(20)
    assert one.hold().seconds_left == pytest.approx(25)  # type: ignore[union-attr]
    # Under "failover" a 429 holds nothing: no hold is reported.
    assert router(opener(), fake, clock, on_429="failover").hold() is None
    clock.advance(26)
    assert one.hold() is None


def _contents(store: Store, now: float) -> Any:
    """Everything the store keeps, to compare before and after reading."""
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            return {t: sorted(map(repr, conn.execute(f"SELECT * FROM {t}"))) for t in tables}
    if isinstance(store, JsonFileStore):
        return hashlib.sha256(store.path.read_bytes()).hexdigest()
    if isinstance(store, RedisStore):
        names = sorted(store.client.scan_iter(f"{store.ns}:*"))
        return {n: store.client.dump(n) for n in names}
    return repr(store.read(now))


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    }


def test_a_snapshot_shows_everything_and_writes_nothing(opener: Opener, tmp_path: Path) -> None:
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    budgets = [Budget(10, unit="searches", per="router", period="day")]
    writer = router(opener(), fake, clock, budgets=budgets)
    writer.search("one")
    fake.fail_next(429, retry_after=30, path="/search")
    with pytest.raises(RateLimited):
        writer.search("two")
    viewer = router(opener(), fake, clock, budgets=budgets)
    before, files, sent = _contents(viewer.store, clock()), _files(tmp_path), len(fake.requests)
    for _ in range(3):
        snap = snapshot(viewer)
        clock.advance(1)
    assert _contents(viewer.store, clock()) == before
    assert _files(tmp_path) == files
    assert len(fake.requests) == sent  # reading sent nothing
    data = snap.to_dict()
    assert [k["state"] for k in data["keys"]].count("cooling") == 1
    assert data["hold"]["seconds_left"] == pytest.approx(28)
    assert data["budgets"] == [
        {
            "per": "router",
            "unit": "searches",
            "period": "day",
            "used": 1.0,
            "limit": 10,
            "left": 9.0,
        }
    ]
    assert [e["kind"] for e in data["events"]][:2] == ["hold", "rate_limited"]
    assert data["error"] is None
