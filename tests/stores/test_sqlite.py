"""The SQLite store: only its own files, values validated on read, quota.json imported once."""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from searchfuse import ConfigError, Router
from searchfuse.router.state import SqliteStore
from searchfuse.testing import FakeClock

from ..scripted import KEYS, Upstream

NOW = 1_768_478_400.0
K1 = KEYS[0]


def fp(key: str) -> str:
    return Router([key]).keys[0].fingerprint


@pytest.mark.parametrize(
    "content",
    [
        b'{"format_version": 2, "keys": [{"key": "tvly-dev-test0001"}]}',
        b"plain text notes\n",
        b"\x00\x01\x02 not a database at all, just bytes",
    ],
)
def test_a_path_holding_something_else_is_a_config_error_and_stays_untouched(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "keys.db"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        Router([K1], state=path)
    assert str(path) in str(caught.value)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.db"]


def test_the_keys_file_itself_is_refused(tmp_path: Path) -> None:
    keys = tmp_path / "config" / "keys"
    keys.parent.mkdir()
    keys.write_text(json.dumps({"format_version": 2, "keys": [{"key": K1}]}))
    before = keys.read_bytes()
    with pytest.raises(ConfigError, match="not a searchfuse state file"):
        Router.from_config(tmp_path / "config" / "keys", state=keys)
    assert keys.read_bytes() == before


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="directory"):
        SqliteStore(tmp_path)


def test_another_programs_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER)")
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="another program"):
        SqliteStore(path)
    assert path.read_bytes() == before


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    SqliteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE searchfuse_meta SET schema_version = 99")
    with pytest.raises(ConfigError, match="newer searchfuse"):
        SqliteStore(path)


def test_database_is_private_and_holds_no_key(
    upstream: Upstream, clock: FakeClock, tmp_path: Path
) -> None:
    path = tmp_path / "state" / "searchfuse.db"
    router = Router(KEYS, state=path, clock=clock)
    upstream.search(K1, 401)
    upstream.search(KEYS[1], 200)
    router.search("q")
    router.close()
    router.store.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for file in path.parent.iterdir():
        data = file.read_bytes()
        assert all(key.encode() not in data for key in KEYS), file.name


