"""State in one JSON file (`state/quota.json`), shared by processes through a file lock.

Kept for paths ending in `.json`. Every update rewrites the whole file, so
it suits a handful of keys and processes; the SQLite store is the default.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from searchfuse._files import atomic_write, clean_stale_temps
from searchfuse.errors import ConfigError, StoreUnavailable
from searchfuse.router.state._base import Changes, TxState
from searchfuse.router.state._model import (
    Ring,
    State,
    looks_like_state,
    month_of,
    rolled,
    rollover,
    state_from_json,
    state_to_json,
)

__all__ = ["JsonFileStore"]

log = logging.getLogger("searchfuse.state")
T = TypeVar("T")

#: Default bound on waiting for another process's lock.
LOCK_TIMEOUT = 5.0


class _FlockLock:
    """`<file>.lock` held with `flock`, for the JSON store's transactions (POSIX).

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
        self._pid = 0
        self._depth = 0

    def _open(self) -> int:
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        if self._fd is not None:
            # Inherited through a fork: it shares the parent's lock, so this
            # process needs its own open file.
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self._pid = os.getpid()
        self._depth = 0
        return self._fd

    def acquire(self) -> bool:
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
            self._depth = 1
            return True

    def release(self) -> None:
        import fcntl

        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid() and not self._depth:
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


