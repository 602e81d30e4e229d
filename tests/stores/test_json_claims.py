"""The JSON store's claims on shared-cache entries: `<file>.claims`, beside the state."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from searchfuse.errors import StoreUnavailable
from searchfuse.router.state import JsonFileStore, State

NOW = 1_768_478_400.0


def count_a_search(state: State) -> None:
    state.key("fp1").searches += 1


def test_a_claim_lives_beside_the_state_private_and_is_gone_once_released(
    tmp_path: Path,
) -> None:
    path = tmp_path / "quota.json"
    store, other = JsonFileStore(path), JsonFileStore(path)
    store.update(NOW, count_a_search)
    before = path.read_bytes()
    assert store.cache_claim("entry", "first", time.time() + 30)
    claims = tmp_path / "quota.json.claims"
    assert stat.S_IMODE(claims.stat().st_mode) == 0o600
    # The state file is not rewritten for a claim: other processes need not read it again.
    assert path.read_bytes() == before
    assert not other.cache_claim("entry", "second", time.time() + 30)
    store.cache_release("entry", "first")
    assert not claims.exists()
    assert other.cache_claim("entry", "second", time.time() + 30)


def test_a_torn_claims_file_reads_as_no_claims(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    claims = tmp_path / "quota.json.claims"
    store = JsonFileStore(path)
    for text in (b'{"entry": ["dead", 9', b"[1, 2]", b'{"entry": ["dead", "soon"]}'):
        claims.write_bytes(text)  # a writer killed mid-write, or not ours
        assert store.cache_claim("entry", "first", time.time() + 30)
        store.cache_release("entry", "first")
        assert not claims.exists()


def test_a_claim_of_a_crashed_process_ends_at_its_time(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    claims = tmp_path / "quota.json.claims"
    store = JsonFileStore(path)
    # Left by a process killed while it searched: held until its time, then free.
    claims.write_text(json.dumps({"entry": ["crashed", time.time() + 30]}))
    assert not store.cache_claim("entry", "second", time.time() + 30)
    claims.write_text(json.dumps({"entry": ["crashed", time.time() - 0.001]}))
    assert store.cache_claim("entry", "second", time.time() + 30)
    assert json.loads(claims.read_text()) == {
        "entry": ["second", pytest.approx(time.time() + 30, abs=5)]
    }


def test_a_claims_path_that_is_not_a_file_of_ours_is_left_alone_and_named(
    tmp_path: Path,
) -> None:
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    target = tmp_path / "elsewhere.txt"
    target.write_text("not searchfuse's")
    claims = tmp_path / "quota.json.claims"
    claims.symlink_to(target)
    with pytest.raises(StoreUnavailable, match=r"quota\.json\.claims.*remove quota\.json\.claims"):
        store.cache_claim("entry", "first", time.time() + 30)
    assert target.read_text() == "not searchfuse's"
    claims.unlink()
    os.mkfifo(claims)
    with pytest.raises(StoreUnavailable, match="not a regular file"):
        store.cache_claim("entry", "first", time.time() + 30)
    assert stat.S_ISFIFO(claims.lstat().st_mode)
    assert isinstance(store.read(NOW), State)