def test_a_bad_value_is_reset_with_a_warning_and_rewritten(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    store.update(NOW, lambda s: setattr(s.key("fp1"), "searches", 3))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE keys SET searches = 'lots', cooldown_until = 'soon'")
    with caplog.at_level(logging.WARNING, logger="searchfuse.state"):
        assert store.read(NOW).keys["fp1"].searches == 0
        store.update(NOW, lambda s: s.key("fp1").searches)
    assert any("searches" in r.getMessage() for r in caplog.records)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT searches, cooldown_until FROM keys").fetchone() == (0, None)


def test_quota_json_beside_a_new_database_is_imported_once_and_never_written(
    upstream: Upstream, clock: FakeClock, tmp_path: Path
) -> None:
    config = tmp_path / "config" / "keys.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"format_version": 2, "keys": [{"key": K1}, {"key": KEYS[1]}]}))
    legacy = tmp_path / "state" / "quota.json"
    legacy.parent.mkdir()
    legacy.write_text(
        json.dumps(
            {
                "format_version": 1,
                "month": "2026-01",
                "keys": {
                    fp(K1): {
                        "cooldown_until": clock() + 300,
                        "cooldown_reason": "rate_limited",
                        "searches": 7,
                        "last_usage": {"key_usage": 10, "key_limit": 1000, "search_usage": 9},
                        "usage_calls": [clock() - 5],
                    }
                },
                "hold_until": clock() + 300,
                "hold_key": fp(K1),
            }
        )
    )
    before = legacy.read_bytes()
    router = Router.from_config(config, clock=clock)
    status = {s.key: s for s in router.status()}
    first = status[router.keys[0].masked]
    assert first.state == "cooling" and first.searches == 7 and first.key_usage == 10
    # The hold came along: nothing is sent while it runs.
    assert router.diagnose().verdict in ("cooling", "burst")
    clock.advance(400)
    upstream.search(KEYS[1], 200)
    router.search("q")
    assert legacy.read_bytes() == before
    # A second router on the same database does not import again.
    router.store.update(clock(), lambda s: setattr(s.key(fp(K1)), "searches", 1))
    again = Router.from_config(config, clock=clock)
    assert {s.key: s.searches for s in again.status()}[router.keys[0].masked] == 1
    assert legacy.read_bytes() == before


def test_two_stores_on_one_file_see_each_others_writes_between_their_own(
    tmp_path: Path,
) -> None:
    # A store skips rereading the rows it wrote itself; a write by another
    # store (another process) in between must still be seen, by both paths.
    a, b = SqliteStore(tmp_path / "s.db"), SqliteStore(tmp_path / "s.db")

    def bump(s: Any) -> int:
        ks = s.key("fp1")
        ks.searches += 1
        return int(ks.searches)

    seen = []
    token_a = token_b = None
    for i in range(30):
        store = a if i % 3 else b
        seen.append(store.update(NOW, bump))
        changes = a.changes(NOW, token_a)
        token_a = changes.token
        if "fp1" in changes.keys:
            assert changes.keys["fp1"].searches == seen[-1]
        token_b = b.changes(NOW, token_b).token
    assert seen == list(range(1, 31))
    assert a.read(NOW).keys["fp1"].searches == b.read(NOW).keys["fp1"].searches == 30


def test_the_wal_is_checkpointed_off_the_search_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from searchfuse.router.state import _sqlite_file

    monkeypatch.setattr(_sqlite_file, "CHECKPOINT_EVERY", 4)
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    for _ in range(20):
        store.update(NOW, lambda s: setattr(s.key("fp1"), "searches", s.key("fp1").searches + 1))
    checkpointer = store._checkpointer
    assert checkpointer is not None
    deadline = time.monotonic() + 10
    while checkpointer.done < 1 and time.monotonic() < deadline:
        time.sleep(0.001)  # the thread runs as soon as the GIL lets it
    assert checkpointer.done >= 1
    store.close()  # stops the thread
    assert not checkpointer.alive()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT searches FROM keys").fetchone() == (20,)


def _setups() -> dict[str, Any]:
    def touch(s: Any) -> None:
        s.key("fp1").last_status = 200
        s.account("acc").local_credits += 0.5

    def held(s: Any) -> None:
        touch(s)
        s.hold("fp2", NOW + 30)

    def cooling(s: Any) -> None:
        touch(s)
        s.key("fp1").park(NOW, 60, "rate_limited")

    def exhausted(s: Any) -> None:
        touch(s)
        s.key("fp1").exhausted = True

    def disabled(s: Any) -> None:
        touch(s)
        s.key("fp1").disabled = True

    def after_an_error(s: Any) -> None:
        touch(s)
        s.key("fp1").note_error(NOW - 5, 500, "500: upstream")

    def key_only(s: Any) -> None:
        s.key("fp1").searches = 2

    return {
        "clean": touch,
        "held": held,
        "cooling": cooling,
        "exhausted": exhausted,
        "disabled": disabled,
        "after an error": after_an_error,
        "no account row": key_only,
        "nothing stored": lambda s: None,
    }


#: The key's pacing log as another process (or an older or broken one) left it.
_LOGS = {
    "no log": [],
    "a log of another size": [
        "INSERT INTO rings (name, size, seq) VALUES ('search:fp1', 5, 7)",
        f"INSERT INTO ring_slots (name, slot, t) VALUES ('search:fp1', 2, {NOW - 1})",
    ],
    "a log row without a size": [
        "INSERT INTO rings (name, size, seq) VALUES ('search:fp1', NULL, NULL)"
    ],
    "a log whose next slot is not a time": [
        "INSERT INTO rings (name, size, seq) VALUES ('search:fp1', 2, 3)",
        "INSERT INTO ring_slots (name, slot, t) VALUES ('search:fp1', 1, 'soon')",
    ],
    "a full log": [
        "INSERT INTO rings (name, size, seq) VALUES ('search:fp1', 2, 4)",
        f"INSERT INTO ring_slots (name, slot, t) VALUES ('search:fp1', 0, {NOW - 1})",
        f"INSERT INTO ring_slots (name, slot, t) VALUES ('search:fp1', 1, {NOW - 0.5})",
    ],
}


@pytest.mark.parametrize("name", list(_setups()))
@pytest.mark.parametrize("rpm", [None, 2])
@pytest.mark.parametrize("log", list(_LOGS))
def test_the_stores_own_grant_decides_and_writes_as_the_generic_one(
    tmp_path: Path, name: str, rpm: int | None, log: str
) -> None:
    from searchfuse.router.state import Charge, acquire

    setup = _setups()[name]
    fast, generic = SqliteStore(tmp_path / "a.db"), SqliteStore(tmp_path / "b.db")
    charge = Charge("fp1", "acc", "acc", 2.0)
    for store in (fast, generic):
        store.update(NOW, setup)
        with sqlite3.connect(store.path) as conn:
            for sql in _LOGS[log]:
                conn.execute(sql)
        conn.close()
    for i in range(4):  # the fourth is paced when rpm is 2
        now = NOW + i
        got = fast.grant(now, "fp1", rpm=rpm, window=61.0, honour_hold=True, charge=charge)
        want = generic.update(
            now,
            lambda s, now=now: acquire(  # type: ignore[misc]
                s, "fp1", now, rpm=rpm, window=61.0, honour_hold=True, charge=charge
            ),
        )
        # `fresh` says how the store knew the rows, not what it decided.
        assert dataclasses.replace(got, fresh=False) == want, (name, i)
        assert fast.read(now) == generic.read(now)
        assert fast.changes(now, None).keys == generic.changes(now, None).keys
    if rpm is not None:
        rings = [
            s.update(NOW + 9, lambda st: st.ring("search:fp1", rpm).ordered())
            for s in (fast, generic)
        ]
        assert rings[0] == rings[1]


def test_a_grant_on_remembered_rows_is_not_the_generic_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from searchfuse.router.state import Charge

    store = SqliteStore(tmp_path / "s.db")
    store.update(NOW, _setups()["clean"])
    calls = []
    generic = store.update
    monkeypatch.setattr(store, "update", lambda *a: calls.append(a) or generic(*a))
    charge = Charge("fp1", "acc", "acc", 1.0)
    for i in range(3):
        assert (
            store.grant(NOW + i, "fp1", rpm=5, window=61.0, honour_hold=True, charge=charge).verdict
            == "ok"
        )
    assert calls == []
    # Another process writes: the rows are read again, through the generic path.
    other = SqliteStore(tmp_path / "s.db")
    other.update(NOW, lambda s: setattr(s.key("fp1"), "last_error_at", NOW))
    store.grant(NOW + 5, "fp1", rpm=5, window=61.0, honour_hold=True, charge=charge)
    assert len(calls) == 1
    assert store.read(NOW + 5).keys["fp1"].searches == 4


def _granted(tmp_path: Path, n: int) -> tuple[SqliteStore, Any]:
    """A store whose key fp1 was granted `n` charged searches, one a second from NOW."""
    from searchfuse.router.state import Charge

    store = SqliteStore(tmp_path / "s.db")
    store.update(NOW, _setups()["clean"])
    charge = Charge("fp1", "acc", "acc", 1.0)
    for i in range(n):
        grant = store.grant(NOW + i, "fp1", rpm=5, window=61.0, honour_hold=True, charge=charge)
        assert grant.verdict == "ok"
    return store, charge


def test_a_grant_on_an_unchanged_meta_row_still_rolls_into_a_new_month(tmp_path: Path) -> None:
    """The meta row a grant left is not parsed again by the next grant, but only
    within the month it is of."""
    from searchfuse.router.state._month import ROLLOVER_GRACE, month_bounds, month_of

    store, charge = _granted(tmp_path, 3)
    assert store.read(NOW + 3).keys["fp1"].searches == 3
    later = month_bounds(NOW)[1] + ROLLOVER_GRACE + 1
    grant = store.grant(later, "fp1", rpm=5, window=61.0, honour_hold=True, charge=charge)
    assert grant.verdict == "ok"
    state = store.read(later)
    assert state.month == month_of(later) != month_of(NOW)
    assert state.keys["fp1"].searches == 1  # the new month's first search
    assert state.accounts["acc"].local_credits == 1.0


def test_a_hold_written_into_the_meta_row_by_hand_stops_the_next_grant(tmp_path: Path) -> None:
    """A change to the meta row that leaves its change counter as it was (an edit
    by hand) is still seen: the whole row is compared, not the counter."""
    store, charge = _granted(tmp_path, 2)
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE searchfuse_meta SET hold_until = ?, hold_key = 'fp2'", (NOW + 60,))
    conn.close()
    grant = store.grant(NOW + 2, "fp1", rpm=5, window=61.0, honour_hold=True, charge=charge)
    assert (grant.verdict, grant.hold_key) == ("held", "fp2")
    assert grant.wait == pytest.approx(58.0)
    assert store.read(NOW + 2).keys["fp1"].searches == 2


_INHERITED: dict[str, Any] = {}


def _grant_in_child(count: int) -> None:
    from searchfuse.router.state import Charge

    store = _INHERITED["store"]  # the parent's store object, inherited by the fork
    charge = Charge("fp1", "acc", "acc", 1.0)
    for i in range(count):
        store.grant(NOW + i, "fp1", rpm=None, window=61.0, honour_hold=True, charge=charge)
    if store._conn() is _INHERITED["conn"]:
        raise SystemExit(3)  # searched on the parent's connection
    store.close()


def test_a_forked_child_never_uses_its_parents_connection(tmp_path: Path) -> None:
    """A store used before a fork and then in the child: the child opens its own
    connection (sharing the parent's would mix the two processes' transactions),
    and every search of both is counted."""
    import multiprocessing

    from searchfuse.router.state import Charge

    store = SqliteStore(tmp_path / "s.db")
    store.update(NOW, _setups()["clean"])
    charge = Charge("fp1", "acc", "acc", 1.0)
    store.grant(NOW, "fp1", rpm=None, window=61.0, honour_hold=True, charge=charge)
    parents = store._conn()
    _INHERITED.update(store=store, conn=parents)
    ctx = multiprocessing.get_context("fork")
    children = [ctx.Process(target=_grant_in_child, args=(20,)) for _ in range(2)]
    try:
        for child in children:
            child.start()
        for i in range(20):
            store.grant(NOW + i, "fp1", rpm=None, window=61.0, honour_hold=True, charge=charge)
        for child in children:
            child.join(timeout=60)
            assert child.exitcode == 0
    finally:
        _INHERITED.clear()
    assert store._conn() is parents  # the parent's own is still the one it uses
    assert store.read(NOW).keys["fp1"].searches == 1 + 20 + 2 * 20
    store.close()
