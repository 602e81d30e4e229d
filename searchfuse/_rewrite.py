"""One cache file written again and again, atomically, without a new file per write.

The JSON state file is written on every search. Each write is a temp file
swapped in for the old one (`_files.swap`), and making that temp file and
removing the old one were most of a write's cost (a new inode and a freed one:
60-100 us on ext4, more than the rest of the write). `Rewriter` keeps the old
file, now under the temp file's name, and writes the next version into it.

That is safe only if nobody still has the old file open: a reader that opened
the state file just before a swap would read the next write in progress. A
write lease tells (`fcntl(F_SETLEASE, F_WRLCK)` is granted only while no
other open file -- in this process or any other -- refers to the file); the
lease is dropped at once. Nor is a file written over that has another name
(a hard link, a backup's). Where a reader has it open, or leases do not work
here (another system, NFS, `fs.leases-enable=0`), the old file is removed and a
new one made, as `atomic_write` does.

The kept file is a temp file of ours (`.<name>.XXXXXXXX.tmp`, mode 0600),
locked while its writer lives, so `clean_stale_temps` removes it only after
its writer is gone or once it is ten minutes old; `close` removes it.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import signal
import weakref
from pathlib import Path

from searchfuse._files import Replaces, new_temp, swap
from searchfuse._fork import generation

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: no file is kept
    fcntl = None  # type: ignore[assignment]

__all__ = ["Rewriter"]

#: fcntl's commands (0: this system has none).
_SETLEASE: int = getattr(fcntl, "F_SETLEASE", 0)
_SETSIG: int = getattr(fcntl, "F_SETSIG", 0)
#: Refusals that say leases cannot work here at all (not: somebody has the file open).
_NO_LEASES = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM, errno.EACCES}


class Rewriter:
    """Writes `path` atomically again and again (see the module docstring).

    Not thread-safe: the caller holds a lock around `write` and `close`. The
    kept file is removed by `close`, or when the rewriter is collected or the
    interpreter exits.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._files = _Files()
        self._leases = bool(_SETLEASE and _SETSIG)
        # Collected unclosed: both files closed, the kept one removed. At exit
        # only the kept one's name is removed (`_at_exit`): a daemon thread may
        # still be writing, and a closed descriptor's number may be reused.
        weakref.finalize(self, self._files.close).atexit = False
        _LIVE.add(self)

    def write(self, data: bytes, replaces: Replaces | None = None) -> None:
        """Put `data` at the path atomically (no fsync: for a cache). `replaces`
        is asked about the file it takes the place of (see `_files.swap`)."""
        files = self._files
        files.check_fork()
        fd, tmp, ident, size = self._spare_or_new()
        try:
            _write_at_start(fd, data, size)
            swapped = swap(tmp, self.path, replaces)
        except BaseException:
            _drop(fd, tmp, ident)
            raise
        # `fd` is at the path now; the file it took the place of is at `tmp` if it
        # was `swapped`. It is kept if it is the one this rewriter wrote last.
        old, files.current = files.current, (fd, ident)
        if swapped is not None and old is not None and self._leases and _ident(swapped) == old[1]:
            files.spare = (old[0], tmp, old[1])
            return
        if old is not None:
            os.close(old[0])
        if swapped is not None:
            with contextlib.suppress(OSError):  # else left to `clean_stale_temps`
                os.unlink(tmp)

    def close(self) -> None:
        """Remove the kept file and close both files."""
        self._files.close()

    def _spare_or_new(self) -> tuple[int, str, tuple[int, int], int]:
        """The kept file, if nobody else has it open (checked by a lease); else a new
        temp file. With its identity (device, inode) and size."""
        spare, self._files.spare = self._files.spare, None
        if spare is not None:
            fd, name, ident = spare
            size = _alone_named(ident, name)
            if size is not None and self._alone(fd):
                return fd, name, ident, size
            _drop(fd, name, ident)
        fd, name = new_temp(self.path)
        try:
            ident = _ident(os.fstat(fd))
        except OSError:
            _drop(fd, name, None)
            raise
        if self._leases:
            # A lease broken (by a cleaner opening the kept file in the moment
            # the lease is held) signals its holder: SIGURG, ignored unless
            # handled, instead of SIGIO, whose default ends the process.
            try:
                fcntl.fcntl(fd, _SETSIG, signal.SIGURG)
            except OSError:
                self._leases = False
        return fd, name, ident, 0

    def _alone(self, fd: int) -> bool:
        """True if no other open file refers to `fd`'s file (in any process)."""
        try:
            fcntl.fcntl(fd, _SETLEASE, fcntl.F_WRLCK)
        except OSError as exc:
            if exc.errno in _NO_LEASES:
                self._leases = False
            return False
        fcntl.fcntl(fd, _SETLEASE, fcntl.F_UNLCK)
        return True


