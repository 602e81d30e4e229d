"""The JSON store replaces its file whole on every write: whole for every reader
(with the lock or without), after a kill, private, and never over a file that is
not state."""

from __future__ import annotations

import ctypes
import errno
import json
import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from searchfuse import _files
from searchfuse.errors import ConfigError
from searchfuse.router.state import JsonFileStore, State, _json_lock, _json_text

NOW = 1_768_478_400.0


def bump(state: State) -> int:
    ks = state.key("fp1")
    ks.searches += 1
    return ks.searches


def fill(n: int, width: int = 40) -> Any:
    """A change that makes `n` keys with a long error text: a state of any size."""

    def change(state: State) -> None:
        for i in range(n):
            ks = state.key(f"fp{i:04d}")
            ks.searches += 1
            ks.last_error = "x" * width

    return change


def test_every_write_replaces_the_file_whole_and_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "quota.json"
    store = JsonFileStore(path)
    store.update(NOW, bump)
    created = path.stat()
    assert stat.S_IMODE(created.st_mode) == 0o600
    with open(path, "rb"):  # held open, its inode number cannot be given to a new file
        for _ in range(5):
            store.update(NOW, bump)
        after = path.stat()
    assert after.st_ino != created.st_ino  # a new file took the old one's place
    assert stat.S_IMODE(after.st_mode) == 0o600
    assert json.loads(path.read_bytes())["keys"]["fp1"]["searches"] == 6
    # Beside it: the lock file and, while the store is open, at most the file kept
    # to be written over (a private temp file of ours); after close, no temp file.
    beside = sorted(p.name for p in path.parent.iterdir())
    assert beside[-2:] == ["quota.json", "quota.json.lock"] and len(beside) <= 3
    for name in beside[:-2]:
        assert _files.is_own_temp(path.parent / name, path)
    store.close()
    assert sorted(p.name for p in path.parent.iterdir()) == ["quota.json", "quota.json.lock"]


