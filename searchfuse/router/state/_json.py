"""State in one JSON file (`state/quota.json`), shared by processes through a file lock.

Kept for paths ending in `.json`. Every update rewrites the whole file, so
it suits a handful of keys and processes; the SQLite store is the default.

Where `flock` exists, an update writes the file in place with one `pwrite`
under the exclusive lock and readers hold the shared lock, so nobody sees a
half-written file. A temp file and a rename (about 0.45 ms on a local disk,
most of the store's cost per search) are left to the write that creates
the file, and to platforms without `flock`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import operator
import os
import stat
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from searchfuse._files import PRIVATE, atomic_write, clean_stale_temps
from searchfuse.errors import StoreUnavailable
from searchfuse.router.state._base import Changes, Store, TxState, logged
from searchfuse.router.state._budgets import Tally, live_tallies
from searchfuse.router.state._codec import looks_like_state, state_from_json, state_to_json
from searchfuse.router.state._events import Event, event_from_fields, newest
from searchfuse.router.state._month import month_of, rolled, rollover
from searchfuse.router.state._paths import check_path, ensure_parent, not_state
from searchfuse.router.state._records import State, copied
from searchfuse.router.state._repair import damage_of_json, json_or_none, move_aside
from searchfuse.router.state._ring import Ring
from searchfuse.router.state._skill import SKILL_FORMAT, KeySlot, by_position, is_positional

__all__ = ["JsonFileStore"]

log = logging.getLogger("searchfuse.state")
T = TypeVar("T")

#: Default bound on waiting for another process's lock.
LOCK_TIMEOUT = 5.0


class _FlockLock:
    """`<file>.lock` held with `flock`, for the JSON store's transactions (POSIX).

    Writers hold it exclusively, readers shared. The lock file also keeps the
    journal of the last in-place write (see `JsonFileStore`).

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
        self._shared = False

    def _open(self, create: bool = True) -> int:
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        if self._fd is not None:
            # Inherited through a fork: it shares the parent's lock, so this
            # process needs its own open file.
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
            self._depth = 0
        fd = os.open(self.path, os.O_RDWR | (os.O_CREAT if create else 0), PRIVATE)
        # It keeps a copy of the state (the journal): as private as the state,
        # also when an older version made it with another mode.
        with contextlib.suppress(OSError):
            if stat.S_IMODE(os.fstat(fd).st_mode) != PRIVATE:
                os.fchmod(fd, PRIVATE)
        self._fd = fd
        self._pid = os.getpid()
        self._depth = 0
        return self._fd

    def acquire(self, shared: bool = False) -> bool:
        """Take the lock, exclusive or `shared` (readers), within `timeout`.

        Taken again by the holder (a read inside a transaction), it only
        counts; a shared holder never asks for the exclusive lock.
        """
        import fcntl

        # A reader never makes the lock file: no writer has been there without one.
        fd = self._open(create=not shared)
        if self._depth:
            if not shared and self._shared:
                raise RuntimeError("the exclusive lock was asked for while a shared one was held")
            self._depth += 1
            return True
        deadline = time.monotonic() + self.timeout
        pause = 0.0005
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.005)
                continue
            self._depth = 1
            self._shared = shared
            return True

    def release(self) -> None:
        import fcntl

        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def write_journal(self, ident: tuple[int, int], data: bytes) -> int:
        """Keep `data`, about to be written in place over file `ident` (device,
        inode), in the lock file, marked as being written (the exclusive lock is
        held). Returns the offset of the mark, for `journal_done`."""
        assert self._fd is not None and self._depth and not self._shared
        header = _JOURNAL % (*ident, len(data), zlib.crc32(data))
        _pwrite_all(self._fd, header + data)
        return len(header) - len(_JOURNAL_MARK)

    def journal_done(self, mark: int) -> None:
        """The write the journal holds is in the file."""
        assert self._fd is not None
        os.pwrite(self._fd, b"d", mark)

    def journal_cut(self, mark: int, written: int) -> None:
        """The write failed after its first `written` bytes reached the file."""
        assert self._fd is not None
        os.pwrite(self._fd, b"f %010d" % written, mark)

    def pending(self, ident: tuple[int, int]) -> tuple[bytes, int | None] | None:
        """An in-place write into file `ident` that never finished: its bytes, if
        the lock file holds them whole, and how many reached the file (None: not
        known, its process was killed). The lock is held."""
        if self._fd is None or not self._depth or self._pid != os.getpid():
            return None
        line, newline, _ = os.pread(self._fd, 128, 0).partition(b"\n")
        if not newline or line[-12:-11] not in (b"w", b"f"):
            return None  # the usual case: the last write finished
        parts = line.split(b" ")
        if len(parts) != 7 or parts[0] != _JOURNAL.split(b" ")[0]:
            return None
        try:
            dev, ino, size, crc = int(parts[1]), int(parts[2]), int(parts[3]), int(parts[4], 16)
            written = int(parts[6])
        except ValueError:
            return None
        if (dev, ino) != ident:
            return None
        data = os.pread(self._fd, size, len(line) + 1)
        if len(data) != size or zlib.crc32(data) != crc:
            return None
        return data, (written if parts[5] == b"f" else None)

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


