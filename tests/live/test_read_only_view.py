"""The live views over a state file this user cannot write (a service's state, a
read-only disk): each look reads a fresh private copy, shows what the writers did
since, says so, and writes nothing where the state is."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from searchfuse import RateLimited, Router, _readonly
from searchfuse._live import Viewer
from searchfuse.testing import FakeClock, FakeTavily

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]


def folder_contents(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("name", ["searchfuse.db", "quota.json"])
def test_a_state_this_user_cannot_write_is_watched_through_a_copy_made_at_each_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    folder = tmp_path / "state"
    folder.mkdir()
    state = folder / name

    def open_router(memory: bool = False, state: Path | None = state) -> Router:
        return Router(
            KEYS,
            state=None if memory else state,
            transport=fake.transport(),
            clock=clock,
            sleep=clock.advance,
        )

    writer = open_router()
    writer.search("one")
    fake.fail_next(429, retry_after=30, path="/search")
    with pytest.raises(RateLimited):
        writer.search("two")
    writer.close()  # its files as a service leaves them between searches
    real = _readonly.blocked_write
    monkeypatch.setattr(
        _readonly,
        "blocked_write",
        lambda path: "it is on a read-only file system" if path == state else real(path),
    )
    before = folder_contents(folder)

    viewer = Viewer(open_router, state)
    first = viewer.snapshot()
    assert first.error is None
    assert first.note is not None and "private copy" in first.note and str(state) in first.note
    assert "cooling" in {k["state"] for k in first.keys}  # the 429 another process recorded
    assert [e["kind"] for e in first.events].count("rate_limited") == 1
    assert folder_contents(folder) == before  # looking wrote nothing, not even a sidecar

    # The writer goes on; the next look sees it (a copy made once would not).
    clock.advance(60)
    writer = open_router()
    writer.search("three")
    writer.close()
    before = folder_contents(folder)
    second = viewer.snapshot()
    assert sum(k["searches"] for k in second.keys) == sum(k["searches"] for k in first.keys) + 1
    assert folder_contents(folder) == before
    viewer.close()