def _process_lock(path: Path, timeout: float) -> _FlockLock | _FileLockLock:
    """The lock that makes a JSON store's read-modify-write one transaction across processes."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return _FileLockLock(path, timeout)
    return _FlockLock(path, timeout)


def _copy(state: State, rings: bool = True) -> State:
    """A copy of `state` whose records a transaction may change freely."""
    return State(
        month=state.month,
        keys={fp: copy.copy(ks) for fp, ks in state.keys.items()},
        accounts={name: copy.copy(acc) for name, acc in state.accounts.items()},
        hold_until=state.hold_until,
        hold_key=state.hold_key,
        rings=(
            {name: Ring(r.size, r.seq, list(r.slots)) for name, r in state.rings.items()}
            if rings
            else {}
        ),
    )


def _dumps(data: dict[str, Any]) -> str:
    """`data` as text with one line per key, account, pacing log and cache entry.

    As readable as an indented dump, but every line is written by the C
    encoder (`indent=` makes `json` fall back to pure Python, which costs
    milliseconds per search once pacing logs hold a few thousand times).
    """
    lines = []
    for name, value in sorted(data.items()):
        if isinstance(value, dict) and value:
            inner = ",\n".join(
                f"  {json.dumps(str(k))}: {json.dumps(v, sort_keys=True)}"
                for k, v in sorted(value.items())
            )
            lines.append(f" {json.dumps(name)}: {{\n{inner}\n }}")
        else:
            lines.append(f" {json.dumps(name)}: {json.dumps(value, sort_keys=True)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def not_state(path: Path, what: str) -> ConfigError:
    """The error for a `state=` path that holds something else; the file is left alone."""
    return ConfigError(
        str(path),
        None,
        f"is not a searchfuse state file ({what}); searchfuse leaves it untouched",
        "point state= (or --state / SEARCHFUSE_STATE) at a new file, for example "
        "state/searchfuse.db",
    )


class JsonFileStore:
    """State in a JSON file shared by every process that points at it.

    Every read-modify-write holds `<file>.lock` (a `filelock.FileLock`,
    waited for at most `lock_timeout` seconds), so counters from several
    processes add up. Writes are atomic and the file is mode 0600. A file that
    is not searchfuse state (a keys file, a directory, anything else) is a
    [`ConfigError`][searchfuse.errors.ConfigError], and is never moved or rewritten.
    """

    def __init__(self, path: str | os.PathLike[str], *, lock_timeout: float = LOCK_TIMEOUT) -> None:
        self.path = Path(path)
        self.lock_timeout = lock_timeout
        self._lock: Any = _process_lock(Path(str(self.path) + ".lock"), lock_timeout)
        self._thread_lock = threading.RLock()
        self._cache_raw: dict[str, Any] = {}
        #: The bytes last read or written and what they parse to: a search reads
        #: the file three times, and parses it only when another process wrote.
        self._parsed: tuple[bytes, State, dict[str, Any]] | None = None
        if self.path.is_dir():
            raise not_state(self.path, "it is a directory")
        self._load(0.0, check_only=True)
        # Temp files of a write that a killed process never finished.
        clean_stale_temps(self.path, time.time())

    def __repr__(self) -> str:
        return f"JsonFileStore({self.path.name!r})"

    def _bytes(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise not_state(self.path, "it is a directory") from None
        except OSError as exc:
            raise StoreUnavailable(
                self.path.name, f"cannot be read ({exc.strerror})", "check its permissions"
            ) from None

    def _decode(self, raw: bytes) -> dict[str, Any]:
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise not_state(self.path, "it is not JSON") from None
        if not looks_like_state(data):
            raise not_state(self.path, "it holds other JSON, perhaps a keys file")
        return data  # type: ignore[no-any-return]

    def _raw(self) -> dict[str, Any] | None:
        raw = self._bytes()
        return None if raw is None else self._decode(raw)

    def _parse(self, rings: bool = True) -> tuple[bytes, State] | None:
        """The file's bytes and its state (a private copy), parsed only when they changed."""
        raw = self._bytes()
        if raw is None:
            return None
        parsed = self._parsed
        if parsed is None or parsed[0] != raw:
            data = self._decode(raw)
            cache = data.get("cache")
            parsed = (raw, state_from_json(data), cache if isinstance(cache, dict) else {})
            self._parsed = parsed
        self._cache_raw = parsed[2]
        return raw, _copy(parsed[1], rings)

    def _load(self, now: float, check_only: bool = False, rings: bool = True) -> State:
        return self._load_raw(now, check_only, rings)[1]

    def _load_raw(
        self, now: float, check_only: bool = False, rings: bool = True
    ) -> tuple[bytes | None, State]:
        found = self._parse(rings)
        if found is None:
            return None, State(month=month_of(now))
        raw, state = found
        month = None if check_only else rollover(state.month, now)
        if month is None:
            return raw, state
        # A new month resets usage; running cooldowns, the hold, pacing logs and
        # the shared cache live on.
        return raw, rolled(state, month, now)

    def _save(self, state: State, cache: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = state_to_json(state)
        if cache:
            data["cache"] = cache
        raw = _dumps(data).encode("utf-8")
        # State is a cache: atomic, but no fsync on every search.
        atomic_write(self.path, raw, durable=False)
        self._parsed = (raw, _copy(state), cache)

    def _locked(self) -> Any:
        class _Guard:
            def __enter__(inner) -> None:
                self._thread_lock.acquire()
                try:
                    taken = self._lock.acquire()
                except OSError as exc:
                    self._thread_lock.release()
                    raise StoreUnavailable(
                        self.path.name,
                        f"its lock file cannot be opened ({exc.strerror})",
                        "check the permissions of its folder",
                    ) from None
                if not taken:
                    self._thread_lock.release()
                    raise StoreUnavailable(
                        self.path.name,
                        f"another process held its lock for more than {self.lock_timeout:g} s",
                        "check for a stuck searchfuse process, or use the SQLite store",
                    ) from None

            def __exit__(inner, *exc: object) -> None:
                self._lock.release()
                self._thread_lock.release()

        return _Guard()

    def read(self, now: float) -> State:
        # Writers replace the file atomically: a reader sees a whole file without the lock.
        return self._load(now)

    def update(self, now: float, change: Callable[[State], T]) -> T:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            state = self._load(now)
            tx = TxState.over(state)
            result = change(tx)
            if tx.changed():
                state.hold_until, state.hold_key = tx.hold_until, tx.hold_key
                self._save(state, self._cache_raw)
            return result

    def changes(self, now: float, since: Any) -> Changes:
        # The token is the file's content: equal bytes, equal state (a timestamp
        # or an inode can repeat; a few kilobytes compare in microseconds).
        token, state = self._load_raw(now, rings=False)
        if token is not None and token == since:
            return Changes(token, False, state.month, state.hold_until, state.hold_key)
        return Changes(
            token, True, state.month, state.hold_until, state.hold_key, state.keys, state.accounts
        )

    def clear(self, now: float) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            rings = self._load(now).rings
            self._save(State(month=month_of(now), rings=rings), self._cache_raw)

    # -- the shared cache, in the same file ------------------------------------------------

    def cache_get(self, key: str, now: float) -> str | None:
        self._load(now)
        entry = self._cache_raw.get(key)
        if not isinstance(entry, list) or len(entry) != 2:
            return None
        value, expires = entry
        if not isinstance(value, str) or not isinstance(expires, int | float) or expires <= now:
            return None
        return value

    def _edit_cache(self, edit: Callable[[dict[str, Any]], None]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            data = self._raw()
            state = state_from_json(data) if data is not None else State(month="")
            raw = data.get("cache") if data is not None else None
            cache: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
            edit(cache)
            self._save(state, cache)

    def cache_set(self, key: str, value: str, expires_at: float, maxsize: int) -> None:
        def edit(cache: dict[str, Any]) -> None:
            cache.pop(key, None)
            while cache and len(cache) >= maxsize:
                oldest = min(cache, key=lambda k: cache[k][1] if isinstance(cache[k], list) else 0)
                del cache[oldest]
            cache[key] = [value, expires_at]

        self._edit_cache(edit)

    def cache_delete(self, key: str) -> None:
        self._edit_cache(lambda cache: cache.pop(key, None) and None)

    def cache_keys(self, now: float) -> list[str]:
        self._load(now)
        return [
            k
            for k, v in self._cache_raw.items()
            if isinstance(v, list) and len(v) == 2 and isinstance(v[1], int | float) and v[1] > now
        ]

    def close(self) -> None:
        with self._thread_lock:
            close = getattr(self._lock, "close", None)
            if close is not None:
                close()