def _copy(state: State) -> State:
    """A copy of `state` whose records a transaction may change freely."""
    return State(
        month=state.month,
        keys={fp: copied(ks) for fp, ks in state.keys.items()},
        accounts={name: copied(acc) for name, acc in state.accounts.items()},
        hold_until=state.hold_until,
        hold_key=state.hold_key,
        rings={name: r.copy() for name, r in state.rings.items()},
        tallies=dict(state.tallies),
        # Never changed in place (a new event makes a new list): shared.
        events=state.events,
    )


#: One encoder for every entry (`json.dumps(..., sort_keys=True)` makes a new one per call).
_encode = json.JSONEncoder(sort_keys=True).encode
#: A string as JSON (what `json.dumps` uses for one).
_quote = json.encoder.encode_basestring_ascii


class _Encoded(str):
    """A value already written as JSON."""


def _encode_value(value: Any) -> str:
    """`value` as JSON, as `json.dumps(value, sort_keys=True)` writes it; a
    string, a number or null without a trip through the encoder."""
    kind = type(value)
    if kind is _Encoded:
        return str(value)
    if kind is str:
        return _quote(value)
    if value is None:
        return "null"
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    return _encode(value)


def _encode_entry(value: Any) -> str:
    """One entry of a section as JSON; a pacing log's times (base64, which needs
    no escaping) are put in as they are, not scanned by the encoder."""
    if type(value) is dict and len(value) == 3:
        size, seq, times = value.get("size"), value.get("seq"), value.get("times")
        if (
            type(size) is int
            and type(seq) is int
            and type(times) is str
            and times.isascii()
            and '"' not in times
            and "\\" not in times
        ):
            return f'{{"seq": {seq}, "size": {size}, "times": "{times}"}}'
    return _encode(value)


def _line(name: str, value: Any) -> str:
    """One entry of a section, as a line of the file."""
    return f"  {_quote(str(name))}: {_encode_entry(value)}"


def _dumps(data: dict[str, Any], lines_of: dict[str, dict[str, str]] | None = None) -> str:
    """`data` as text with one line per key, account, pacing log and cache entry.

    As readable as an indented dump, but every line is written by the C
    encoder (`indent=` makes `json` fall back to pure Python, which costs
    milliseconds per search once pacing logs hold a few thousand times).
    `lines_of` holds the lines of some sections, already made.
    """
    out = []
    for name, value in sorted(data.items()):
        lines = lines_of.get(name) if lines_of else None
        if lines is None and isinstance(value, dict) and value:
            lines = {str(k): _line(k, v) for k, v in value.items()}
        if lines:
            inner = ",\n".join(lines[k] for k in sorted(lines))
            out.append(f" {_quote(name)}: {{\n{inner}\n }}")
        else:
            out.append(f" {_quote(name)}: {_encode_value(value)}")
    return "{\n" + ",\n".join(out) + "\n}\n"


def _same_ring(a: Ring, b: Ring) -> bool:
    return a.size == b.size and a.seq == b.seq and a.slots == b.slots


#: The sections whose entries `JsonFileStore` remembers as lines, and how it
#: tells that a record is unchanged.
_SECTIONS: tuple[tuple[str, Callable[[Any, Any], bool]], ...] = (
    ("keys", operator.eq),
    ("accounts", operator.eq),
    ("rings", _same_ring),
    ("tallies", operator.eq),
)


