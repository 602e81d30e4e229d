"""The JSON store writes its next version into the file it replaced last time, and
only when nobody else has that file open: a reader never sees it change."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from searchfuse import _files, _rewrite
from searchfuse.router.state import JsonFileStore, State

NOW = 1_768_478_400.0

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or _files._find_renameat2() is False,
    reason="the swap and the lease are Linux's",
)


def bump(state: State) -> int:
    ks = state.key("fp1")
    ks.searches += 1
    return ks.searches


def searches(path: Path) -> int:
    return int(json.loads(path.read_bytes())["keys"]["fp1"]["searches"])


def written(path: Path, n: int) -> JsonFileStore:
    """A store on `path` that has written `n` times."""
    store = JsonFileStore(path)
    for _ in range(n):
        store.update(NOW, bump)
    return store


def _writer_script(n: int, then: str) -> str:
    """A child process's script: a store on the path it is given counts `n`
    searches, then runs `then`."""
    return (
        "import sys\n"
        "from pathlib import Path\n"
        "from searchfuse.router.state import JsonFileStore\n"
        "s = JsonFileStore(Path(sys.argv[1]))\n"
        f"for n in range({n}):\n"
        "    s.update(1_768_478_400.0, lambda st: setattr(st.key('fp1'), 'searches', n + 1))\n"
        + then
    )


def _child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def temps(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The temp files the store makes (each a new inode)."""
    names: list[str] = []
    real = _files.new_temp

    def counted(*args: Any, **kwargs: Any) -> tuple[int, str]:
        fd, name = real(*args, **kwargs)
        names.append(name)
        return fd, name

    monkeypatch.setattr(_rewrite, "new_temp", counted)
    return names


@pytest.fixture
def leases(tmp_path: Path) -> None:
    """Skips where this file system gives no write lease on a file of ours."""
    probe = tmp_path / "lease-probe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    except OSError as exc:
        assert exc.errno in _rewrite._NO_LEASES, os.strerror(exc.errno or 0)
        pytest.skip("no file leases here")
    finally:
        os.close(fd)
        probe.unlink()


@pytest.mark.usefixtures("leases")
def test_with_nobody_else_reading_two_files_take_turns(tmp_path: Path, made: list[str]) -> None:
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    inodes = set()
    for _ in range(20):
        store.update(NOW, bump)
        inodes.add(path.stat().st_ino)
    assert searches(path) == 20
    # The first write made the file, the second made its partner: no file after.
    assert len(made) == 2 and len(inodes) == 2
    assert [p.name for p in temps(tmp_path)] == [Path(made[-1]).name]
    assert _files.is_own_temp(temps(tmp_path)[0], path)  # private, ours: cleanable
    store.close()
    assert temps(tmp_path) == []


@pytest.mark.parametrize("held_for", [1, 2, 5])
def test_a_reader_holding_the_file_reads_the_version_it_opened(
    tmp_path: Path, held_for: int
) -> None:
    """Opened by path, kept open over any number of writes: never written over."""
    path = tmp_path / "quota.json"
    store = written(path, 3)
    with open(path, "rb") as reader:
        for _ in range(held_for):
            store.update(NOW, bump)
        assert json.loads(reader.read())["keys"]["fp1"]["searches"] == 3
    for _ in range(3):
        store.update(NOW, bump)
    assert searches(path) == 6 + held_for
    store.close()


def test_a_reader_of_the_kept_file_is_never_written_under(tmp_path: Path) -> None:
    """Opened by its temp name (a cleaner looking at it, a backup tool): not written over."""
    path = tmp_path / "quota.json"
    store = written(path, 3)
    kept = temps(tmp_path)
    with open(kept[0], "rb") as reader:
        before = reader.read()
        for _ in range(4):
            store.update(NOW, bump)
        reader.seek(0)
        assert reader.read() == before
    assert searches(path) == 7
    store.close()
    assert temps(tmp_path) == []