def test_a_shorter_state_after_a_longer_one_is_exactly_the_new_text(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    store.update(NOW, fill(30))
    long = path.stat().st_size
    store.clear(NOW)
    assert path.stat().st_size < long / 2
    assert json.loads(path.read_bytes())["keys"] == {}
    assert JsonFileStore(path).read(NOW).keys == {}


def test_changes_name_only_the_records_another_handle_changed(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    store.update(NOW, fill(4))
    first = store.changes(NOW, None)
    assert first.complete and len(first.keys) == 4
    JsonFileStore(path).update(NOW, lambda s: setattr(s.key("fp0002"), "searches", 7))
    second = store.changes(NOW, first.token)
    assert not second.complete
    assert set(second.keys) == {"fp0002"} and second.keys["fp0002"].searches == 7
    second.keys["fp0002"].searches = 999  # the reader's copy, not the store's
    assert store.read(NOW).keys["fp0002"].searches == 7


def test_a_file_replaced_by_rename_between_writes_is_the_one_read_next(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    store.update(NOW, bump)
    # Another process (an older searchfuse, say) replaces the file by rename.
    other = json.loads(path.read_bytes())
    other["keys"]["fp1"]["searches"] = 40
    tmp = tmp_path / ".quota.json.other.tmp"
    tmp.write_bytes(json.dumps(other).encode())
    tmp.chmod(0o600)
    os.replace(tmp, path)
    assert store.update(NOW, bump) == 41
    assert json.loads(path.read_bytes())["keys"]["fp1"]["searches"] == 41


def test_a_file_replaced_inside_a_transaction_is_replaced_only_if_it_is_state(
    tmp_path: Path,
) -> None:
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    store.update(NOW, bump)

    def swap_in(content: bytes) -> Any:
        def change(state: State) -> None:
            # A writer that ignores the lock swaps the file between read and write.
            tmp = tmp_path / "swap"
            tmp.write_bytes(content)
            tmp.chmod(0o600)
            os.replace(tmp, path)
            state.key("fp1").searches += 1

        return change

    state_text = JsonFileStore(tmp_path / "elsewhere.json")
    state_text.update(NOW, bump)
    store.update(NOW, swap_in((tmp_path / "elsewhere.json").read_bytes()))
    assert json.loads(path.read_bytes())["keys"]["fp1"]["searches"] == 2
    keys_file = b'{"version": 2, "keys": [{"key": "tvly-dev-test0001"}]}'
    with pytest.raises(ConfigError, match="not a searchfuse state file"):
        store.update(NOW, swap_in(keys_file))
    assert path.read_bytes() == keys_file  # untouched


@pytest.mark.parametrize("kind", ["fifo", "device", "foreign"])
def test_a_file_that_is_not_state_is_untouched(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "quota.json"
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "device":
        path.symlink_to("/dev/null")
    else:
        path.write_bytes(b'{"keys": [{"key": "tvly-dev-test0001"}]}')
    before = path.lstat()
    with pytest.raises(ConfigError) as caught:
        JsonFileStore(path)
    assert str(path) in str(caught.value)
    after = path.lstat()
    assert (after.st_ino, after.st_mode, after.st_mtime_ns) == (
        before.st_ino,
        before.st_mode,
        before.st_mtime_ns,
    )
    if kind == "foreign":
        assert path.read_bytes() == b'{"keys": [{"key": "tvly-dev-test0001"}]}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quota.json"]


def test_a_state_file_with_another_mode_is_rewritten_private(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    store.update(NOW, bump)
    path.chmod(0o644)
    store.update(NOW, bump)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_bytes())["keys"]["fp1"]["searches"] == 2


def test_readers_never_wait_for_a_writer(tmp_path: Path) -> None:
    import fcntl

    from searchfuse.errors import StoreUnavailable

    path = tmp_path / "quota.json"
    store = JsonFileStore(path, lock_timeout=0.05)
    store.update(NOW, bump)
    fd = os.open(str(path) + ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a writer in another process
        assert store.read(NOW).keys["fp1"].searches == 1
        assert store.changes(NOW, None).keys["fp1"].searches == 1
        assert store.cache_get("k", NOW) is None
        with pytest.raises(StoreUnavailable, match=r"held its lock for more than 0\.05 s"):
            store.update(NOW, bump)  # writers wait for each other, within the bound
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    assert store.update(NOW, bump) == 2


def test_without_flock_the_store_works_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from searchfuse.router.state import _json

    monkeypatch.setattr(
        _json, "process_lock", lambda path, timeout: _json_lock._FileLockLock(path, timeout)
    )
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    store.update(NOW, bump)
    store.update(NOW, fill(3))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    state = store.read(NOW)
    assert state.keys["fp1"].searches == 1 and state.keys["fp0002"].searches == 1


# -- several processes --------------------------------------------------------------


def _write_loop(path: str, rounds: int) -> None:
    """Alternate a long and a short state, keeping fp1 and fp2 equal."""
    store = JsonFileStore(path)

    def change(state: State, n: int) -> None:
        state.key("fp1").searches += 1
        state.key("fp2").searches += 1
        state.key("fp1").last_error = "y" * (n % 7) * 1500  # 0 to 9 kB: one to three pages

    for n in range(rounds):
        store.update(NOW, lambda s, n=n: change(s, n))
    store.close()


def _read_loop(path: str, done: Any, out: Any) -> None:
    store = JsonFileStore(path)
    seen = errors = 0
    token = None
    while not done.is_set() or seen == 0:
        try:
            state = store.read(NOW)
            changes = store.changes(NOW, token)
            token = changes.token
            a, b = state.keys["fp1"].searches, state.keys["fp2"].searches
            if a != b:
                errors += 1
        except Exception:
            errors += 1
        seen += 1
    out.put((seen, errors))


def test_readers_in_other_processes_never_see_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    _write_loop(str(path), 1)
    ctx = multiprocessing.get_context("fork")
    done, out = ctx.Event(), ctx.Queue()
    readers = [ctx.Process(target=_read_loop, args=(str(path), done, out)) for _ in range(3)]
    for reader in readers:
        reader.start()
    writer = ctx.Process(target=_write_loop, args=(str(path), 300))
    writer.start()
    writer.join(timeout=60)
    done.set()
    results = [out.get(timeout=60) for _ in readers]
    for reader in readers:
        reader.join(timeout=10)
    assert writer.exitcode == 0
    assert all(seen > 0 and errors == 0 for seen, errors in results), results
    state = JsonFileStore(path).read(NOW)
    assert state.keys["fp1"].searches == state.keys["fp2"].searches == 301


def test_a_writer_killed_at_any_moment_leaves_a_readable_file(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    _write_loop(str(path), 1)
    ctx = multiprocessing.get_context("fork")
    last = 1
    for i in range(12):
        writer = ctx.Process(target=_write_loop, args=(str(path), 1_000_000))
        writer.start()
        before = os.stat(path).st_mtime_ns
        deadline = time.monotonic() + 10
        # Kill it once it is writing, at a moment that differs from round to round.
        while os.stat(path).st_mtime_ns == before and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.0003 * (i % 5))
        assert writer.pid is not None
        os.kill(writer.pid, signal.SIGKILL)
        writer.join(timeout=10)
        assert writer.exitcode == -signal.SIGKILL
        state = JsonFileStore(path).read(NOW)  # never a ConfigError
        fp1, fp2 = state.keys["fp1"].searches, state.keys["fp2"].searches
        assert fp1 == fp2 > last  # whole transactions, none lost that was read back
        last = fp1
        # The next write leaves a file that parses on its own, whatever the kill left.
        JsonFileStore(path).update(NOW, lambda s, i=i: setattr(s.key("fp3"), "searches", i + 1))
        assert json.loads(path.read_bytes())["keys"]["fp1"]["searches"] == fp1


def _plain_read_loop(path: str, done: Any, out: Any) -> None:
    """Read the file as a person's script does: no lock, no searchfuse."""
    seen = torn = 0
    while not done.is_set() or seen == 0:
        try:
            data = json.loads(Path(path).read_bytes())
            if data["keys"]["fp1"]["searches"] != data["keys"]["fp2"]["searches"]:
                torn += 1
        except (ValueError, KeyError):
            torn += 1
        seen += 1
    out.put((seen, torn))


def test_a_reader_without_the_lock_never_sees_a_torn_file(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    _write_loop(str(path), 1)
    ctx = multiprocessing.get_context("fork")
    done, out = ctx.Event(), ctx.Queue()
    readers = [ctx.Process(target=_plain_read_loop, args=(str(path), done, out)) for _ in range(3)]
    for reader in readers:
        reader.start()
    writers = [ctx.Process(target=_write_loop, args=(str(path), 150)) for _ in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=60)
    done.set()
    results = [out.get(timeout=60) for _ in readers]
    for reader in readers:
        reader.join(timeout=10)
    assert all(seen > 0 and torn == 0 for seen, torn in results), results


def test_the_text_made_again_only_for_changed_records_equals_a_full_one(tmp_path: Path) -> None:
    from searchfuse.router.state import MemoryStore, acquire
    from searchfuse.router.state._codec import state_to_json

    path = tmp_path / "quota.json"
    first, second = JsonFileStore(path), JsonFileStore(path)
    expected = MemoryStore()
    steps: list[Any] = [
        fill(5),
        lambda s: acquire(s, "fp0001", NOW, rpm=50, window=60.0, honour_hold=True),
        lambda s: acquire(s, "fp0002", NOW + 1, rpm=50, window=60.0, honour_hold=True),
        lambda s: acquire(s, "fp0001", NOW + 2, rpm=40, window=60.0, honour_hold=True),  # resized
        lambda s: s.apply_success("fp0003", "acc", "team", 2.0, NOW),
        lambda s: setattr(s.key("fp0000"), "last_error", "short"),
        lambda s: s.hold("fp0004", NOW + 30),
    ]
    for i, step in enumerate(steps * 3):
        (first if i % 2 else second).update(NOW + i, step)
        expected.update(NOW + i, step)
        if i == 9:
            first.cache_set("q", '{"answer": 1}', NOW + 600, 10)
        if i == 14:
            second.clear(NOW + i)
            expected.clear(NOW + i)
        raw = path.read_bytes()
        want = expected.read(NOW + i)
        want.rings = expected._state.rings  # `read` leaves pacing logs out
        full = state_to_json(want)
        if i >= 9:
            full["cache"] = {"q": ['{"answer": 1}', NOW + 600]}
        made = _json_text._dumps(full).rstrip()
        assert raw.rstrip() == made


def test_grants_keep_the_state_they_saved_and_the_text_equals_a_full_one(
    tmp_path: Path,
) -> None:
    """A grant's state is kept as the saved one, not copied: what the file says
    after grants and updates from two handles, taking turns, is what a memory
    store says after the same steps, and every record that changed is written."""
    from searchfuse.router.state import Charge, MemoryStore
    from searchfuse.router.state._codec import state_to_json

    path = tmp_path / "quota.json"
    first, second = JsonFileStore(path), JsonFileStore(path)
    expected = MemoryStore()
    for store in (first, expected):
        store.update(NOW, fill(3))
    for i in range(24):
        now = NOW + i
        handle = first if i % 3 else second
        fp = f"fp{i % 3:04d}"
        if i % 4 == 3:
            # An update between grants: a record the last grants left, changed again.
            def change(s: State, fp: str = fp, now: float = now) -> None:
                s.key(fp).note_error(now, 500, "500: upstream")

            handle.update(now, change)
            expected.update(now, change)
        else:
            charge = Charge(fp, "acc", "team", 1.0 + i % 2)
            got = handle.grant(now, fp, rpm=30, window=60.0, honour_hold=True, charge=charge)
            want = expected.grant(now, fp, rpm=30, window=60.0, honour_hold=True, charge=charge)
            assert (got.verdict, got.clean) == (want.verdict, want.clean), i
        state = expected.read(now)
        state.rings = expected._state.rings  # `read` leaves pacing logs out
        assert path.read_bytes().rstrip() == _json_text._dumps(state_to_json(state)).rstrip(), i
    assert (
        first.read(NOW + 30).keys["fp0001"].searches
        == expected.read(NOW + 30).keys["fp0001"].searches
    )


def test_a_record_an_update_returns_is_the_callers_to_change(tmp_path: Path) -> None:
    """What `update` answers may be a record of the state it changed: changing it
    afterwards changes nothing the store saved or will write."""
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)

    def counted(s: State) -> Any:
        s.key("fp0001").searches = 1
        return s.key("fp0001")

    record = store.update(NOW, counted)
    record.searches = 999
    store.update(NOW + 1, lambda s: setattr(s.key("fp0002"), "searches", 1))
    assert store.read(NOW + 1).keys["fp0001"].searches == 1
    assert '"searches": 999' not in path.read_text()


def test_the_lock_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    lock = tmp_path / "quota.json.lock"
    lock.write_bytes(b"")
    lock.chmod(0o644)  # as an older version's lock may be (it kept a copy of the state)
    store = JsonFileStore(path)
    store.update(NOW, bump)
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600


# -- how the new file takes the old one's place --------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux's")
def test_on_linux_the_new_file_is_swapped_in_and_the_old_one_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two names are exchanged (no rename over a file: ext4 would write the
    new file's data out first). The old file, held open by a reader, is never
    written again: the next write removes it and makes a new file."""
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    store.update(NOW, bump)
    calls: list[int] = []
    real = _files._find_renameat2()
    assert real is not False  # this Linux has it: the rest tests the swap

    def spy(*args: Any) -> int:
        calls.append(args[4])
        return int(real(*args))

    monkeypatch.setattr(_files, "_renameat2", spy)
    with open(path, "rb") as old:
        seen = old.read()
        store.update(NOW, bump)
        store.update(NOW, bump)
        assert os.fstat(old.fileno()).st_nlink == 0  # the old file: unlinked, not written
        old.seek(0)
        assert old.read() == seen
    assert calls == [_files._RENAME_EXCHANGE] * 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_bytes())["keys"]["fp1"]["searches"] == 3
    store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quota.json", "quota.json.lock"]


@pytest.mark.parametrize("swap", ["none on this system", "refused by the file system"])
def test_where_the_swap_is_not_to_be_had_the_file_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap: str
) -> None:
    refused: list[int] = []

    def refuse(*args: Any) -> int:
        refused.append(1)
        return -1  # as renameat2 answers EINVAL where a file system cannot exchange

    monkeypatch.setattr(_files, "_renameat2", False if swap == "none on this system" else refuse)
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    for _ in range(3):
        store.update(NOW, bump)
    assert json.loads(path.read_bytes())["keys"]["fp1"]["searches"] == 3
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quota.json", "quota.json.lock"]
    assert len(refused) == (0 if swap == "none on this system" else 2)  # the first: no file yet


def test_a_symlink_at_the_path_is_replaced_and_its_target_untouched(tmp_path: Path) -> None:
    """As a rename does: the link is what is replaced, never the file it names."""
    path = tmp_path / "quota.json"
    JsonFileStore(path).update(NOW, bump)
    target = tmp_path / "elsewhere.json"
    target.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(target)
    before = target.read_bytes()
    JsonFileStore(path).update(NOW, bump)
    assert not path.is_symlink() and target.read_bytes() == before
    assert json.loads(path.read_bytes())["keys"]["fp1"]["searches"] == 2


_KILLED_AFTER_SWAP = """
import os, sys, time
from pathlib import Path
from searchfuse.router.state import JsonFileStore

real = os.unlink
def stuck(name, *args, **kwargs):
    if str(name).endswith(".tmp"):
        print("swapped", flush=True)
        time.sleep(60)
    return real(name, *args, **kwargs)

store = JsonFileStore(Path(sys.argv[1]))
os.unlink = stuck
store.update(1_768_478_400.0, lambda s: setattr(s.key("fp1"), "searches", 7))
"""


@pytest.fixture
def swaps(tmp_path: Path) -> None:
    """Skips a test where this file system cannot swap two names (another system,
    or a file system that answers `renameat2(RENAME_EXCHANGE)` with EINVAL, ENOSYS
    or EOPNOTSUPP); anywhere else the swap must work, so a broken one fails."""
    swap = _files._find_renameat2()
    if swap is False:
        pytest.skip("this system has no renameat2")
    a, b = tmp_path / "swap-a", tmp_path / "swap-b"
    a.write_bytes(b"a")
    b.write_bytes(b"b")
    if swap(-100, bytes(a), -100, bytes(b), _files._RENAME_EXCHANGE) != 0:
        refused = ctypes.get_errno()
        assert refused in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP), os.strerror(refused)
        pytest.skip("this file system cannot swap two names")
    assert (a.read_bytes(), b.read_bytes()) == (b"b", b"a")
    a.unlink()
    b.unlink()


@pytest.mark.usefixtures("swaps")
def test_a_writer_killed_between_the_swap_and_the_unlink_leaves_the_new_state(
    tmp_path: Path,
) -> None:
    """kill -9 after the names are exchanged: the path holds the new state, and the
    old one, left under the temp file's name, is removed by the next load."""
    path = tmp_path / "quota.json"
    JsonFileStore(path).update(NOW, bump)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    writer = subprocess.Popen(
        [sys.executable, "-c", _KILLED_AFTER_SWAP, str(path)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == b"swapped\n"
    finally:
        writer.kill()
        writer.wait(timeout=10)
    left = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(left) == 1 and json.loads(left[0].read_bytes())["keys"]["fp1"]["searches"] == 1
    assert JsonFileStore(path).read(NOW).keys["fp1"].searches == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quota.json", "quota.json.lock"]


@pytest.mark.usefixtures("swaps")
@pytest.mark.parametrize("kind", ["a state file of another mode", "the skill's file, raw keys"])
def test_a_file_the_cleaner_would_not_remove_is_never_left_under_a_temp_name(
    tmp_path: Path, kind: str
) -> None:
    """What a swap puts under the temp file's name is removed by the next load only
    when it is provably a temp file of ours (mode 0600, this user's). A state file
    of another mode, or the skill's file naming keys raw, is replaced the plain
    way: a writer killed at any moment never leaves it behind."""
    path = tmp_path / "quota.json"
    if kind == "the skill's file, raw keys":
        old = {"month": "2026-01", "keys": {"tvly-dev-test0001": {"searches": 1}}}
        path.write_text(json.dumps(old))
        path.chmod(0o644)
    else:
        JsonFileStore(path).update(NOW, bump)
        path.chmod(0o644)
    # Stuck from the first write on: the one that rewrites the skill's file by fingerprint.
    script = _KILLED_AFTER_SWAP.replace("store = JsonFileStore(Path(sys.argv[1]))\n", "")
    script = script.replace("store.update(", "JsonFileStore(Path(sys.argv[1])).update(")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    writer = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert writer.stdout is not None
        writer.stdout.readline()  # "swapped" (then killed there), or the end of a write
    finally:
        writer.kill()
        writer.wait(timeout=10)
    assert JsonFileStore(path).read(NOW).keys["fp1"].searches == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quota.json", "quota.json.lock"]
    assert b"tvly-dev-test0001" not in path.read_bytes()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_pacing_logs_patched_between_saves_are_written_as_packed_whole() -> None:
    """A save packs a pacing log by patching its last save's bytes when only a few
    events were added; whatever else happened to the log (more events, a resize,
    a slot set back by a repair, a log made anew), the text is what packing it
    whole writes."""
    from searchfuse.router.state._codec import state_to_json
    from searchfuse.router.state._ring import Ring

    text = _json_text.StateText()
    state = State(month="2026-01")
    state.rings["search:fp1"] = ring = Ring(1_000_000)
    now = NOW

    def take(n: int) -> None:
        nonlocal now
        for _ in range(n):
            now += 0.25
            ring.take(60.0, now)

    def check() -> None:
        snapshot = _json_text.copy_state(state)
        made = text.text(snapshot, {})
        assert made == _json_text._dumps(state_to_json(snapshot))

    steps: list[Any] = [
        lambda: take(1),
        lambda: take(3),
        lambda: take(40),  # more than a patch takes
        lambda: ring.set(2, now - 5000.0),  # a slot changed without an event
        lambda: take(1),
        lambda: None,  # saved unchanged
    ]
    for step in steps * 3:
        step()
        check()
    state.rings["search:fp1"] = ring = ring.resized(30)  # full: the next events wrap around
    for _ in range(40):
        take(1)
        check()
    state.rings["search:fp1"] = ring = Ring(30)  # the same name, a new log
    take(1)
    check()


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 30, 1000])
def test_a_patched_pacing_log_is_byte_for_byte_the_packed_whole(size: int) -> None:
    """Every length of the packed bytes (their base64 ends in 0, 1 or 2 padding
    characters), a log that grows and one that wraps round: the patched base64
    is the whole log's."""
    import binascii
    import random

    from searchfuse.router.state._codec import pack_slots
    from searchfuse.router.state._ring import Ring

    rng = random.Random(size)
    ring, log, t = Ring(size), None, NOW
    for _ in range(200):
        ring = ring.copy()
        for _ in range(rng.choice([1, 1, 2, 3])):
            t += rng.random()
            ring.take(0.0, t)
        if log is None or not log.patch(ring):
            log = _json_text._PackedLog(ring)
        assert bytes(log.b64) == binascii.b2a_base64(pack_slots(ring.slots), newline=False)


@pytest.mark.usefixtures("swaps")
@pytest.mark.parametrize("what", ["keys file", "directory", "state of another writer"])
def test_what_takes_the_path_between_the_check_and_the_swap_is_checked_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    """The file swapped out is the one the write checked, or is checked now: a keys
    file copied to the path a moment before the swap is never removed, and a
    directory is named as not state; another writer's state is replaced, as ever."""
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    store.update(NOW, bump)
    keys_file = b'{"version": 2, "keys": [{"key": "tvly-dev-test0001"}]}'
    other = tmp_path / "other" / "quota.json"
    other.parent.mkdir()
    JsonFileStore(other).update(NOW, fill(2))
    real = _files._find_renameat2()
    swaps: list[int] = []

    def swap_after_a_copy(*args: Any) -> int:
        if not swaps:  # someone copies a file to the path just before the swap
            if what == "directory":
                path.unlink()
                path.mkdir()
            else:
                tmp = tmp_path / "copied"
                tmp.write_bytes(keys_file if what == "keys file" else other.read_bytes())
                tmp.chmod(0o600)
                os.replace(tmp, path)
        swaps.append(1)
        return int(real(*args))

    monkeypatch.setattr(_files, "_renameat2", swap_after_a_copy)
    if what == "state of another writer":
        store.update(NOW, bump)
        state = json.loads(path.read_bytes())
        assert state["keys"]["fp1"]["searches"] == 2 and "fp0001" not in state["keys"]
    else:
        with pytest.raises(ConfigError, match="not a searchfuse state file"):
            store.update(NOW, bump)
        if what == "keys file":
            assert path.read_bytes() == keys_file  # untouched
        else:
            assert path.is_dir()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
