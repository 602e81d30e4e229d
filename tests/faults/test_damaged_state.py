"""Damaged state of searchfuse's own is set aside and the search goes on; anything
else at the state path is refused and left exactly as it was.

State is a cache, never ground truth: a torn `quota.json` (what a crash of the
old skill script leaves), an empty one, one with bad values, or an SQLite
database SQLite calls malformed must not stop every search.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from searchfuse import ConfigError, Router
from searchfuse.testing import FakeClock, FakeTavily

KEY = "tvly-dev-test0001"

#: Files that are recognisably searchfuse's (or the skill's) state, damaged.
OWN_DAMAGED_JSON = {
    "torn": b'{"month": "2026-09", "keys": [',
    "torn-after-accounts": b'{\n "accounts": {\n  "main": {"credits',
    "empty": b"",
    "blank": b"  \n",
    "keys-a-list": b'{"month": "2026-09", "keys": []}',
    "month-a-number": b'{"month": 202609, "keys": {}}',
    "accounts-a-list": b'{"month": "2026-09", "keys": {}, "accounts": [1]}',
}
#: Files that are plainly something else.
FOREIGN = {
    "keys-file": b'{"format_version": 2, "keys": [{"key": "tvly-dev-test0001"}]}',
    "keys-list": b'["tvly-dev-test0001", "tvly-dev-test0002"]',
    "list": b"[1, 2, 3]",
    "binary": b"\x00\x01\x02\xff\xfe binary",
    "text": b"notes about my project\n",
    "other-json": b'{"name": "my-app", "version": 3}',
}


def _router(state: Path, clock: FakeClock, fake: FakeTavily) -> Router:
    return Router([KEY], state=state, transport=fake.transport(), clock=clock)


def _quarantined(folder: Path, name: str) -> list[Path]:
    return sorted(folder.glob(f"{name}.corrupt.*"))


@pytest.mark.parametrize("content", OWN_DAMAGED_JSON.values(), ids=OWN_DAMAGED_JSON.keys())
def test_damaged_json_state_of_ours_is_set_aside_and_the_search_goes_on(
    content: bytes, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "quota.json"
    path.write_bytes(content)
    os.chmod(path, 0o644)
    clock = FakeClock()
    fake = FakeTavily((KEY,), clock=clock)
    with caplog.at_level(logging.WARNING, logger="searchfuse.state"):
        router = _router(path, clock, fake)
        router.search("q")
        router.search("q2")
    assert len(fake.requests_for(KEY, "/search")) == 2
    aside = _quarantined(tmp_path, "quota.json")
    assert len(aside) == 1 and aside[0].read_bytes() == content  # kept, byte for byte
    assert stat.S_IMODE(aside[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    warnings = [r.getMessage() for r in caplog.records if "moved aside" in r.getMessage()]
    assert len(warnings) == 1 and aside[0].name in warnings[0]
    # The new file is state again: a fresh process reads it without a word.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="searchfuse.state"):
        assert sum(s.searches for s in _router(path, clock, fake).status()) == 2
    assert not caplog.records


def test_setting_aside_never_overwrites_an_earlier_copy(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    clock = FakeClock()
    fake = FakeTavily((KEY,), clock=clock)
    for attempt in range(3):  # three damaged files within one second
        path.write_bytes(b'{"month": "2026-09", "keys": [' + str(attempt).encode())
        _router(path, clock, fake).search("q")
    aside = _quarantined(tmp_path, "quota.json")
    assert sorted(p.read_bytes()[-1:] for p in aside) == [b"0", b"1", b"2"]


@pytest.mark.parametrize("content", FOREIGN.values(), ids=FOREIGN.keys())
@pytest.mark.parametrize("name", ["quota.json", "searchfuse.db"])
def test_a_foreign_file_is_refused_untouched(name: str, content: bytes, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    before = path.stat()
    clock = FakeClock()
    fake = FakeTavily((KEY,), clock=clock)
    with pytest.raises(ConfigError) as caught:
        _router(path, clock, fake).search("q")
    assert str(path) in str(caught.value) and "untouched" in str(caught.value)
    assert path.read_bytes() == content
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    assert not fake.requests


def _used_database(path: Path) -> None:
    clock = FakeClock()
    fake = FakeTavily((KEY,), clock=clock)
    _router(path, clock, fake).search("q")
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


@pytest.mark.parametrize(
    "where",
    [
        pytest.param((2048, 4096), id="table-pages"),
        pytest.param((100, 900), id="first-page"),
    ],
)
def test_a_malformed_database_of_ours_is_set_aside_and_rebuilt(
    where: tuple[int, int], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "searchfuse.db"
    _used_database(path)
    offset, size = where
    with path.open("r+b") as fh:
        fh.seek(offset)
        fh.write(b"\xab" * size)
    damaged = path.read_bytes()
    clock = FakeClock()
    fake = FakeTavily((KEY,), clock=clock)
    with caplog.at_level(logging.WARNING, logger="searchfuse.state"):
        router = _router(path, clock, fake)
        router.search("q")
    assert len(fake.requests_for(KEY, "/search")) == 1
    assert sum(s.searches for s in router.status()) == 1  # a fresh database
    aside = _quarantined(tmp_path, "searchfuse.db")
    assert len(aside) == 1 and aside[0].read_bytes() == damaged
    assert stat.S_IMODE(aside[0].stat().st_mode) == 0o600
    warnings = [r.getMessage() for r in caplog.records if "moved aside" in r.getMessage()]
    assert len(warnings) == 1 and aside[0].name in warnings[0]


def test_a_malformed_database_of_another_program_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER, note TEXT)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(i, "x" * 50) for i in range(500)])
    with path.open("r+b") as fh:
        fh.seek(4096)
        fh.write(b"\xab" * 8192)
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="untouched"):
        Router([KEY], state=path, clock=FakeClock()).search("q")
    assert path.read_bytes() == before
    assert not _quarantined(tmp_path, "app.db")
