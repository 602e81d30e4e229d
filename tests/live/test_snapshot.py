"""What the live views read, on every store: each key's pacing window, the hold, the
budgets and the events another router recorded, and that reading writes nothing."""

from __future__ import annotations

import hashlib
import io
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from searchfuse import Budget, RateLimited, Router, spend_scope
from searchfuse._live import snapshot
from searchfuse._watch import render
from searchfuse.router.state import JsonFileStore, RedisStore, SqliteStore, Store
from searchfuse.testing import FakeClock, FakeTavily

from ..stores.conftest import Opener
from ..stores.redis_server import redis_server

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


@contextmanager
def redis_commands(store: RedisStore) -> Iterator[dict[str, list[str]]]:
    """Every command Redis runs during the block (MONITOR shows those scripts run
    too), whichever client sent it: `"all"` of them and the `"writes"`."""
    client = store.client
    writes = {name for name, info in client.command().items() if "write" in info["flags"]}
    seen: list[str] = []
    stop, ready = f"stop-{uuid.uuid4().hex}", threading.Event()

    def listen() -> None:
        with client.monitor() as monitor:
            ready.set()
            for item in monitor.listen():
                if stop in item["command"]:
                    return
                seen.append(item["command"])

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    assert ready.wait(5)
    found: dict[str, list[str]] = {"all": [], "writes": []}
    try:
        yield found
    finally:
        client.echo(stop)
        thread.join(5)
        found["all"] = seen
        found["writes"] = [c for c in seen if c.split(" ", 1)[0].strip('"').lower() in writes]


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    }


def test_a_snapshot_shows_everything_and_writes_nothing(opener: Opener, tmp_path: Path) -> None:
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    budgets = [
        Budget(10, unit="searches", per="router", period="day"),
        Budget(3, unit="searches", per="conversation"),
    ]
    writer = router(opener(), fake, clock, budgets=budgets)
    with spend_scope(conversation="c-1"):
        writer.search("one")
    fake.fail_next(429, retry_after=30, path="/search")
    with pytest.raises(RateLimited):
        writer.search("two")
    viewer = router(opener(), fake, clock, budgets=budgets)
    before, files, sent = _contents(viewer.store, clock()), _files(tmp_path), len(fake.requests)
    store = viewer.store
    redis = isinstance(store, RedisStore)
    watching: AbstractContextManager[dict[str, list[str]]] = nullcontext({"all": [], "writes": []})
    if isinstance(store, RedisStore):
        watching = redis_commands(store)
    with watching as seen:
        for _ in range(3):
            snap = snapshot(viewer)
            clock.advance(1)
    assert seen["writes"] == [] and (bool(seen["all"]) or not redis)  # it read, it wrote nothing
    assert _contents(viewer.store, clock()) == before
    assert _files(tmp_path) == files
    assert len(fake.requests) == sent  # reading sent nothing
    data = snap.to_dict()
    assert [k["state"] for k in data["keys"]].count("cooling") == 1
    assert data["hold"]["seconds_left"] == pytest.approx(28)
    ends = FakeClock()() + 12 * 3600  # the FakeClock starts at noon UTC
    assert data["budgets"] == [
        {
            "budget": "10 searches per router a day",
            "per": "router",
            "unit": "searches",
            "period": "day",
            "limit": 10,
            "used": 1.0,
            "left": 9.0,
            "resets_at": ends,
            "summary": "10 searches per router a day: 1 used, 9 left, resets in 12.0 h",
        },
        {
            "budget": "3 searches per conversation",
            "per": "conversation",
            "unit": "searches",
            "period": None,
            "limit": 3,
            "used": None,
            "left": None,
            "resets_at": None,
            "who": None,
            "spenders": 1,
            "exhausted": 0,
            "top": [{"who": "c-1", "used": 1.0, "left": 2.0}],
            "summary": "3 searches per conversation: 1 conversation counted, 0 used all; "
            "most c-1 1",
        },
    ]
    assert [e["kind"] for e in data["events"]][:2] == ["hold", "rate_limited"]
    assert data["error"] is None


def test_a_store_that_goes_away_is_an_error_to_show_not_a_crash(tmp_path: Path) -> None:
    """Redis stopped under a running view: the next look says so (the URL's password
    hidden) instead of raising, and the view draws it."""
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    with redis_server(tmp_path) as url:
        secured = url.replace("redis://", "redis://:hunter2-password@")
        RedisStore(url).client.config_set("requirepass", "hunter2-password")
        viewer = router(RedisStore(secured, namespace="gone"), fake, clock)
        assert snapshot(viewer).error is None
    gone = snapshot(viewer)
    assert gone.error is not None and gone.error.startswith("cannot read the state store: ")
    assert "cannot be reached" in gone.error and "hunter2" not in gone.error
    assert gone.keys == [] and gone.to_dict()["error"] == gone.error
    console = Console(record=True, width=100, file=io.StringIO())
    console.print(render(gone, interval=2.0))
    assert "cannot read the state store" in console.export_text()