#: Trailing spaces an in-place write leaves before it truncates the file.
MAX_PADDING = 4096
#: The journal's header in the lock file: magic, the state file's device and
#: inode, length and CRC-32 of the bytes, then `w` while they are being written
#: to the state file, `d` once they are, `f` and how many bytes reached the
#: file when the write failed.
_JOURNAL_MARK = b"w 0000000000\n"
_JOURNAL = b"searchfuse-journal-2 %d %d %d %08x " + _JOURNAL_MARK


def _read_all(fd: int, size: int = 0) -> bytes:
    """Everything in regular file `fd`, just opened (`size`: its expected size)."""
    want = size + 4096
    chunk = os.read(fd, want)
    if len(chunk) < want:  # a regular file reads short only at its end
        return chunk
    chunks = [chunk]
    while chunk:
        chunk = os.read(fd, 1 << 16)
        chunks.append(chunk)
    return b"".join(chunks)


class _WriteCut(OSError):
    """A write that failed after `written` of its bytes reached the file."""

    def __init__(self, written: int, total: int, cause: str) -> None:
        super().__init__(errno.EIO, f"wrote {written} of {total} bytes ({cause})")
        self.written = written


def _pwrite_all(fd: int, data: bytes) -> None:
    """`data` at offset 0 of `fd`: one `pwrite`, continued if the system wrote
    less; `_WriteCut` if it stops making progress or fails part-way."""
    done = 0
    try:
        done = os.pwrite(fd, data, 0)
        while done < len(data):
            more = os.pwrite(fd, data[done:], done)
            if more <= 0:
                raise _WriteCut(done, len(data), "no progress")
            done += more
    except _WriteCut:
        raise
    except OSError as exc:
        if not done:
            raise
        raise _WriteCut(done, len(data), exc.strerror or str(exc)) from None


def _unfinished(raw: bytes, pending: tuple[bytes, int | None] | None) -> bytes | None:
    """The bytes of the unfinished write `pending` (see `_FlockLock.pending`) if
    file content `raw` begins with what that write put there: the bytes it
    reported, or after a kill the first page (the kernel stops a write between
    pages). None: the file is read as it is."""
    if pending is None:
        return None
    data, written = pending
    if written is None:
        return data if raw[:4096] == data[:4096] else None
    return data if written > 0 and raw[:written] == data[:written] else None


class _Held:
    """A `JsonFileStore`'s thread lock and process lock, for one `with` block."""

    __slots__ = ("held", "shared", "store")

    def __init__(self, store: JsonFileStore, shared: bool) -> None:
        self.store = store
        self.shared = shared
        self.held = False

    def __enter__(self) -> None:
        store = self.store
        store._thread_lock.acquire()
        try:
            taken = store._lock.acquire(True) if self.shared else store._lock.acquire()
        except OSError as exc:
            if self.shared:
                # No lock file (no write since the file was made, or a file that
                # is not state), or one this user cannot open: no process of
                # this user writes there in place (it would need the lock), and
                # other users cannot read a 0600 file.
                return
            store._thread_lock.release()
            raise StoreUnavailable(
                store.path.name,
                f"its lock file cannot be opened ({exc.strerror})",
                "check the permissions of its folder",
            ) from None
        if not taken:
            store._thread_lock.release()
            raise StoreUnavailable(
                store.path.name,
                f"another process held its lock for more than {store.lock_timeout:g} s",
                "check for a stuck searchfuse process, or use the SQLite store",
            ) from None
        self.held = True

    def __exit__(self, *exc: object) -> None:
        if self.held:
            self.store._lock.release()
        self.store._thread_lock.release()