def test_without_leases_every_write_makes_a_file_and_removes_the_old(
    tmp_path: Path, made: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    real = fcntl.fcntl

    def no_leases(fd: int, cmd: int, arg: int = 0) -> Any:
        if cmd == fcntl.F_SETLEASE:
            raise OSError(errno.EINVAL, "no leases on this file system")
        return real(fd, cmd, arg)

    monkeypatch.setattr(_rewrite.fcntl, "fcntl", no_leases)
    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    for _ in range(6):
        store.update(NOW, bump)
        assert len(temps(tmp_path)) <= 1
    assert searches(path) == 6
    # Refused once: from then on, the old file is removed at each write.
    assert len(made) == 6 and len(temps(tmp_path)) == 0
    store.close()


def test_a_kept_file_removed_by_hand_is_made_again(tmp_path: Path, made: list[str]) -> None:
    path = tmp_path / "quota.json"
    store = written(path, 3)
    for kept in temps(tmp_path):
        kept.unlink()
    other = tmp_path / made[-1]
    other.write_bytes(b"not ours")  # another file under the same name: left alone
    for _ in range(3):
        store.update(NOW, bump)
    assert searches(path) == 6
    assert other.read_bytes() == b"not ours"
    store.close()
    assert other.read_bytes() == b"not ours"


def test_a_second_store_opening_leaves_a_live_writers_kept_file(
    tmp_path: Path, made: list[str]
) -> None:
    """Its writer holds a lock on it: another process's cleaner does not take it."""
    path = tmp_path / "quota.json"
    code = _writer_script(9, "print('written', flush=True)\nsys.stdin.readline()\n")
    writer = subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=_child_env(),
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == b"written\n"
        kept = temps(tmp_path)
        assert len(kept) == 1
        JsonFileStore(path).close()  # opening runs the cleaner
        assert temps(tmp_path) == kept
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=10)
    finally:
        writer.kill()
        writer.wait(timeout=10)
    # Its writer is gone: the next store to open removes it.
    store = JsonFileStore(path)
    assert temps(tmp_path) == []
    assert store.read(NOW).keys["fp1"].searches == 9
    store.close()


def _child_writes(path: str, store: JsonFileStore) -> None:
    for _ in range(5):
        store.update(NOW, bump)
    os._exit(0)


def test_a_forked_child_writes_its_own_files(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    store = written(path, 3)
    kept = temps(tmp_path)
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_child_writes, args=(str(path), store))
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    assert searches(path) == 8
    assert kept[0].exists()  # the parent's kept file: the child left it alone
    for _ in range(2):
        store.update(NOW, bump)
    assert searches(path) == 10
    store.close()
    # The child's own kept file (it never closed): removed by the next store to open.
    JsonFileStore(path).close()
    assert temps(tmp_path) == []


def test_an_unclosed_store_leaves_no_file_after_a_normal_exit(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    code = _writer_script(4, "assert len(list(Path(sys.argv[1]).parent.glob('*.tmp'))) == 1\n")
    subprocess.run(
        [sys.executable, "-c", code, str(path)], env=_child_env(), check=True, timeout=60
    )
    assert temps(tmp_path) == []
    assert searches(path) == 4


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_store_collected_unclosed_closes_its_files_and_removes_the_kept_one(
    tmp_path: Path,
) -> None:
    import gc

    path = tmp_path / "quota.json"
    store = JsonFileStore(path)
    for _ in range(4):
        store.update(NOW, bump)
    assert len(temps(tmp_path)) == 1
    del store
    gc.collect()
    assert temps(tmp_path) == []
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            held.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # the listing's own descriptor, closed since
    # The state file and the kept one: closed (the lock file is the lock's own).
    assert not [t for t in held if t.startswith(str(tmp_path)) and ".lock" not in t]


def test_a_hard_link_to_the_state_file_keeps_its_content(tmp_path: Path) -> None:
    """A backup made by hard link (`cp -l`, a snapshot tool) names the same file:
    it is never written over, though nobody has it open."""
    path = tmp_path / "quota.json"
    store = written(path, 3)
    backup = tmp_path / "backup.json"
    os.link(path, backup)
    before = backup.read_bytes()
    for _ in range(4):
        store.update(NOW, bump)
    assert backup.read_bytes() == before
    assert searches(path) == 7
    store.close()
    assert backup.read_bytes() == before
