"""Safe file handling for files that hold keys or state.

Incident 5 (a test overwrote the only copy of four live keys) is why every
rewrite here is atomic, private (mode 0600) and, for key files, preceded by a
byte-identical backup.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: temp files age out instead
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "STALE_TEMP_AGE",
    "Replaced",
    "atomic_write",
    "backup",
    "clean_stale_temps",
    "is_own_temp",
    "new_temp",
    "set_aside",
    "swap",
    "temp_pattern",
    "timestamp",
    "write_all",
]

log = logging.getLogger("searchfuse.files")

PRIVATE = 0o600
#: A temp file of ours older than this was left by a process that died mid-write
#: (a write takes milliseconds); the next load removes it. Where file locks work,
#: a temp file whose writer is gone is removed at once, whatever its age: its
#: writer holds a lock on it for as long as it lives (see `atomic_write`).
STALE_TEMP_AGE = 600.0


def timestamp(epoch: float) -> str:
    """`20261130T081300Z`: sortable, filename-safe, UTC."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch))


def _free_name(base: Path) -> Path:
    """`base` if free, else `base.1`, `base.2`... (two backups in one second)."""
    if not base.exists():
        return base
    n = 1
    while True:
        candidate = base.with_name(f"{base.name}.{n}")
        if not candidate.exists():
            return candidate
        n += 1


def temp_pattern(path: Path) -> re.Pattern[str]:
    """The names `atomic_write` gives its temp files for `path`: `.<name>.XXXXXXXX.tmp`.

    `searchfuse init` writes ignore rules covering them, so a temp file left
    by a killed process (it may hold keys) can never be committed.
    """
    return re.compile(rf"\.{re.escape(Path(path).name)}\.[A-Za-z0-9_]{{8}}\.tmp")


def is_own_temp(candidate: Path, path: Path) -> bool:
    """True if `candidate` is provably a temp file `atomic_write` made for `path`:
    its name, its folder, a regular file, owned by this user, mode 0600."""
    if candidate.parent != Path(path).parent or not temp_pattern(path).fullmatch(candidate.name):
        return False
    try:
        info = candidate.lstat()
    except OSError:
        return False
    return _cleanable(info)


def clean_stale_temps(path: Path, now: float, max_age: float = STALE_TEMP_AGE) -> list[Path]:
    """Remove temp files of `path` left by a process killed mid-write; return what was removed.

    Only files that are provably ours (see `is_own_temp`) and older than
    `max_age` seconds are touched: a younger one may belong to a write in progress.
    """
    path = Path(path)
    removed: list[Path] = []
    try:
        names = os.listdir(path.parent)
    except OSError:
        return removed
    pattern = temp_pattern(path)
    for name in names:
        candidate = path.parent / name
        if not pattern.fullmatch(name) or not is_own_temp(candidate, path):
            continue
        try:
            if not _abandoned(candidate, now, max_age):
                continue
            candidate.unlink()
        except OSError:
            continue
        removed.append(candidate)
        log.info("removed %s, left by a write that never finished", candidate.name)
    return removed