class _Files:
    """A rewriter's open files (apart from it, so that its finalizer holds no
    reference to it): the file it put at the path last, `(fd, identity)` (open,
    so its inode number is not given to another file), and the kept one,
    `(fd, name, identity)`. An open file's identity never changes: it is
    read once, when the file is made."""

    __slots__ = ("current", "forks", "spare")

    def __init__(self) -> None:
        self.current: tuple[int, tuple[int, int]] | None = None
        self.spare: tuple[int, str, tuple[int, int]] | None = None
        self.forks = generation()

    def check_fork(self) -> None:
        """In a forked child: close the parent's files, leave them where they are."""
        if self.forks == generation():
            return
        for held in (self.current, self.spare):
            if held is not None:
                with contextlib.suppress(OSError):
                    os.close(held[0])
        self.current = self.spare = None
        self.forks = generation()

    def close(self) -> None:
        self.check_fork()
        spare, current, self.spare, self.current = self.spare, self.current, None, None
        if spare is not None:
            _drop(*spare)
        if current is not None:
            os.close(current[0])

    def remove_spare(self) -> None:
        """Remove the kept file's name, closing nothing."""
        spare = self.spare
        if spare is not None and self.forks == generation():
            with contextlib.suppress(OSError):
                if _named(spare[2], spare[1]):
                    os.unlink(spare[1])


#: The rewriters alive, whose kept files the interpreter's exit removes.
_LIVE: weakref.WeakSet[Rewriter] = weakref.WeakSet()


@atexit.register
def _at_exit() -> None:
    for rewriter in list(_LIVE):
        rewriter._files.remove_spare()


def _drop(fd: int, name: str, ident: tuple[int, int] | None) -> None:
    """Close `fd` and remove `name` if it is still that file (`ident`; `None`:
    looked up here)."""
    try:
        if ident is None:
            ident = _ident(os.fstat(fd))
        if _named(ident, name):
            os.unlink(name)
    except OSError:
        pass
    finally:
        os.close(fd)


def _ident(info: os.stat_result) -> tuple[int, int]:
    return (info.st_dev, info.st_ino)


def _named(ident: tuple[int, int], name: str) -> bool:
    """True if `name` is the file whose identity is `ident`."""
    try:
        return _ident(os.lstat(name)) == ident
    except OSError:
        return False


def _alone_named(ident: tuple[int, int], name: str) -> int | None:
    """The size of file `ident` if `name` is it and its only name (a hard link made
    to the state file, a backup's, is someone else's file too); else `None`."""
    try:
        info = os.lstat(name)
    except OSError:
        return None
    return info.st_size if _ident(info) == ident and info.st_nlink == 1 else None


def _write_at_start(fd: int, data: bytes, size: int) -> None:
    """`data` as the whole content of file `fd`, whose size is `size` (written
    from its start, cut after)."""
    view = memoryview(data)
    at = 0
    while at < len(data):
        at += os.pwrite(fd, view[at:], at)
    if size > len(data):
        os.ftruncate(fd, len(data))
