"""State in one JSON file (`state/quota.json`), shared by processes through a file lock.

Kept for paths ending in `.json`, for people who read the state by hand. Every
update rewrites the whole file, so it suits a handful of keys and processes;
the SQLite store is the default.

Every write is a temp file in the same folder that takes the state file's
place atomically (on Linux the two names are swapped, and the old file is
kept to take the next version once nobody has it open: see `_rewrite`; no
fsync: state is a cache), so anyone reading the file, with or without the
lock (`cat`, a script), sees one whole version of it, never a write in
progress. Writers hold `<file>.lock` for their read-modify-write. The shared
cache's claims (one process searches, the others wait for its entry) are in
`<file>.claims`, under the same lock (see `_json_claims`).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from searchfuse._files import Replaced, clean_stale_temps
from searchfuse._rewrite import Rewriter
from searchfuse.errors import StoreUnavailable
from searchfuse.router.state._base import Changes, Store, TxState, logged
from searchfuse.router.state._budgets import Tally, live_tallies
from searchfuse.router.state._codec import looks_like_state, names_raw_keys, state_from_json
from searchfuse.router.state._events import Event, event_from_fields, newest
from searchfuse.router.state._json_cache import JsonCache
from searchfuse.router.state._json_claims import Claims
from searchfuse.router.state._json_lock import Locked, process_lock
from searchfuse.router.state._json_text import StateText, copy_state, read_all
from searchfuse.router.state._month import Months, month_of, rolled
from searchfuse.router.state._paths import check_path, ensure_parent, not_state
from searchfuse.router.state._records import State, copied
from searchfuse.router.state._repair import damage_of_json, json_or_none, move_aside
from searchfuse.router.state._skill import SKILL_FORMAT, KeySlot, by_position, is_positional

__all__ = ["JsonFileStore"]

log = logging.getLogger("searchfuse.state")
T = TypeVar("T")

#: Default bound on waiting for another process's lock.
LOCK_TIMEOUT = 5.0


def _ident(info: os.stat_result) -> tuple[int, ...]:
    """Which file `info` is: inode, size and time (an inode number may be reused)."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