class JsonFileStore(Store):
    """State in a JSON file shared by every process that points at it.

    Every read-modify-write holds `<file>.lock` exclusively (waited for at
    most `lock_timeout` seconds), so counters from several processes add up.
    Where `flock` exists (POSIX), a write is one `pwrite` over the file in
    place, padded with spaces to the old length when the state got shorter
    (JSON allows trailing whitespace), so a process killed right after the
    write leaves a whole file; readers hold the lock shared, so they never see
    a write in progress. The bytes of each in-place write are first kept in
    the lock file (mode 0600) with their length, CRC and a mark cleared once
    the file holds them, so a write cut short (its process killed, which may
    stop the kernel between pages, or the disk failing part-way, which the
    caller is told) is read from there and completed by the next write. The
    write that creates the file, a file with another mode or other links, and
    every write where `flock` does not exist, is a temp file and a rename.
    The file is mode 0600; state is a cache, so nothing is fsynced. A file
    that is not searchfuse state (a keys file, a directory, a FIFO,
    anything else) is a [`ConfigError`][searchfuse.errors.ConfigError], and is
    never moved or rewritten.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lock_timeout: float = LOCK_TIMEOUT,
        key_order: Sequence[KeySlot] | None = None,
    ) -> None:
        self.path = Path(path)
        self.lock_timeout = lock_timeout
        #: The configured keys in order: what the original skill's records by position are.
        self._key_order = None if key_order is None else tuple(key_order)
        check_path(self.path)
        self._lock: Any = _process_lock(Path(str(self.path) + ".lock"), lock_timeout)
        #: Writes in place, readers take the shared lock (False: temp file and rename).
        self._in_place = isinstance(self._lock, _FlockLock)
        self._thread_lock = threading.RLock()
        self._cache_raw: dict[str, Any] = {}
        #: The bytes last read or written (trailing whitespace stripped) and what
        #: they parse to: a search reads the file three times, and parses it only
        #: when another process wrote.
        self._parsed: tuple[bytes, State, dict[str, Any]] | None = None
        #: The token and state `changes` last answered with (never changed in
        #: place), so the next answer names only the records that differ.
        self._handed: tuple[bytes, State] | None = None
        #: `(st_dev, st_ino)` of the file last read: a transaction writes in place
        #: only into the file it read.
        self._read_ident: tuple[int, int] | None = None
        self._told_torn = False
        self._told_damaged = False
        self._told_skill = False
        #: Per section, per name: the record last saved and its line in the file.
        self._lines: dict[str, dict[str, tuple[Any, str]]] = {}
        #: The event log last saved and its JSON text.
        self._events_text: tuple[list[dict[str, Any]] | None, str] = (None, "")
        if self.path.is_dir():
            raise not_state(self.path, "it is a directory")
        self._load(0.0, check_only=True)
        # Temp files of a write that a killed process never finished.
        clean_stale_temps(self.path, time.time())

    def __repr__(self) -> str:
        return f"JsonFileStore({self.path.name!r})"

    def _unreadable(self, exc: OSError) -> StoreUnavailable:
        return StoreUnavailable(
            self.path.name, f"cannot be read ({exc.strerror})", "check its permissions"
        )

    def _bytes(self) -> bytes | None:
        """The file's content, trailing whitespace stripped; None if there is no file.

        With in-place writes, read under the shared lock.
        """
        try:
            # O_NONBLOCK: opening a FIFO for reading does not wait for a writer.
            flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            self._read_ident = None
            return None
        except IsADirectoryError:
            raise not_state(self.path, "it is a directory") from None
        except OSError as exc:
            raise self._unreadable(exc) from None
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise not_state(self.path, "it is a directory")
            if not stat.S_ISREG(info.st_mode):
                raise not_state(self.path, "it is not a regular file")
            ident = (info.st_dev, info.st_ino)
            if self._in_place:
                with self._locked(shared=True):
                    raw = _read_all(fd, info.st_size)
                    pending = self._lock.pending(ident)
                data = _unfinished(raw, pending)
                if data is not None:
                    if raw != data and not self._told_torn:
                        self._told_torn = True
                        log.warning(
                            "%s: a write to it did not finish (its process was killed, or "
                            "the disk failed); read from the copy it kept, the next write "
                            "completes it",
                            self.path.name,
                        )
                    raw = data
            else:
                raw = _read_all(fd, info.st_size)
        except OSError as exc:
            raise self._unreadable(exc) from None
        finally:
            os.close(fd)
        self._read_ident = ident
        return raw.rstrip()

    def _decode(self, raw: bytes, again: bool = True) -> dict[str, Any]:
        parsed, data = json_or_none(raw)
        if parsed and looks_like_state(data):
            return data  # type: ignore[no-any-return]
        if parsed and is_positional(data):
            mapped, how = by_position(data, self._key_order)
            if mapped is None:
                return self._repair(raw, how, again, damaged=False)
            if looks_like_state(mapped):
                if not self._told_skill:
                    self._told_skill = True
                    log.info("%s: %s; taken over (%s)", self.path.name, SKILL_FORMAT, how)
                return mapped  # type: ignore[no-any-return]
        why = damage_of_json(raw, data, parsed)
        if why is None:
            raise not_state(
                self.path,
                "it holds other JSON, perhaps a keys file" if parsed else "it is not JSON",
            )
        return self._repair(raw, why, again)

    def _repair(self, raw: bytes, why: str, again: bool, damaged: bool = True) -> dict[str, Any]:
        """Set aside a damaged file of ours (under the exclusive lock, if it still
        holds `raw`) and go on from empty state."""
        empty: dict[str, Any] = {"month": ""}
        try:
            with self._locked():
                now = self._bytes()
                if now is not None and now != raw and again:
                    return self._decode(now, again=False)  # replaced meanwhile
                if now is not None:
                    move_aside(self.path, why, damaged=damaged)
        except (OSError, StoreUnavailable) as exc:
            # A folder this user cannot write (a read-only status): the file
            # stays, and this process reads it as empty state.
            if self._told_damaged:
                return empty
            self._told_damaged = True
            log.warning(
                "%s is searchfuse state but damaged (%s); it could not be moved aside (%s), "
                "so it is read as empty state",
                self.path.name,
                why,
                getattr(exc, "strerror", None) or exc,
            )
        self._read_ident = None
        return empty

    def _raw(self) -> dict[str, Any] | None:
        raw = self._bytes()
        return None if raw is None else self._decode(raw)

    def _current(self) -> tuple[bytes, State] | None:
        """The file's bytes and its state, parsed only when they changed.

        The state is shared: callers copy what they hand out or change.
        """
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
        return raw, parsed[1]

    def _parse(self) -> tuple[bytes, State] | None:
        """The file's bytes and a private copy of its state."""
        found = self._current()
        return None if found is None else (found[0], _copy(found[1]))

    def _load(self, now: float, check_only: bool = False) -> State:
        found = self._parse()
        if found is None:
            return State(month=month_of(now))
        state = found[1]
        month = None if check_only else rollover(state.month, now)
        if month is None:
            return state
        # A new month resets usage; running cooldowns, the hold, pacing logs and
        # the shared cache live on.
        return rolled(state, month, now)

    def _mkdir(self) -> None:
        """Check the file's folder (made only if it is the user's state directory),
        unless the file was there at the last read."""
        if self._read_ident is None:
            ensure_parent(self.path)

    def _save(self, state: State, cache: dict[str, Any]) -> None:
        snapshot = _copy(state)
        raw = self._encode_state(snapshot, cache)
        if not (self._in_place and self._write_in_place(raw)):
            ensure_parent(self.path)
            # State is a cache: atomic, but no fsync on every search.
            atomic_write(self.path, raw, durable=False)
        self._parsed = (raw.rstrip(), snapshot, cache)

    def _encode_state(self, state: State, cache: dict[str, Any]) -> bytes:
        """The file's text for `state` (never changed after), made again only
        for the keys, accounts and pacing logs that changed since the last save:
        a search changes one key of many, and packing a pacing log is most of
        the cost of the text."""
        changed = State(month=state.month, hold_until=state.hold_until, hold_key=state.hold_key)
        for section, same in _SECTIONS:
            before = self._lines.get(section, {})
            target = getattr(changed, section)
            for name, record in getattr(state, section).items():
                hit = before.get(name)
                if hit is None or not same(hit[0], record):
                    target[name] = record
        data = state_to_json(changed)
        if cache:
            data["cache"] = cache
        if state.events:
            # Written again only when an event came (the log is a new list then).
            if self._events_text[0] is not state.events:
                self._events_text = (state.events, _Encoded(_encode(state.events)))
            data["events"] = self._events_text[1]
        lines_of: dict[str, dict[str, str]] = {}
        remembered: dict[str, dict[str, tuple[Any, str]]] = {}
        for section, _ in _SECTIONS:
            before = self._lines.get(section, {})
            made, fresh = data[section], getattr(changed, section)
            lines, kept = {}, {}
            for name, record in getattr(state, section).items():
                line = _line(name, made[name]) if name in fresh else before[name][1]
                lines[str(name)] = line
                kept[name] = (record, line)
            lines_of[section], remembered[section] = lines, kept
        self._lines = remembered
        return _dumps(data, lines_of).encode("utf-8")

    def _write_in_place(self, raw: bytes) -> bool:
        """Write `raw` over the file this transaction read, under the exclusive lock.

        False when the write must be a temp file and a rename, as it always
        was: no file yet, a symbolic link, a file with other links or another
        mode, or a file that is not the one this transaction read (replaced
        by rename since). Whatever is there then must be searchfuse state.
        """
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return False
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symbolic link
                return False
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise not_state(self.path, "it is not a regular file")
            if (
                (info.st_dev, info.st_ino) != self._read_ident
                or info.st_nlink != 1
                or stat.S_IMODE(info.st_mode) != PRIVATE
            ):
                # Replaced since it was read, or not the private file searchfuse
                # makes: it is replaced only if it holds state.
                self._decode(_read_all(fd).rstrip())
                return False
            data = raw + b" " * (info.st_size - len(raw))
            mark = self._lock.write_journal((info.st_dev, info.st_ino), data)
            try:
                _pwrite_all(fd, data)
            except _WriteCut as cut:
                # Readers complete it from the journal; the caller is told.
                self._lock.journal_cut(mark, cut.written)
                raise
            if len(data) - len(raw) > MAX_PADDING:
                # A kill before this leaves the padded file, which is as valid.
                os.ftruncate(fd, len(raw))
            self._lock.journal_done(mark)
            return True
        finally:
            os.close(fd)

    def _locked(self, shared: bool = False) -> _Held:
        return _Held(self, shared)

    def read(self, now: float) -> State:
        # With in-place writes the read holds the shared lock (see `_bytes`);
        # without, writers replace the file atomically.
        return self._load(now)

    def update(self, now: float, change: Callable[[State], T]) -> T:
        self._mkdir()
        with self._locked():
            state = self._load(now)
            tx = TxState.over(state)
            result = change(tx)
            if tx.changed():
                state.hold_until, state.hold_key = tx.hold_until, tx.hold_key
                made = tx.made_events(now)
                if made:
                    state.events = logged(state.events, made)
                self._save(state, self._cache_raw)
            return result

    def changes(self, now: float, since: Any) -> Changes:
        # The token is the file's content: equal bytes, equal state (a timestamp
        # or an inode can repeat; a few kilobytes compare in microseconds).
        found = self._current()
        if found is None:
            return Changes(None, True, month_of(now))
        token, state = found
        month = rollover(state.month, now)
        if month is not None:
            # A new month resets usage; `rolled` makes new records.
            new = rolled(state, month, now)
            return Changes(token, True, month, new.hold_until, new.hold_key, new.keys)
        if token == since:
            return Changes(token, False, state.month, state.hold_until, state.hold_key)
        before = self._handed
        self._handed = (token, state)
        if before is not None and before[0] == since and before[1].month == state.month:
            # Only the records that differ from the state this reader last got.
            old = before[1]
            kept = old.keys.keys() <= state.keys.keys()
            if kept and old.accounts.keys() <= state.accounts.keys():
                return Changes(
                    token,
                    False,
                    state.month,
                    state.hold_until,
                    state.hold_key,
                    {fp: copied(ks) for fp, ks in state.keys.items() if old.keys.get(fp) != ks},
                    {
                        n: copied(acc)
                        for n, acc in state.accounts.items()
                        if old.accounts.get(n) != acc
                    },
                )
        return Changes(
            token,
            True,
            state.month,
            state.hold_until,
            state.hold_key,
            {fp: copied(ks) for fp, ks in state.keys.items()},
            {n: copied(acc) for n, acc in state.accounts.items()},
        )

    def clear(self, now: float) -> None:
        self._mkdir()
        with self._locked():
            old = self._load(now)
            # Budgets count money spent, which forgetting key state does not give back.
            fresh = State(
                month=month_of(now), rings=old.rings, tallies=old.tallies, events=old.events
            )
            self._save(fresh, self._cache_raw)

    def tallies(self, now: float, prefix: str = "") -> dict[str, Tally]:
        found = self._current()  # tallies carry their own period: no month to roll
        return {} if found is None else live_tallies(found[1].tallies, now, prefix)

    def events(self, limit: int = 50) -> list[Event]:
        found = self._current()
        stored = found[1].events[-limit:] if found is not None and limit > 0 else []
        return newest((e for raw in stored if (e := event_from_fields(raw))), limit)

    def pacing_log(self, name: str) -> list[float] | None:
        found = self._current()
        ring = found[1].rings.get(name) if found is not None else None
        return [] if ring is None else ring.ordered()

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
        self._mkdir()
        with self._locked():
            data = self._raw()
            state = state_from_json(data) if data is not None else State(month="")
            raw = data.get("cache") if data is not None else None
            cache: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
            edit(cache)
            self._save(state, cache)

    def cache_set(
        self, key: str, value: str, expires_at: float, maxsize: int, *, now: float | None = None
    ) -> None:
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
