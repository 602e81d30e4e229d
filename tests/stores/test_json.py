"""The JSON file store's lock: bounded, per process, and never a lost update."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
from pathlib import Path

import pytest

from searchfuse.errors import StoreUnavailable
from searchfuse.router.state import JsonFileStore, State

NOW = 1_768_478_400.0


def bump(state: State) -> int:
    ks = state.key("fp1")
    ks.searches += 1
    return ks.searches


def test_a_lock_held_elsewhere_is_waited_for_within_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    store = JsonFileStore(path, lock_timeout=0.05)
    store.update(NOW, bump)
    before = path.read_bytes()
    # Another open file holding the lock, as another process would.
    fd = os.open(str(path) + ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(StoreUnavailable, match=r"held its lock for more than 0\.05 s"):
            store.update(NOW, bump)
        assert path.read_bytes() == before  # nothing written, nothing lost
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    assert store.update(NOW, bump) == 2
    store.close()


def _work(path: str, count: int) -> None:
    store = JsonFileStore(path)
    for _ in range(count):
        store.update(NOW, bump)
    store.close()


def test_a_forked_child_takes_its_own_lock(tmp_path: Path) -> None:
    # The parent's lock file is open before the fork: a child reusing that open
    # file would share the parent's lock, and updates would be lost.
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    store.update(NOW, bump)
    ctx = multiprocessing.get_context("fork")
    children = [ctx.Process(target=_work, args=(str(path), 30)) for _ in range(3)]
    for child in children:
        child.start()
    for _ in range(30):
        store.update(NOW, bump)
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    assert JsonFileStore(path).read(NOW).keys["fp1"].searches == 1 + 30 + 3 * 30


def test_pacing_logs_are_packed_and_the_older_list_form_still_reads(tmp_path: Path) -> None:
    from searchfuse.router.state import JsonFileStore, State
    from searchfuse.router.state._codec import state_from_json, state_to_json

    state = State(month="2026-12")
    for i in range(1000):
        state.take("search:fp1", 5000, 61.0, 1_780_000_000.0 + i * 0.003)
    data = state_to_json(state)
    assert isinstance(data["rings"]["search:fp1"]["times"], str)
    back = state_from_json(json.loads(json.dumps(data)))
    assert back.rings["search:fp1"].slots == state.rings["search:fp1"].slots
    assert back.rings["search:fp1"].seq == 1000
    older = {**data, "rings": {"search:fp1": {"size": 3, "seq": 1, "slots": [1.5]}}}
    assert state_from_json(older).rings["search:fp1"].slots == [1.5]
    path = tmp_path / "quota.json"
    bad = {**data, "rings": {"search:fp1": {"size": 3, "seq": 1, "times": "not base64!"}}}
    path.write_text(json.dumps(bad))
    assert JsonFileStore(path).read(1_780_000_000.0).rings == {}