class JsonFileStore(JsonCache, Store):
    """State in a JSON file shared by every process that points at it.

    Every read-modify-write holds `<file>.lock` exclusively (waited for at
    most `lock_timeout` seconds), so counters from several processes add up.
    A write is a temp file that takes the file's place atomically, so a
    reader (with or without the lock) and a process killed mid-write always
    leave one whole version of the file. The file is mode 0600; state is a
    cache, so nothing is fsynced. A file that is not searchfuse state (a keys
    file, a directory, a FIFO, anything else) is a
    [`ConfigError`][searchfuse.errors.ConfigError], and is never moved or replaced.
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
        self._months = Months()
        #: The configured keys in order: what the original skill's records by position are.
        self._key_order = None if key_order is None else tuple(key_order)
        check_path(self.path)
        self._lock: Any = process_lock(Path(str(self.path) + ".lock"), lock_timeout)
        self._thread_lock = threading.RLock()
        self._cache_raw: dict[str, Any] = {}
        #: The bytes last read or written (trailing whitespace stripped) and what
        #: they parse to: the file is parsed again only when another process wrote.
        self._parsed: tuple[bytes, State, dict[str, Any]] | None = None
        #: `_parsed` as this store's last save made it: while `_parsed` is this
        #: object, the file holds what this store wrote last (see `_update_fresh`).
        self._saved: tuple[bytes, State, dict[str, Any]] | None = None
        #: The token and state `changes` last answered with (never changed in
        #: place), so the next answer names only the records that differ.
        self._handed: tuple[bytes, State] | None = None
        #: `_ident` of the file last read: a write replaces only the file it
        #: read, or a file that holds state.
        self._read_ident: tuple[int, ...] | None = None
        self._told_damaged = False
        self._told_skill = False
        #: Set when the file read names keys raw (the skill's records, a hand-made file).
        self._holds_keys = False
        self._text = StateText()
        #: Writes the file (keeping the file it replaced, to write the next version in).
        self._rewriter = Rewriter(self.path)
        #: Claims on shared-cache entries (`<file>.claims`, under the same lock).
        self._claims = Claims(self.path)
        if self.path.is_dir():
            raise not_state(self.path, "it is a directory")
        self._load(0.0, check_only=True)
        if self._holds_keys:
            self._scrub()
        # Temp files of a write that a killed process never finished.
        clean_stale_temps(self.path, time.time())

    def __repr__(self) -> str:
        return f"JsonFileStore({self.path.name!r})"

    def _unreadable(self, exc: OSError) -> StoreUnavailable:
        return StoreUnavailable(
            self.path.name, f"cannot be read ({exc.strerror})", "check its permissions"
        )

    def _bytes(self) -> bytes | None:
        """The file's content, trailing whitespace stripped; None if there is no file."""
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
            raw = read_all(fd, info.st_size)
        except OSError as exc:
            raise self._unreadable(exc) from None
        finally:
            os.close(fd)
        self._read_ident = _ident(info)
        return raw.rstrip()

    def _decode(self, raw: bytes, again: bool = True) -> dict[str, Any]:
        parsed, data = json_or_none(raw)
        if parsed and looks_like_state(data):
            self._holds_keys = self._holds_keys or names_raw_keys(data)
            return data  # type: ignore[no-any-return]
        if parsed and is_positional(data):
            mapped, how = by_position(data, self._key_order)
            if mapped is None:
                return self._repair(raw, how, again, damaged=False)
            if looks_like_state(mapped):
                self._holds_keys = True  # its records may carry their raw keys
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

    def _scrub(self) -> None:
        """Rewrite a file that names keys raw in searchfuse's form (by fingerprint)
        now: a raw key must not wait on disk for the first search that changes
        something (with every key disabled, none ever does). Nothing is lost: each
        record still applies to its key, and no copy keeps the raw keys."""
        try:
            with self._locked():
                raw = self._bytes()
                self._holds_keys = False
                data = None if raw is None else self._decode(raw)
                if data is None or not self._holds_keys:
                    return  # gone, or replaced meanwhile by state of ours
                cache = data.get("cache")
                self._save(state_from_json(data), cache if isinstance(cache, dict) else {})
        except (OSError, StoreUnavailable):
            return  # a folder this user cannot write: the file stays as it is
        self._holds_keys = False
        log.info("%s named keys by their raw text: rewritten by fingerprint", self.path.name)

    def _raw(self) -> dict[str, Any] | None:
        raw = self._bytes()
        return None if raw is None else self._decode(raw)

    def _current(self) -> tuple[bytes, State] | None:
        """The file's bytes and its state, parsed only when they changed.

        The state is shared: callers copy what they hand out or change.
        """
        raw = self._bytes()
        if raw is None:
            self._parsed = None  # gone: not the file this store wrote last
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
        return None if found is None else (found[0], copy_state(found[1]))

    def _load(self, now: float, check_only: bool = False) -> State:
        found = self._parse()
        if found is None:
            return State(month=month_of(now))
        state = found[1]
        month = None if check_only else self._months.rollover(state.month, now)
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

    def _save(self, state: State, cache: dict[str, Any], owned: bool = False) -> None:
        """Write `state` and `cache`; remember them as the file's content. `owned`:
        nothing else refers to `state` or its records, so it is kept, not copied."""
        snapshot = state if owned else copy_state(state)
        raw = self._text.text(snapshot, cache)
        self._mkdir()
        try:
            self._write(raw)
        except Replaced:  # another file came to the path since it was checked: in turn
            self._write(raw)
        self._parsed = self._saved = (raw.rstrip(), snapshot, cache)

    def _write(self, raw: bytes) -> None:
        ident = self._check_replaced()  # State is a cache: atomic, but never fsynced.
        self._rewriter.write(raw, replaces=lambda info: _ident(info) == ident)

    def _check_replaced(self) -> tuple[int, ...] | None:
        """Whatever is at the path now, if it is not the file this transaction read,
        must be searchfuse state to be replaced (a keys file copied there is not);
        its identity (None: nothing there)."""
        try:
            there = os.lstat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._unreadable(exc) from None
        if stat.S_ISREG(there.st_mode) and _ident(there) == self._read_ident:
            return self._read_ident  # the file this transaction read: its own state
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symbolic link: replaced by a file, as always
                return _ident(there)
            raise self._unreadable(exc) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise not_state(self.path, "it is not a regular file")
            if _ident(info) != self._read_ident:
                self._decode(read_all(fd).rstrip())
            return _ident(info)
        finally:
            os.close(fd)

    def _locked(self) -> Locked:
        return Locked(self.path.name, self._thread_lock, self._lock, self.lock_timeout)

    def read(self, now: float) -> State:
        return self._load(now)

    def update(self, now: float, change: Callable[[State], T]) -> T:
        return self._transact(now, change, owned=False)[0]

    def _update_fresh(self, now: float, change: Callable[[State], T]) -> tuple[T, bool]:
        """`update`, and whether the file it read was this store's last save (a
        grant on it is `fresh`, as SQLite's is: the router's next pick of the
        same key need not read the file again). `change` (a grant's) answers with
        nothing that refers to the state: the state it changed is kept as saved."""
        return self._transact(now, change, owned=True)

    def _transact(self, now: float, change: Callable[[State], T], owned: bool) -> tuple[T, bool]:
        """One read-modify-write under the lock (`owned`: see `_save`)."""
        self._mkdir()
        with self._locked():
            state = self._load(now)
            fresh = self._saved is not None and self._parsed is self._saved
            tx = TxState.over(state)
            result = change(tx)
            if tx.changed():
                state.hold_until, state.hold_key = tx.hold_until, tx.hold_key
                made = tx.made_events(now)
                if made:
                    state.events = logged(state.events, made)
                self._save(state, self._cache_raw, owned)
            return result, fresh

    def changes(self, now: float, since: Any) -> Changes:
        # The token is the file's content: equal bytes, equal state (a timestamp
        # or an inode can repeat; a few kilobytes compare in microseconds).
        found = self._current()
        if found is None:
            return Changes(None, True, month_of(now))
        token, state = found
        month = self._months.rollover(state.month, now)
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
            # Budgets count money spent, which forgetting key state does not give back.
            fresh = rolled(self._load(now), month_of(now), now, keep=False)
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

    def close(self) -> None:
        with self._thread_lock:
            self._rewriter.close()
            close = getattr(self._lock, "close", None)
            if close is not None:
                close()
