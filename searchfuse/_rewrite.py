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
        files.check_pid()
        fd, tmp = self._spare_or_new()
        try:
            _write_at_start(fd, data)
            swapped = swap(tmp, self.path, replaces)
        except BaseException:
            _drop(fd, tmp)
            raise
        # `fd` is at the path now; the file it took the place of is at `tmp` if
        # `swapped`. It is kept if it is the one this rewriter wrote last.
        old, files.current = files.current, fd
        if swapped and old is not None and self._leases and _same(old, tmp):
            files.spare = (old, tmp)
            return
        if old is not None:
            os.close(old)
        if swapped:
            with contextlib.suppress(OSError):  # else left to `clean_stale_temps`
                os.unlink(tmp)

    def close(self) -> None:
        """Remove the kept file and close both files."""
        self._files.close()

    def _spare_or_new(self) -> tuple[int, str]:
        """The kept file, if nobody else has it open (checked by a lease); else a new temp file."""
        spare, self._files.spare = self._files.spare, None
        if spare is not None:
            fd, name = spare
            if _same(fd, name, only_name=True) and self._alone(fd):
                return fd, name
            _drop(fd, name)
        fd, name = new_temp(self.path)
        if self._leases:
            # A lease broken (by a cleaner opening the kept file in the moment
            # the lease is held) signals its holder: SIGURG, ignored unless
            # handled, instead of SIGIO, whose default ends the process.
            try:
                fcntl.fcntl(fd, _SETSIG, signal.SIGURG)
            except OSError:
                self._leases = False
        return fd, name

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
    reference to it): the file it put at the path last (open, so its inode
    number is not given to another file) and the kept one, `(fd, name)`."""

    __slots__ = ("current", "pid", "spare")

    def __init__(self) -> None:
        self.current: int | None = None
        self.spare: tuple[int, str] | None = None
        self.pid = os.getpid()

    def check_pid(self) -> None:
        """In a forked child: close the parent's files, leave them where they are."""
        if self.pid == os.getpid():
            return
        for fd in (self.current, self.spare[0] if self.spare else None):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.current = self.spare = None
        self.pid = os.getpid()

    def close(self) -> None:
        self.check_pid()
        spare, current, self.spare, self.current = self.spare, self.current, None, None
        if spare is not None:
            _drop(*spare)
        if current is not None:
            os.close(current)

    def remove_spare(self) -> None:
        """Remove the kept file's name, closing nothing."""
        spare = self.spare
        if spare is not None and self.pid == os.getpid():
            with contextlib.suppress(OSError):
                if _same(*spare):
                    os.unlink(spare[1])


#: The rewriters alive, whose kept files the interpreter's exit removes.
_LIVE: weakref.WeakSet[Rewriter] = weakref.WeakSet()


@atexit.register
def _at_exit() -> None:
    for rewriter in list(_LIVE):
        rewriter._files.remove_spare()


def _drop(fd: int, name: str) -> None:
    """Close `fd` and remove `name` if it is still that file."""
    try:
        if _same(fd, name):
            os.unlink(name)
    except OSError:
        pass
    finally:
        os.close(fd)


def _same(fd: int, name: str, *, only_name: bool = False) -> bool:
    """True if `name` is the file open as `fd` (`only_name`: and its one name; a
    hard link made to the state file, a backup's, is someone else's file too)."""
    try:
        a, b = os.fstat(fd), os.lstat(name)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) and (not only_name or a.st_nlink == 1)


def _write_at_start(fd: int, data: bytes) -> None:
    """`data` as the whole content of file `fd` (written from its start, cut after)."""
    view = memoryview(data)
    at = 0
    while at < len(data):
        at += os.pwrite(fd, view[at:], at)
    if os.fstat(fd).st_size != len(data):
        os.ftruncate(fd, len(data))
