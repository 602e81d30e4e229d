"""The SQLite store's file: opening it (ours, or a ConfigError; damaged ones set
aside), one connection per thread, transactions with bounded lock waits, the WAL
checkpoint in a thread of its own, reopening a file deleted under it, and the
rows read back as validated records."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from searchfuse._files import set_aside
from searchfuse._fork import generation
from searchfuse.errors import ConfigError, StoreUnavailable
from searchfuse.router.state._paths import check_path, not_state
from searchfuse.router.state._records import AccountUsage, KeyState, copied
from searchfuse.router.state._repair import move_aside, own_sqlite_file
from searchfuse.router.state._skill import KeySlot
from searchfuse.router.state._sqlite_rows import (
    ACCOUNT_COLS,
    CLAIMS,
    EVENTS,
    KEY_COLS,
    SCHEMA,
    SCHEMA_VERSION,
    TALLIES,
    TALLIES_EXPIRES,
    UNKNOWN,
    collect,
    ident_of,
    import_json,
    rollback,
)
from searchfuse.router.state._sqlite_wal import Checkpointer
from searchfuse.router.state._values import account_from_fields, key_from_fields

__all__ = ["CHECKPOINT_EVERY", "Database"]

log = logging.getLogger("searchfuse.state")

_MAGIC = b"SQLite format 3\x00"
#: How many parsed rows a store keeps to skip validating them again.
_MAX_RECORDS = 100_000
#: Every this many commits of one store, a thread of its own checkpoints the WAL
#: (copies it into the database), so no search waits for that copy and its fsyncs.
#: A checkpoint costs its fsyncs (about 3 ms here) whatever it copies, and a
#: search rewrites the same few pages: every 64 commits that was 45 us of CPU per
#: search, every 1,024 it is under 10 (a search writes 7 to 8 pages: the WAL then
#: holds up to about 8 MB).
CHECKPOINT_EVERY = 1024
#: SQLite's own checkpoint on commit, in pages: only a safety net for when the
#: background one falls behind (well above what `CHECKPOINT_EVERY` commits write;
#: its default, 1000 pages, runs every ~150 searches and costs a search tens of
#: milliseconds on a slow disk).
_AUTOCHECKPOINT_PAGES = 20_000
#: The page size of a new database file.
_PAGE_SIZE = 1024


#: What SQLite says about a file whose pages it cannot read.
_DAMAGE = re.compile(r"malformed|not a database|disk image|corrupt")


class _Damaged(Exception):
    """A database of ours that SQLite cannot read (`why`)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class Database:
    """An SQLite state file of searchfuse's, shared by every process on the machine
    (see `SqliteStore`)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        key_order: Sequence[KeySlot] | None = None,
    ) -> None:
        #: The configured keys in order: what the original skill's records by position are.
        self._key_order = None if key_order is None else tuple(key_order)
        self.path = Path(path)
        self.busy_timeout = float(busy_timeout)
        self._local = threading.local()
        self.records: dict[tuple[str, str], tuple[tuple[Any, ...], Any]] = {}
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._commits = 0
        self._checkpointer: Checkpointer | None = None
        #: (device, inode) of the file opened: a write checks the path still names it.
        self._ident: tuple[int, int] | None = None
        self._reopen_lock = threading.Lock()
        self._check_path()
        #: Opening: a damaged database of ours found now is set aside and made again.
        self._opening = True
        try:
            self._open()
        except _Damaged as damaged:
            # Ours, and SQLite cannot read it: state is a cache, so it is set
            # aside (with its WAL, which belongs to it) and made again.
            self._close_connections()
            if move_aside(self.path, damaged.why) is not None:
                for suffix, label in (("-wal", "corrupt"), ("-shm", "")):
                    side = Path(f"{self.path}{suffix}")
                    if label:
                        set_aside(side, time.time(), label)
                    else:
                        with contextlib.suppress(OSError):
                            side.unlink()
            self._open()

    def _open(self) -> None:
        self._created = self._create_file()
        self._ident = ident_of(self.path)
        conn = self._conn()
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if tables and "searchfuse_meta" not in tables:
                raise not_state(self.path, "it is an SQLite database of another program")
            if tables and not self._created:
                # A damaged page may lie anywhere: find it now, while it can be
                # set aside, rather than in the middle of a search.
                problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
                if problems != ["ok"]:
                    found = " ".join(" ".join(map(str, problems)).split())
                    raise _Damaged(f"SQLite's check found: {found[:300]}")
            if not tables:
                # Small pages for a new file (no effect on an existing one): a
                # search rewrites a few short rows, and each commit appends every
                # page it touched to the WAL, so 1 KiB pages halve its cost.
                conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")
            # WAL: readers never wait for the writer (persistent, set once per file).
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        with self._transaction() as conn:
            self._init_schema(conn)
        self._opening = False

    def _reopen(self) -> sqlite3.Connection:
        """The file was deleted or replaced while in use: writing on into the old
        one would split the state (a new process would not see this one's hold),
        so it is opened again at its path, with a warning. Returns this thread's
        connection to it."""
        with self._reopen_lock:
            if ident_of(self.path) not in (self._ident, UNKNOWN):
                log.warning(
                    "state database %s was deleted or replaced while in use; opened it "
                    "again (what was written to the old file is gone with it)",
                    self.path.name,
                )
                # Other threads' connections go when they next ask for theirs.
                with self._all_lock:
                    checkpointer, self._checkpointer = self._checkpointer, None
                if checkpointer is not None:
                    checkpointer.close()
                self.records = {}
                self._forget()
                self._check_path()
                self._open()
        return self._conn()

    def _drop(self, conn: sqlite3.Connection) -> None:
        """Close this thread's connection `conn` (the next `_conn` makes another)."""
        with self._all_lock:
            if conn in self._all:
                self._all.remove(conn)
        with contextlib.suppress(sqlite3.Error):
            conn.close()
        self._local.conn = None

    def _close_connections(self) -> None:
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()

    def _forget(self) -> None:
        """Drop what this handle remembers of the file's content (it was replaced)."""

    # -- the file: ours, or a ConfigError -------------------------------------------------

    def _check_path(self) -> None:
        if not check_path(self.path):
            return
        try:
            with self.path.open("rb") as fh:
                head = fh.read(16)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreUnavailable(
                self.path.name, f"cannot be read ({exc.strerror})", "check its permissions"
            ) from None
        if head and head != _MAGIC:
            raise not_state(self.path, "it is not an SQLite database")

    def _create_file(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def _conn(self) -> sqlite3.Connection:
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is not None and local.forks == generation():
            if local.ident == self._ident:
                return conn
            self._drop(conn)  # a connection to the file this store had before it reopened
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(f"PRAGMA wal_autocheckpoint = {_AUTOCHECKPOINT_PAGES}")
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from None
        local.conn, local.forks, local.ident = conn, generation(), self._ident
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _error(self, exc: sqlite3.Error) -> Exception:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return StoreUnavailable(
                self.path.name,
                f"another process held its write lock for more than {self.busy_timeout:g} s",
                "check for a stuck process using this state file, or raise busy_timeout",
            )
        if isinstance(exc, sqlite3.DatabaseError) and _DAMAGE.search(text):
            if not own_sqlite_file(self.path):
                return not_state(self.path, f"SQLite says: {text}")
            if self._opening:
                return _Damaged(f"SQLite says: {text}")
            return StoreUnavailable(
                self.path.name,
                f"it was damaged while in use (SQLite says: {text})",
                "start searchfuse again: a damaged state database of its own is set aside "
                "and made again when it is opened",
            )
        if isinstance(exc, sqlite3.DatabaseError) and "no such" in text:
            return not_state(self.path, f"SQLite says: {text}")
        return StoreUnavailable(self.path.name, f"SQLite error: {text}", "check the disk and path")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._begin()
        try:
            yield conn
        except sqlite3.Error as exc:
            rollback(conn)
            raise self._error(exc) from None
        except BaseException:
            rollback(conn)
            raise
        self._commit(conn)

    def _begin(self) -> sqlite3.Connection:
        """This thread's connection, in a write transaction (waits up to `busy_timeout`)."""
        conn = self._conn()
        if ident_of(self.path) not in (self._ident, UNKNOWN):
            conn = self._reopen()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        return conn

    def _commit(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            rollback(conn)
            raise self._error(exc) from None
        self._commits += 1
        if self._commits % CHECKPOINT_EVERY == 0:
            self._checkpoint_soon()

    def _checkpoint_soon(self) -> None:
        with self._all_lock:
            checkpointer = self._checkpointer
            if checkpointer is None or not checkpointer.alive():
                checkpointer = self._checkpointer = Checkpointer(self.path, self.busy_timeout)
        checkpointer.request()

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if tables and "searchfuse_meta" not in tables:
            raise not_state(self.path, "it is an SQLite database of another program")
        if "searchfuse_meta" in tables:
            row = conn.execute("SELECT schema_version FROM searchfuse_meta").fetchone()
            if row is not None:
                if not isinstance(row[0], int) or row[0] > SCHEMA_VERSION:
                    raise ConfigError(
                        str(self.path),
                        None,
                        f"was written by a newer searchfuse (schema {row[0]!r}, this one "
                        f"knows {SCHEMA_VERSION})",
                        "upgrade searchfuse, or point state= at another file",
                    )
                if "tallies" not in tables:
                    conn.execute(TALLIES)
                elif "expires" not in {r[1] for r in conn.execute("PRAGMA table_info(tallies)")}:
                    # A database from before tallies expired: its rows get an expiry
                    # when next charged or refused.
                    conn.execute("ALTER TABLE tallies ADD COLUMN expires REAL")
                conn.execute(TALLIES_EXPIRES)
                if "events" not in tables:
                    conn.execute(EVENTS)
                if "claims" not in tables:
                    conn.execute(CLAIMS)
                return
        try:
            conn.execute(CLAIMS)
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        if conn.execute("SELECT 1 FROM searchfuse_meta").fetchone() is not None:
            return  # another process initialised it while we waited
        conn.execute(
            "INSERT INTO searchfuse_meta (id, schema_version, month) VALUES (1, ?, '')",
            (SCHEMA_VERSION,),
        )
        if self._created:
            import_json(conn, self.path, self._key_order)

    # -- rows --------------------------------------------------------------------------

    def key_record(
        self, fp: str, row: tuple[Any, ...], warn: Callable[[str], None] | None = None
    ) -> KeyState:
        """The record in a `keys` row (a copy the caller may change)."""
        record: KeyState = self._record("k", fp, row, warn)
        return record

    def account_record(
        self, name: str, row: tuple[Any, ...], warn: Callable[[str], None] | None = None
    ) -> AccountUsage:
        """The record in an `accounts` row (a copy the caller may change)."""
        record: AccountUsage = self._record("a", name, row, warn)
        return record

    def _record(
        self, kind: str, name: str, row: tuple[Any, ...], warn: Callable[[str], None] | None
    ) -> Any:
        # A row equal to one already read is not validated again: a search reads
        # the same rows several times, and most of them did not change.
        seen = self.records.get((kind, name))
        if seen is not None and seen[0] == row:
            return copied(seen[1])
        bad: list[str] = []
        if kind == "k":
            fields = dict(zip(KEY_COLS, row, strict=True))
            record: Any = key_from_fields(fields, f"key {name}", collect(bad, warn))
        else:
            fields = dict(zip(ACCOUNT_COLS, row, strict=True))
            record = account_from_fields(fields, f"account {name}", collect(bad, warn))
        self._remember((kind, name), row, record, bad)
        return record

    def _remember(
        self, name: tuple[str, str], row: tuple[Any, ...], record: Any, bad: list[str]
    ) -> None:
        # A row with a bad value is never remembered: every read warns and resets it
        # until a write replaces it. Bounded: a store with more rows than this
        # validates the rest on every read, as before.
        if bad:
            self.records.pop(name, None)
        elif name in self.records or len(self.records) < _MAX_RECORDS:
            self.records[name] = (tuple(row), copied(record))

    def warner(self, on_bad: Callable[[], None]) -> Callable[[str], None]:
        def warn(message: str) -> None:
            on_bad()
            log.warning("state database %s: %s", self.path.name, message)

        return warn

    def close(self) -> None:
        with self._all_lock:
            conns, self._all = self._all, []
            checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.close()
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()
