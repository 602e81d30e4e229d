"""The JSON store's lock: `<file>.lock`, held for every read-modify-write."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path
from typing import Any

from searchfuse._files import PRIVATE
from searchfuse._fork import generation
from searchfuse.errors import StoreUnavailable

__all__ = ["Locked", "process_lock"]


class _FlockLock:
    """`<file>.lock` held with `flock`, for the JSON store's transactions (POSIX).

    Writers hold it for a read-modify-write; readers never need it (the file
    is replaced whole by rename).

    The lock file stays open, so taking a free lock is one system call
    (`filelock` opens and closes the file each time). A lock another process
    holds is tried again after 0.5 ms, then 1, 2 and at most 5 ms between
    tries (`filelock` waits 50 ms between tries, which made a 99th percentile
    of ~300 ms with 8 processes), until `timeout`. The caller holds a thread
    lock around it; `acquire` returns False on timeout.
    """

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._fd: int | None = None
        #: The fork generation that opened `_fd`, and which file it is (device, inode).
        self._forks = -1
        self._held: tuple[int, int] = (0, 0)
        self._depth = 0

    def _open(self) -> int:
        if self._fd is not None and self._forks == generation():
            return self._fd
        if self._fd is not None:
            # Inherited through a fork: it shares the parent's lock, so this
            # process needs its own open file.
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
            self._depth = 0
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, PRIVATE)
        try:
            info = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        # As private as the state (an older version kept a copy of it here).
        with contextlib.suppress(OSError):
            if stat.S_IMODE(info.st_mode) != PRIVATE:
                os.fchmod(fd, PRIVATE)
        self._fd = fd
        self._held = (info.st_dev, info.st_ino)
        self._forks = generation()
        self._depth = 0
        return self._fd

    def acquire(self) -> bool:
        """Take the lock within `timeout` (taken again by the holder, it only counts)."""
        import fcntl

        fd = self._open()
        if self._depth:
            self._depth += 1
            return True
        deadline = time.monotonic() + self.timeout
        pause = 0.0005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.005)
                continue
            if not self._still_there():
                # The lock file was deleted (or replaced) while this process held
                # it open: a lock on it excludes nobody who opens the path now.
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                self._fd = None
                fd = self._open()
                continue
            self._depth = 1
            return True

    def _still_there(self) -> bool:
        """Whether the path still names the lock file held (an open file's
        identity never changes: it was read once, when the file was opened)."""
        try:
            there = os.stat(self.path)
        except FileNotFoundError:
            return False
        except OSError:
            return True
        return (there.st_dev, there.st_ino) == self._held

    def release(self) -> None:
        import fcntl

        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None and self._forks == generation() and not self._depth:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class _FileLockLock:
    """`filelock.FileLock` where `flock` does not exist (Windows)."""

    def __init__(self, path: Path, timeout: float) -> None:
        from filelock import FileLock  # not at import time: `import searchfuse` stays light

        self._lock = FileLock(str(path), timeout=timeout)

    def acquire(self) -> bool:
        from filelock import Timeout

        try:
            self._lock.acquire()
        except Timeout:
            return False
        return True

    def release(self) -> None:
        self._lock.release()


def process_lock(path: Path, timeout: float) -> _FlockLock | _FileLockLock:
    """The lock that makes a JSON store's read-modify-write one transaction across processes."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return _FileLockLock(path, timeout)
    return _FlockLock(path, timeout)


class Locked:
    """A JSON store's thread lock and process lock, for one `with` block."""

    __slots__ = ("held", "lock", "name", "thread_lock", "timeout")

    def __init__(self, name: str, thread_lock: Any, lock: Any, timeout: float) -> None:
        self.name, self.thread_lock, self.lock, self.timeout = name, thread_lock, lock, timeout
        self.held = False

    def __enter__(self) -> None:
        self.thread_lock.acquire()
        try:
            taken = self.lock.acquire()
        except OSError as exc:
            self.thread_lock.release()
            raise StoreUnavailable(
                self.name,
                f"its lock file cannot be opened ({exc.strerror})",
                "check the permissions of its folder",
            ) from None
        if not taken:
            self.thread_lock.release()
            raise StoreUnavailable(
                self.name,
                f"another process held its lock for more than {self.timeout:g} s",
                "check for a stuck searchfuse process, or use the SQLite store",
            ) from None
        self.held = True

    def __exit__(self, *exc: object) -> None:
        if self.held:
            self.lock.release()
        self.thread_lock.release()