def _abandoned(candidate: Path, now: float, max_age: float) -> bool:
    """True if no live process is writing `candidate` (a temp file of ours).

    `atomic_write` locks its temp file from before the first byte until the
    rename, so a temp file with bytes in it that can be locked was left by a
    process that died (kill -9, a crash, a power cut). An empty one may be a
    write a moment before its lock: only its age can tell.
    """
    info = candidate.stat()
    if now - info.st_mtime >= max_age:
        return True
    if fcntl is None or info.st_size == 0:
        return False
    try:
        fd = os.open(candidate, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # its writer holds it, or this file system has no locks
    finally:
        os.close(fd)
    return True


def _hold(fd: int) -> None:
    """Lock a temp file for as long as its writer lives (see `_abandoned`)."""
    if fcntl is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


class Replaced(OSError):
    """The file at the path is not the one the write was told it replaces: put back."""


#: A check of the file a write takes the place of (its `lstat`): True to replace it.
Replaces = Callable[[os.stat_result], bool]


def atomic_write(path: Path, data: bytes, mode: int = PRIVATE) -> None:
    """Write `data` to `path` atomically and durably: a temp file in the same
    folder, fsync, rename, fsync of the folder.

    Readers see the old content or the new one, never a half-written file.
    The file is created with `mode` (0600) before any byte is written. (The
    state file, a cache written on every search, is written without fsync by
    `_rewrite.Rewriter`.)
    """
    path = Path(path)
    fd, tmp = new_temp(path, mode)
    # The file stays open (and locked) until after the rename: a temp file
    # that can be locked is one whose writer is gone.
    try:
        write_all(fd, data)
        os.fsync(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)
    # Make the rename itself durable.
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def new_temp(path: Path, mode: int = PRIVATE) -> tuple[int, str]:
    """A new temp file beside `path` (named as `temp_pattern` says), open, locked
    for as long as it stays open (see `_abandoned`), and of `mode`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    _hold(fd)
    try:
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return fd, tmp


#: Linux's `renameat2`, looked up on the first write that can use it (`False`:
#: this system has none).
_renameat2: Any = None
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def swap(tmp: str, path: Path, replaces: Replaces | None = None) -> os.stat_result | None:
    """Put the file at `tmp` in place of `path` atomically. If the two names were
    swapped, the old file is at `tmp` now: returns what `lstat` saw there; `None`
    if `tmp` was renamed over it.

    Both are atomic for a reader, but a rename over an existing file makes
    ext4 (and others, `auto_da_alloc`) write the new file's data out first: on
    the state file, written on every search, that was most of a write's cost
    (about 170 us of 200). The state file is a cache and never fsynced: after
    a power cut it may come back empty, and is then read as empty state.
    Anywhere the swap is refused (another system, a file system without it,
    no file at `path` yet) this is `os.replace`; so it is over a file that,
    killed before its removal, this would leave where `clean_stale_temps`
    never removes it (a symbolic link, another user's file, a file of another
    mode: the skill's, naming keys). The old file is looked at (`replaces`):
    a file that came to the path since the caller checked it is put back, and
    `Replaced` raised.
    """
    global _renameat2
    if _renameat2 is None:
        _renameat2 = _find_renameat2()
    try:
        old = os.lstat(path)
    except OSError:
        old = None
    if _renameat2 is False or old is None or not _cleanable(old):
        # Nothing to swap with, or a file that, left under the temp file's name by
        # a kill before the unlink, `clean_stale_temps` would never remove.
        os.replace(tmp, path)
        return None
    if not _exchange(tmp, path):
        os.replace(tmp, path)  # refused here (EINVAL on this file system, ENOENT...)
        return None
    try:
        info = os.lstat(tmp)
        if replaces is None or replaces(info):
            return info
    except FileNotFoundError:
        return None  # a cleaner took it for an abandoned temp file: it was going
    except OSError:
        _exchange(tmp, path)  # not a file (a directory swapped in meanwhile): swap back
        raise
    _exchange(tmp, path)
    raise Replaced(errno.EEXIST, "changed since it was checked", str(path))


def _exchange(a: str, b: Path) -> bool:
    """Swap the files named `a` and `b` atomically; False if refused."""
    answer: int = _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return answer == 0


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _cleanable(info: os.stat_result) -> bool:
    """True for a file `is_own_temp` would take for ours: regular, this user's, 0600."""
    return (
        stat.S_ISREG(info.st_mode)
        and info.st_uid == os.getuid()
        and stat.S_IMODE(info.st_mode) == PRIVATE
    )


def _find_renameat2() -> Any:
    """libc's `renameat2`, or False where there is none (not Linux, an old libc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        func = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError, ImportError):
        return False
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


def set_aside(path: Path, epoch: float, label: str = "corrupt") -> Path | None:
    """Move `path` to `<name>.<label>.<timestamp>` beside it (mode 0600) and return
    the new path; None if `path` is gone (another process moved it first).

    Never overwrites: the new name is linked first, which fails if it exists,
    and only then is the old name removed.
    """
    path = Path(path)
    base = path.with_name(f"{path.name}.{label}.{timestamp(epoch)}")
    while True:
        target = _free_name(base)
        try:
            os.link(path, target)
        except FileExistsError:
            continue  # taken since it was checked: the next free name
        except FileNotFoundError:
            return None
        except OSError:
            # No hard links here (some network and FAT file systems): a rename
            # to a name checked free a moment ago.
            if target.exists():
                continue
            try:
                os.rename(path, target)
            except FileNotFoundError:
                return None
            break
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            break
    with contextlib.suppress(OSError):
        os.chmod(target, PRIVATE)
    return target


def backup(path: Path, epoch: float) -> Path:
    """Copy `path` byte for byte to `<name>.bak.<timestamp>` (mode 0600) and return it.

    The copy is read back and compared before this returns, so a caller may
    rely on it when it goes on to rewrite the original.
    """
    path = Path(path)
    data = path.read_bytes()
    target = _free_name(path.with_name(f"{path.name}.bak.{timestamp(epoch)}"))
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(target, PRIVATE)
    if target.read_bytes() != data:
        raise OSError(f"backup {target.name} does not match {path.name}")
    return target
