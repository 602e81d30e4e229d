"""State in an SQLite database: the embedded default (`state/searchfuse.db`).

One row per key and per account, so a search reads and writes only the rows
it touches; WAL mode, so readers never wait for the writer; every
read-modify-write is one `BEGIN IMMEDIATE` transaction, so the 429 hold,
a key's park and the pacing decision are atomic across processes. Lock waits
are bounded by `busy_timeout` (default 5 s), then
[`StoreUnavailable`][searchfuse.errors.StoreUnavailable]. Columns are typed and every value is
validated on read: a bad one is reset with a warning, never a crash.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from searchfuse._files import set_aside
from searchfuse.errors import ConfigError, StoreUnavailable
from searchfuse.router.state._base import Changes, Store, TxState
from searchfuse.router.state._budgets import Line, Tally
from searchfuse.router.state._codec import looks_like_state, state_from_json, tally_from_fields
from searchfuse.router.state._events import MAX_EVENTS, Event, event_from_fields, event_to_fields
from searchfuse.router.state._grant import Charge, Grant, acquire, search_log
from searchfuse.router.state._month import month_of, rolled_key, rollover
from searchfuse.router.state._paths import check_path, not_state
from searchfuse.router.state._records import (
    CHARGED_ACCOUNT_FIELDS,
    CHARGED_KEY_FIELDS,
    AccountUsage,
    KeyState,
    KeyUsage,
    State,
    copied,
)
from searchfuse.router.state._repair import move_aside, own_sqlite_file
from searchfuse.router.state._ring import Ring
from searchfuse.router.state._skill import SKILL_FORMAT, KeySlot, by_position, is_positional
from searchfuse.router.state._trust import future_slot, newest_ring
from searchfuse.router.state._values import (
    ACCOUNT_FIELDS,
    KEY_FIELDS,
    account_from_fields,
    account_to_fields,
    key_from_fields,
    key_to_fields,
    optional_number,
    optional_text,
)
from searchfuse.router.state._values import _warn as _default_warn

__all__ = ["SCHEMA_VERSION", "SqliteStore"]

log = logging.getLogger("searchfuse.state")
T = TypeVar("T")

SCHEMA_VERSION = 1
_MAGIC = b"SQLite format 3\x00"
_SQL_TYPES = {"str?": "TEXT", "bool": "INTEGER", "int": "INTEGER", "int?": "INTEGER"}


def _columns(spec: dict[str, str]) -> str:
    return ", ".join(f"{name} {_SQL_TYPES.get(kind, 'REAL')}" for name, kind in spec.items())


#: Budget tallies (`state/_budgets.py`); made in databases older than them on open.
_TALLIES = (
    "CREATE TABLE IF NOT EXISTS tallies (name TEXT PRIMARY KEY, period TEXT, used REAL, "
    "expires REAL)"
)
#: Expired tallies are dropped by expiry (`State.forget_tallies`).
_TALLIES_EXPIRES = "CREATE INDEX IF NOT EXISTS tallies_expires ON tallies (expires)"
#: The event log (`state/_events.py`), the newest `MAX_EVENTS` rows; made in older
#: databases on open.
_EVENTS = (
    "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, time REAL, kind TEXT, "
    "provider TEXT, fingerprint TEXT, retry_after REAL, until REAL, detail TEXT)"
)
# The text last: a number's bytes after a masked key in the file would read as its tail.
_EVENT_COLS = ("time", "kind", "provider", "fingerprint", "retry_after", "until", "detail")
_INSERT_EVENT = f"INSERT INTO events ({', '.join(_EVENT_COLS)}) VALUES (?, ?, ?, ?, ?, ?, ?)"
_KEY_COLS = tuple(KEY_FIELDS)
_ACCOUNT_COLS = tuple(ACCOUNT_FIELDS)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS searchfuse_meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    month TEXT NOT NULL,
    hold_until REAL,
    hold_key TEXT,
    seq INTEGER NOT NULL DEFAULT 0,
    epoch INTEGER NOT NULL DEFAULT 0,
    imported_from TEXT
);
CREATE TABLE IF NOT EXISTS keys (fp TEXT PRIMARY KEY, {_columns(KEY_FIELDS)}, rev INTEGER);
CREATE INDEX IF NOT EXISTS keys_rev ON keys (rev);
CREATE TABLE IF NOT EXISTS accounts (name TEXT PRIMARY KEY, {_columns(ACCOUNT_FIELDS)},
    rev INTEGER);
CREATE INDEX IF NOT EXISTS accounts_rev ON accounts (rev);
CREATE TABLE IF NOT EXISTS rings (name TEXT PRIMARY KEY, size INTEGER, seq INTEGER);
CREATE TABLE IF NOT EXISTS ring_slots (name TEXT, slot INTEGER, t REAL,
    PRIMARY KEY (name, slot)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT, expires REAL);
CREATE INDEX IF NOT EXISTS cache_expires ON cache (expires);
{_TALLIES};
{_TALLIES_EXPIRES};
{_EVENTS}
"""
_SELECT_KEY = f"SELECT {', '.join(_KEY_COLS)} FROM keys WHERE fp = ?"
_SELECT_ACCOUNT = f"SELECT {', '.join(_ACCOUNT_COLS)} FROM accounts WHERE name = ?"
_SELECT_META = "SELECT month, hold_until, hold_key, seq, epoch FROM searchfuse_meta"
#: The meta row and a pacing log's size, position and next slot, in one query
#: (`_SELECT_META`'s columns, then `_SELECT_RING_SLOT`'s, NULL for a log not made yet).
_SELECT_META_RING = (
    "SELECT m.month, m.hold_until, m.hold_key, m.seq, m.epoch, r.size, r.seq, s.t "
    "FROM searchfuse_meta m LEFT JOIN rings r ON r.name = ? LEFT JOIN ring_slots s "
    "ON s.name = r.name AND s.slot = r.seq % r.size"
)
_SELECT_RING_SLOT = (
    "SELECT r.size, r.seq, s.t FROM rings r LEFT JOIN ring_slots s "
    "ON s.name = r.name AND s.slot = r.seq % r.size WHERE r.name = ?"
)


def _upsert(table: str, pk: str, cols: tuple[str, ...]) -> str:
    # An update in place when the row exists (no delete and re-insert of the row
    # and its index entries, which INSERT OR REPLACE would do).
    names = (*cols, "rev")
    return (
        f"INSERT INTO {table} ({pk}, {', '.join(names)}) "
        f"VALUES ({', '.join('?' * (len(names) + 1))}) "
        f"ON CONFLICT ({pk}) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in names)
    )


_UPSERT_KEY = _upsert("keys", "fp", _KEY_COLS)
_CHARGE_KEY = (
    f"UPDATE keys SET {', '.join(f'{c} = ?' for c in CHARGED_KEY_FIELDS)}, rev = ? WHERE fp = ?"
)
_CHARGE_ACCOUNT = (
    f"UPDATE accounts SET {', '.join(f'{c} = ?' for c in CHARGED_ACCOUNT_FIELDS)}, rev = ? "
    "WHERE name = ?"
)
#: `UPDATE ... SET` statements by table and changed columns (a search changes the same few).
_UPDATE_SQL: dict[tuple[str, tuple[str, ...]], str] = {}
_USAGE_COLS = ("key_usage", "key_limit", "search_usage")
_COLUMNS = frozenset(_KEY_COLS) | frozenset(ACCOUNT_FIELDS)


def _same(a: Any, b: Any) -> bool:
    # 1 and 1.0 are equal but not the same column value (an int column stays int).
    return a == b and type(a) is type(b)


def _diff(before: Any, record: Any) -> list[tuple[str, Any]]:
    """The columns (and new values) in which two records of one row differ."""
    old = before.__dict__
    out: list[tuple[str, Any]] = []
    for name, value in record.__dict__.items():
        was = old.get(name)
        if _same(value, was):
            continue
        if name == "last_usage":
            new_usage, old_usage = value or KeyUsage(), was or KeyUsage()
            for col in _USAGE_COLS:
                v = getattr(new_usage, col)
                if not _same(v, getattr(old_usage, col)):
                    out.append((col, v))
        elif name in _COLUMNS:
            out.append((name, value))
    return out


_UPSERT_ACCOUNT = _upsert("accounts", "name", _ACCOUNT_COLS)


class _Tx(TxState):
    """A transaction's state: rows are loaded when first named.

    `current` holds records known to equal their rows (nothing was committed
    since this process last read or wrote them): those are not read again.
    """

    def __init__(
        self,
        store: SqliteStore,
        conn: sqlite3.Connection,
        meta: tuple[Any, ...],
        current: dict[tuple[str, str], Any],
    ):
        month, hold_until, hold_key = meta[0], meta[1], meta[2]
        super().__init__(month, hold_until, hold_key)
        self._store = store
        self._conn = conn
        self._current = current
        self.rewrite: set[str] = set()

    def load_key(self, fp: str) -> KeyState | None:
        known = self._current.get(("k", fp))
        if known is not None:
            return copied(known)  # type: ignore[no-any-return]
        row = self._conn.execute(_SELECT_KEY, (fp,)).fetchone()
        if row is None:
            return None
        return self._store.key_record(
            fp, row, self._store.warner(lambda: self.rewrite.add(f"k:{fp}"))
        )

    def load_account(self, name: str) -> AccountUsage | None:
        known = self._current.get(("a", name))
        if known is not None:
            return copied(known)  # type: ignore[no-any-return]
        row = self._conn.execute(_SELECT_ACCOUNT, (name,)).fetchone()
        if row is None:
            return None
        return self._store.account_record(
            name, row, self._store.warner(lambda: self.rewrite.add(f"a:{name}"))
        )

    def ring(self, name: str, size: int) -> Ring:
        return _ring_sized(self._conn, name, size, math.inf)

    def load_tally(self, name: str) -> Tally | None:
        row = self._conn.execute(
            "SELECT period, used, expires FROM tallies WHERE name = ?", (name,)
        ).fetchone()
        return (
            None
            if row is None
            else tally_from_fields(row[0], row[1], f"budget {name}", _default_warn, row[2])
        )

    def set_tally(self, name: str, tally: Tally) -> None:
        super().set_tally(name, tally)
        # Written inside this transaction (rolled back with it).
        self._conn.execute(
            "INSERT OR REPLACE INTO tallies (name, period, used, expires) VALUES (?, ?, ?, ?)",
            (name, tally.period, tally.used, tally.expires),
        )

    def forget_tallies(self, now: float) -> None:
        super().forget_tallies(now)
        self._conn.execute("DELETE FROM tallies WHERE expires <= ?", (now,))

    def take(self, name: str, limit: int, window: float, now: float) -> float:
        return _take(self._conn, name, limit, window, now)


def _take(
    conn: sqlite3.Connection,
    name: str,
    limit: int,
    window: float,
    now: float,
    row: tuple[Any, ...] | None = None,
) -> float:
    """Count one event in pacing log `name` if it fits (see `Ring.take`): 0.0, or
    the seconds until it would fit. One read and two writes whatever `limit` is.

    `row` is `_SELECT_RING_SLOT`'s answer if it was read in this transaction already.
    """
    if row is None:
        # The log's size and position, and the time in the slot the next event
        # takes, in one query.
        row = conn.execute(_SELECT_RING_SLOT, (name,)).fetchone()
    if row is None or row[0] != limit or not _positive_int(row[1], zero=True):
        if row is None:
            conn.execute("INSERT INTO rings (name, size, seq) VALUES (?, ?, 0)", (name, limit))
            seq = 0
        else:
            seq = _ring_sized(conn, name, limit, now).seq
        found = conn.execute(
            "SELECT t FROM ring_slots WHERE name = ? AND slot = ?", (name, seq % limit)
        ).fetchone()
        stored = found[0] if found else None
    else:
        seq, stored = int(row[1]), row[2]
    slot = seq % limit
    oldest = optional_number(stored, f"pacing log {name}")
    if future_slot(name, oldest, now):
        # Not believed past now, here and in every other slot of the log.
        conn.execute("UPDATE ring_slots SET t = ? WHERE name = ? AND t > ?", (now, name, now))
        oldest = now
    if oldest is not None and oldest + window > now:
        return oldest + window - now
    conn.execute(
        "INSERT OR REPLACE INTO ring_slots (name, slot, t) VALUES (?, ?, ?)", (name, slot, now)
    )
    conn.execute("UPDATE rings SET seq = ? WHERE name = ?", (seq + 1, name))
    return 0.0


def _ring_sized(conn: sqlite3.Connection, name: str, size: int, now: float) -> Ring:
    """Pacing log `name`, resized to `size` slots if it has another size.

    Loads the whole log: only for a resize or an inspection (`_take` is O(1)).
    A resize reads at most `size` stored times, whatever size the row claims.
    """
    row = conn.execute("SELECT size, seq FROM rings WHERE name = ?", (name,)).fetchone()
    if row is not None and row[0] == size and _positive_int(row[1], zero=True):
        return _load_ring(conn, name, row)
    times = conn.execute(
        "SELECT t FROM ring_slots WHERE name = ? ORDER BY t DESC LIMIT ?", (name, size)
    )
    where = f"pacing log {name}"
    ring = newest_ring(name, (optional_number(t, where) for (t,) in times), size, now)
    conn.execute("DELETE FROM ring_slots WHERE name = ?", (name,))
    conn.executemany(
        "INSERT INTO ring_slots (name, slot, t) VALUES (?, ?, ?)",
        [(name, i, t) for i, t in enumerate(ring.slots) if t is not None],
    )
    conn.execute(
        "INSERT OR REPLACE INTO rings (name, size, seq) VALUES (?, ?, ?)",
        (name, ring.size, ring.seq),
    )
    return ring


def _log_events(conn: sqlite3.Connection, events: list[Event]) -> None:
    """Add `events` to the log, inside the transaction that made them; the oldest go."""
    rows = []
    for event in events:
        fields = event_to_fields(event)
        rows.append(tuple(fields.get(c) for c in _EVENT_COLS))
    conn.executemany(_INSERT_EVENT, rows)
    conn.execute("DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - ?", (MAX_EVENTS,))


def _rollback(conn: sqlite3.Connection) -> None:
    with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK")


class _Known(State):
    """The records `SqliteStore.grant` remembers, as a state `acquire` can decide on;
    its pacing log is the database's (`ring`: one log's row, read with the meta row)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        meta: tuple[Any, ...],
        keys: dict[str, KeyState],
        accounts: dict[str, AccountUsage],
        ring: tuple[str, tuple[Any, ...]] | None = None,
    ) -> None:
        super().__init__(
            month=meta[0], keys=keys, accounts=accounts, hold_until=meta[1], hold_key=meta[2]
        )
        self._conn = conn
        self._ring = ring

    def take(self, name: str, limit: int, window: float, now: float) -> float:
        ring, self._ring = self._ring, None
        row = ring[1] if ring is not None and ring[0] == name else None
        return _take(self._conn, name, limit, window, now, row)


def _load_ring(conn: sqlite3.Connection, name: str, row: Any) -> Ring:
    """Pacing log `name` from its `(size, seq)` row and its slots."""
    if row is None or not _positive_int(row[0]) or not _positive_int(row[1], zero=True):
        return Ring(1)
    ring = Ring(int(row[0]), int(row[1]))
    for slot, t in conn.execute("SELECT slot, t FROM ring_slots WHERE name = ?", (name,)):
        if _positive_int(slot, zero=True) and slot < ring.size:
            ring.set(slot, optional_number(t, f"pacing log {name}"))
    return ring


#: How many parsed rows a store keeps to skip validating them again.
_MAX_RECORDS = 100_000
#: Every this many commits of one store, a thread of its own checkpoints the WAL
#: (copies it into the database), so no search waits for that copy and its fsyncs.
CHECKPOINT_EVERY = 64
#: SQLite's own checkpoint on commit, in pages: only a safety net for when the
#: background one falls behind (its default, 1000 pages, runs every ~150 searches
#: and costs a search tens of milliseconds on a slow disk).
_AUTOCHECKPOINT_PAGES = 10_000
#: Grants of `SqliteStore.grant` taken on remembered rows.
_FRESH = Grant("ok", fresh=True)
_FRESH_CLEAN = Grant("ok", clean=True, fresh=True)
#: The page size of a new database file.
_PAGE_SIZE = 1024
#: Own commits remembered to answer `changes` without reading rows.
_MAX_LOG = 64


class _Checkpointer:
    """A daemon thread that checkpoints the WAL when asked (`PRAGMA
    wal_checkpoint(PASSIVE)`: it never waits for readers or writers).

    Started on first use, one per store and process; `close` stops it.
    """

    def __init__(self, path: Path, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.done = 0
        self._wake = threading.Event()
        self._closing = False
        self._pid = os.getpid()
        self._thread = threading.Thread(
            target=self._run, name=f"searchfuse-checkpoint-{path.name}", daemon=True
        )
        self._thread.start()

    def alive(self) -> bool:
        return self._pid == os.getpid() and self._thread.is_alive()

    def request(self) -> None:
        self._wake.set()

    def close(self, timeout: float = 5.0) -> None:
        self._closing = True
        self._wake.set()
        if self.alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._closing:
                    return
                try:
                    if conn is None:
                        conn = sqlite3.connect(
                            self.path, timeout=self.busy_timeout, isolation_level=None
                        )
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.done += 1
                except sqlite3.Error as exc:
                    # The next commit's checkpoint, or SQLite's own, will do it.
                    log.debug("checkpoint of %s failed: %s", self.path.name, exc)
        finally:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()


def _collect(bad: list[str], warn: Callable[[str], None] | None) -> Callable[[str], None]:
    """A warning callback that notes each warning in `bad`, then passes it on."""

    def note(message: str) -> None:
        bad.append(message)
        if warn is not None:
            warn(message)
        else:
            _default_warn(message)

    return note


#: Counters (seq, epoch, a pacing log's position) stay below this: one more
#: must still fit in SQLite's 64-bit INTEGER.
_MAX_COUNTER = 2**62


def _positive_int(value: Any, zero: bool = False) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and (value >= 0 if zero else value > 0)
        and value < _MAX_COUNTER
    )


def _meta_counters_bad(row: tuple[Any, ...]) -> bool:
    """Whether a `_SELECT_META` row's seq or epoch is not a counter (edited by
    hand, or out of range): the next write transaction renumbers them."""
    return not (_positive_int(row[3], zero=True) and _positive_int(row[4], zero=True))


#: What SQLite says about a file whose pages it cannot read.
_DAMAGE = re.compile(r"malformed|not a database|disk image|corrupt")


class _Damaged(Exception):
    """A database of ours that SQLite cannot read (`why`)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class SqliteStore(Store):
    """Router state in an SQLite file shared by every process on the machine.

    `busy_timeout` bounds how long a transaction waits for another
    process's write lock (then [`StoreUnavailable`][searchfuse.errors.StoreUnavailable]). A new
    database imports `quota.json` from the same folder once, if there is one, and
    never writes to it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        key_order: Sequence[KeySlot] | None = None,
    ) -> None:
        self.path = Path(path)
        self.busy_timeout = float(busy_timeout)
        #: The configured keys in order: what the original skill's records by position are.
        self._key_order = None if key_order is None else tuple(key_order)
        self._local = threading.local()
        self._records: dict[tuple[str, str], tuple[tuple[Any, ...], Any]] = {}
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._commits = 0
        self._checkpointer: _Checkpointer | None = None
        # What this process knows to be in the database: as of token `_known`
        # (epoch, seq), the records in `_current` equal their rows, and `_log`
        # holds what each commit after `_log_base` changed (this process's own
        # commits, one after another). A transaction that finds another token
        # forgets it all. It saves a search rereading the rows it just wrote.
        self._sync_lock = threading.Lock()
        self._known: tuple[Any, Any] | None = None
        self._current: dict[tuple[str, str], Any] = {}
        self._log: list[tuple[int, dict[str, KeyState], dict[str, AccountUsage]]] = []
        self._log_base: tuple[Any, Any] | None = None
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

    def _close_connections(self) -> None:
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"SqliteStore({self.path.name!r})"

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
        if conn is not None and local.pid == os.getpid():
            return conn
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
        local.conn, local.pid = conn, os.getpid()
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
            _rollback(conn)
            raise self._error(exc) from None
        except BaseException:
            _rollback(conn)
            raise
        self._commit(conn)

    def _begin(self) -> sqlite3.Connection:
        """This thread's connection, in a write transaction (waits up to `busy_timeout`)."""
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        return conn

    def _commit(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            raise self._error(exc) from None
        self._commits += 1
        if self._commits % CHECKPOINT_EVERY == 0:
            self._checkpoint_soon()

    def _checkpoint_soon(self) -> None:
        with self._all_lock:
            checkpointer = self._checkpointer
            if checkpointer is None or not checkpointer.alive():
                checkpointer = self._checkpointer = _Checkpointer(self.path, self.busy_timeout)
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
                    conn.execute(_TALLIES)
                elif "expires" not in {r[1] for r in conn.execute("PRAGMA table_info(tallies)")}:
                    # A database from before tallies expired: its rows get an expiry
                    # when next charged or refused.
                    conn.execute("ALTER TABLE tallies ADD COLUMN expires REAL")
                conn.execute(_TALLIES_EXPIRES)
                if "events" not in tables:
                    conn.execute(_EVENTS)
                return
        try:
            for statement in _SCHEMA.split(";"):
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
            self._import_json(conn)

    def _import_json(self, conn: sqlite3.Connection) -> None:
        """Bring `quota.json` from the same folder into a new database, once.

        The JSON file is only read: it stays as it is, and is never written again.
        """
        source = self.path.parent / "quota.json"
        try:
            data = json.loads(source.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
            log.warning("not importing %s into %s: %s", source.name, self.path.name, exc)
            return
        how = ""
        if is_positional(data):
            data, how = by_position(data, self._key_order)
            if data is None:
                log.warning(
                    "not importing %s into %s: %s (%s is left as it is; cooldowns are "
                    "relearned from Tavily's answers)",
                    source.name,
                    self.path.name,
                    how,
                    source.name,
                )
                return
        if not looks_like_state(data):
            log.warning("not importing %s: it is not searchfuse state", source.name)
            return
        state = state_from_json(data)
        for fp, ks in state.keys.items():
            self._write_key(conn, fp, ks, 1)
        for name, acc in state.accounts.items():
            self._write_account(conn, name, acc, 1)
        conn.execute(
            "UPDATE searchfuse_meta SET month = ?, hold_until = ?, hold_key = ?, seq = 1, "
            "imported_from = ?",
            (state.month, state.hold_until, state.hold_key, source.name),
        )
        log.info(
            "imported %s (%d keys%s) into %s; the JSON file is no longer written",
            source.name,
            len(state.keys),
            f": {SKILL_FORMAT}, {how}" if how else "",
            self.path.name,
        )

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
        seen = self._records.get((kind, name))
        if seen is not None and seen[0] == row:
            return copied(seen[1])
        bad: list[str] = []
        if kind == "k":
            fields = dict(zip(_KEY_COLS, row, strict=True))
            record: Any = key_from_fields(fields, f"key {name}", _collect(bad, warn))
        else:
            fields = dict(zip(_ACCOUNT_COLS, row, strict=True))
            record = account_from_fields(fields, f"account {name}", _collect(bad, warn))
        self._remember((kind, name), row, record, bad)
        return record

    def _remember(
        self, name: tuple[str, str], row: tuple[Any, ...], record: Any, bad: list[str]
    ) -> None:
        # A row with a bad value is never remembered: every read warns and resets it
        # until a write replaces it. Bounded: a store with more rows than this
        # validates the rest on every read, as before.
        if bad:
            self._records.pop(name, None)
        elif name in self._records or len(self._records) < _MAX_RECORDS:
            self._records[name] = (tuple(row), copied(record))

    def warner(self, on_bad: Callable[[], None]) -> Callable[[str], None]:
        def warn(message: str) -> None:
            on_bad()
            log.warning("state database %s: %s", self.path.name, message)

        return warn

    @staticmethod
    def _write_key(conn: sqlite3.Connection, fp: str, ks: KeyState, rev: int) -> None:
        values = key_to_fields(ks)
        conn.execute(_UPSERT_KEY, (fp, *(values[c] for c in _KEY_COLS), rev))

    @staticmethod
    def _write_account(conn: sqlite3.Connection, name: str, acc: AccountUsage, rev: int) -> None:
        values = account_to_fields(acc)
        conn.execute(_UPSERT_ACCOUNT, (name, *(values[c] for c in _ACCOUNT_COLS), rev))

    def _write_changed(
        self,
        conn: sqlite3.Connection,
        table: str,
        pk: str,
        name: str,
        before: KeyState | AccountUsage,
        record: KeyState | AccountUsage,
        rev: int,
    ) -> None:
        """Update only the columns of an existing row that changed (and its `rev`)."""
        changed = _diff(before, record)
        cols = tuple(c for c, _ in changed)
        sql = _UPDATE_SQL.get((table, cols))
        if sql is None:
            sets = ", ".join(f"{c} = ?" for c in (*cols, "rev"))
            sql = f"UPDATE {table} SET {sets} WHERE {pk} = ?"
            if len(_UPDATE_SQL) < 1000:
                _UPDATE_SQL[(table, cols)] = sql
        conn.execute(sql, (*(v for _, v in changed), rev, name))

    def _meta(
        self, conn: sqlite3.Connection, now: float, row: tuple[Any, ...] | None = None
    ) -> tuple[Any, ...]:
        """`(month, hold_until, hold_key, seq, epoch)`, from `row` if it was read
        already (`_SELECT_META` columns first); a new month resets key state."""
        if row is None:
            row = conn.execute(_SELECT_META).fetchone()
        if row is None:
            raise not_state(self.path, "its searchfuse_meta row is missing")
        meta = self._parse_meta(row)
        month = rollover(meta[0], now)
        if month is not None:
            return self._roll(conn, month, now, meta[4] + 1, meta[1], meta[2])
        if _meta_counters_bad(row):
            _default_warn(
                f"{self.path.name}: searchfuse_meta seq/epoch out of range "
                f"({row[3]!r}, {row[4]!r}); renumbered"
            )
            epoch = meta[4] + 1
            conn.execute("UPDATE keys SET rev = 0")
            conn.execute("UPDATE accounts SET rev = 0")
            conn.execute("UPDATE searchfuse_meta SET seq = 0, epoch = ?", (epoch,))
            return (meta[0], meta[1], meta[2], 0, epoch)
        return meta

    @staticmethod
    def _parse_meta(row: tuple[Any, ...]) -> tuple[Any, ...]:
        seq = row[3] if _positive_int(row[3], zero=True) else 0
        epoch = row[4] if _positive_int(row[4], zero=True) else 0
        hold_until = optional_number(row[1], "hold_until")
        hold_key = optional_text(row[2], "hold_key")
        month = row[0] if isinstance(row[0], str) else ""
        return (month, hold_until, hold_key, seq, epoch)

    def _roll(
        self,
        conn: sqlite3.Connection,
        month: str,
        now: float,
        epoch: int,
        hold_until: float | None,
        hold_key: str | None,
    ) -> tuple[Any, ...]:
        """Start `month`: usage resets; running cooldowns and a running hold are kept."""
        cooling = [
            (fp, key_from_fields(dict(zip(_KEY_COLS, rest, strict=True)), f"key {fp}"))
            for fp, *rest in conn.execute(
                f"SELECT fp, {', '.join(_KEY_COLS)} FROM keys WHERE cooldown_until > ?", (now,)
            )
        ]
        held = hold_until is not None and hold_until > now
        self._wipe(conn, month, epoch)
        for fp, ks in cooling:
            kept = rolled_key(ks, now)
            if kept is not None:
                self._write_key(conn, fp, kept, 0)
        if held:
            conn.execute(
                "UPDATE searchfuse_meta SET hold_until = ?, hold_key = ?", (hold_until, hold_key)
            )
            return (month, hold_until, hold_key, 0, epoch)
        return (month, None, None, 0, epoch)

    @staticmethod
    def _wipe(conn: sqlite3.Connection, month: str, epoch: int) -> None:
        # Pacing logs and the shared cache outlive a month: Tavily's rate window does.
        conn.execute("DELETE FROM keys")
        conn.execute("DELETE FROM accounts")
        conn.execute(
            "UPDATE searchfuse_meta SET month = ?, hold_until = NULL, hold_key = NULL, "
            "seq = 0, epoch = ?",
            (month, epoch),
        )

    # -- the Store interface --------------------------------------------------------------

    def update(self, now: float, change: Callable[[State], T]) -> T:
        # The transaction is spelled out (not `_transaction()`): a context
        # manager costs a write a few microseconds.
        conn = self._begin()
        try:
            meta = self._meta(conn, now)
            start = (meta[4], meta[3])
            current = self._known_at(start)
            tx = _Tx(self, conn, meta, current)
            rev = None
            result = change(tx)
            keys = tx.changed_keys()
            accounts = tx.changed_accounts()
            for name in tx.rewrite:
                if name[0] == "k" and name[2:] in tx.keys:
                    keys.setdefault(name[2:], tx.keys[name[2:]])
                elif name[0] == "a" and name[2:] in tx.accounts:
                    accounts.setdefault(name[2:], tx.accounts[name[2:]])
            if keys or accounts or tx.hold_changed():
                rev = meta[3] + 1
                for fp, ks in keys.items():
                    before = tx.seen_keys.get(fp)
                    if before is None or f"k:{fp}" in tx.rewrite:
                        self._write_key(conn, fp, ks, rev)
                    else:
                        self._write_changed(conn, "keys", "fp", fp, before, ks, rev)
                for name, acc in accounts.items():
                    before_acc = tx.seen_accounts.get(name)
                    if before_acc is None or f"a:{name}" in tx.rewrite:
                        self._write_account(conn, name, acc, rev)
                    else:
                        self._write_changed(conn, "accounts", "name", name, before_acc, acc, rev)
                conn.execute(
                    "UPDATE searchfuse_meta SET hold_until = ?, hold_key = ?, seq = ?",
                    (tx.hold_until, tx.hold_key, rev),
                )
            made = tx.made_events(now, keys)
            if made:
                _log_events(conn, made)
        except sqlite3.Error as exc:
            _rollback(conn)
            raise self._error(exc) from None
        except BaseException:
            _rollback(conn)
            raise
        self._commit(conn)
        # Committed: remember what the database now holds.
        with self._sync_lock:
            if self._known == start:
                for fp, seen in tx.seen_keys.items():
                    if seen is not None and fp in tx.keys:
                        current[("k", fp)] = tx.keys[fp]
                for name, seen_acc in tx.seen_accounts.items():
                    if seen_acc is not None and name in tx.accounts:
                        current[("a", name)] = tx.accounts[name]
                if rev is not None:
                    self._wrote(start, rev, keys, accounts)
        return result

    def _known_at(self, start: tuple[Any, Any]) -> dict[tuple[str, str], Any]:
        """The remembered records, if the database is still at `start`; else none."""
        with self._sync_lock:
            if self._known != start:
                self._known, self._log_base = start, start
                self._current, self._log = {}, []
            return self._current

    def _wrote(
        self,
        start: tuple[Any, Any],
        rev: int,
        keys: dict[str, KeyState],
        accounts: dict[str, AccountUsage],
    ) -> None:
        """Remember a commit made at `start` that wrote `keys` and `accounts` as `rev`
        (hold `_sync_lock`, and only while `_known` is still `start`)."""
        current = self._current
        for fp, ks in keys.items():
            current[("k", fp)] = ks
        for name, acc in accounts.items():
            current[("a", name)] = acc
        self._log.append((rev, keys, accounts))
        if len(self._log) > _MAX_LOG:
            dropped = self._log.pop(0)
            self._log_base = (start[0], dropped[0])
        self._known = (start[0], rev)

    def grant(
        self,
        now: float,
        fp: str,
        *,
        rpm: int | None,
        window: float,
        honour_hold: bool,
        charge: Charge | None = None,
        spend: tuple[Line, ...] = (),
    ) -> Grant:
        """What `update(now, lambda s: acquire(s, fp, now, ...))` does, with less work.

        Every search asks this once. When the key's and its account's rows are
        remembered (nothing was committed since this process last wrote them),
        `acquire` decides on copies of them, without the bookkeeping of a
        transaction that may load anything, and the columns it changed are
        written; otherwise this is that `update`.
        """

        def decide(state: State) -> Grant:
            return acquire(
                state,
                fp,
                now,
                rpm=rpm,
                window=window,
                honour_hold=honour_hold,
                charge=charge,
                spend=spend,
            )

        if charge is None or spend:
            return self.update(now, decide)
        conn = self._begin()
        try:
            log = search_log(fp)
            row = conn.execute(_SELECT_META_RING, (log,)).fetchone()
            meta = self._meta(conn, now, row)
            start = (meta[4], meta[3])
            current = self._known_at(start)
            known_key = current.get(("k", fp))
            known_account = current.get(("a", charge.account_id))
            if known_key is None or known_account is None:
                _rollback(conn)
                return self.update(now, decide)
            state = _Known(
                conn,
                meta,
                {fp: copied(known_key)},
                {charge.account_id: copied(known_account)},
                # A log not made yet (or a broken row) is looked at again by `_take`.
                None if row is None or row[5] is None else (log, row[5:]),
            )
            grant = decide(state)
            ks, acc = state.keys[fp], state.accounts[charge.account_id]
            written = grant.verdict == "ok"
            if written:
                rev = meta[3] + 1
                # A grant changes only what a charge does: no comparing of fields.
                conn.execute(_CHARGE_KEY, (*(getattr(ks, c) for c in CHARGED_KEY_FIELDS), rev, fp))
                conn.execute(
                    _CHARGE_ACCOUNT,
                    (*(getattr(acc, c) for c in CHARGED_ACCOUNT_FIELDS), rev, charge.account_id),
                )
                conn.execute("UPDATE searchfuse_meta SET seq = ?", (rev,))
        except sqlite3.Error as exc:
            _rollback(conn)
            raise self._error(exc) from None
        except BaseException:
            _rollback(conn)
            raise
        self._commit(conn)
        if not written:
            return grant
        with self._sync_lock:
            if self._known == start:
                self._wrote(start, rev, {fp: ks}, {charge.account_id: acc})
        return _FRESH_CLEAN if grant.clean else _FRESH

    def _own_changes(
        self, token: tuple[Any, Any], since: Any
    ) -> tuple[dict[str, KeyState], dict[str, AccountUsage]] | None:
        """The changes after `since` if they are all this process's own commits."""
        with self._sync_lock:
            base = self._log_base
            if (
                self._known != token
                or base is None
                or not isinstance(since, tuple)
                or since[0] != token[0]
                or base[0] != token[0]
                or not isinstance(since[1], int)
                or since[1] < base[1]
            ):
                return None
            keys: dict[str, KeyState] = {}
            accounts: dict[str, AccountUsage] = {}
            # Newest first: a record changed twice keeps its newest version.
            for rev, k, a in reversed(self._log):
                if rev <= since[1]:
                    break
                for fp, ks in k.items():
                    keys.setdefault(fp, ks)
                for name, acc in a.items():
                    accounts.setdefault(name, acc)
            return keys, accounts

    def read(self, now: float) -> State:
        return self.changes(now, None).as_state()

    def tallies(self, now: float, prefix: str = "") -> dict[str, Tally]:
        try:
            rows = (
                self._conn()
                .execute(
                    "SELECT name, period, used, expires FROM tallies "
                    "WHERE substr(name, 1, ?) = ? AND (expires IS NULL OR expires > ?)",
                    (len(prefix), prefix, now),
                )
                .fetchall()
            )
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        return {
            str(r[0]): tally_from_fields(r[1], r[2], f"budget {r[0]}", _default_warn, r[3])
            for r in rows
        }

    def events(self, limit: int = 50) -> list[Event]:
        if limit <= 0:
            return []
        try:
            rows = self._conn().execute(
                f"SELECT {', '.join(_EVENT_COLS)} FROM events ORDER BY id DESC LIMIT ?", (limit,)
            )
            found = [event_from_fields(dict(zip(_EVENT_COLS, row, strict=True))) for row in rows]
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        return [e for e in found if e is not None]

    def pacing_log(self, name: str) -> list[float] | None:
        try:
            rows = self._conn().execute("SELECT t FROM ring_slots WHERE name = ?", (name,))
            times = [t for (t,) in rows]
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        return sorted(t for t in times if isinstance(t, int | float) and not isinstance(t, bool))

    def changes(self, now: float, since: Any) -> Changes:
        conn = self._conn()
        try:
            row = conn.execute(_SELECT_META).fetchone()
            if row is None:
                raise not_state(self.path, "its searchfuse_meta row is missing")
            if rollover(
                row[0] if isinstance(row[0], str) else "", now
            ) is not None or _meta_counters_bad(row):
                # A new month: roll it over once for every process (usage resets,
                # running cooldowns stay), then read as usual. Counters out of
                # range are renumbered the same way.
                with self._transaction() as wconn:
                    self._meta(wconn, now)
                row = conn.execute(_SELECT_META).fetchone()
            month = row[0]
            token = (row[4], row[3])
            hold_until = optional_number(row[1], "hold_until")
            hold_key = optional_text(row[2], "hold_key")
            complete = not (isinstance(since, tuple) and since[0] == row[4])
            if not complete and since[1] == row[3]:
                return Changes(token, False, month, hold_until, hold_key)
            own = None if complete else self._own_changes(token, since)
            if own is not None:
                return Changes(token, False, month, hold_until, hold_key, own[0], own[1])
            after = -1 if complete else since[1]
            keys = {
                row[0]: self.key_record(row[0], row[1:])
                for row in conn.execute(
                    f"SELECT fp, {', '.join(_KEY_COLS)} FROM keys WHERE rev > ?", (after,)
                )
            }
            accounts = {
                row[0]: self.account_record(row[0], row[1:])
                for row in conn.execute(
                    f"SELECT name, {', '.join(_ACCOUNT_COLS)} FROM accounts WHERE rev > ?",
                    (after,),
                )
            }
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        with self._sync_lock:
            # Rows read here may differ from what this process remembers (a row
            # edited by hand, a bad value reset on read): the next transaction
            # reads them again.
            for fp in keys:
                self._current.pop(("k", fp), None)
            for name in accounts:
                self._current.pop(("a", name), None)
        return Changes(token, complete, month, hold_until, hold_key, keys, accounts)

    def clear(self, now: float) -> None:
        with self._transaction() as conn:
            row = conn.execute("SELECT epoch FROM searchfuse_meta").fetchone()
            epoch = row[0] if row and _positive_int(row[0], zero=True) else 0
            self._wipe(conn, month_of(now), epoch + 1)

    # -- the shared cache -------------------------------------------------------------------

    def cache_get(self, key: str, now: float) -> str | None:
        try:
            row = (
                self._conn()
                .execute("SELECT value, expires FROM cache WHERE key = ?", (key,))
                .fetchone()
            )
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        if row is None or not isinstance(row[0], str):
            return None
        expires = optional_number(row[1], "cache expiry")
        if expires is None or expires <= now:
            return None
        return str(row[0])

    def cache_set(
        self, key: str, value: str, expires_at: float, maxsize: int, *, now: float | None = None
    ) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO cache (key, value, expires) VALUES (?, ?, ?)",
                (key, value, expires_at),
            )
            conn.execute(
                "DELETE FROM cache WHERE key IN "
                "(SELECT key FROM cache ORDER BY expires DESC LIMIT -1 OFFSET ?)",
                (max(1, maxsize),),
            )

    def cache_delete(self, key: str) -> None:
        with self._transaction() as conn:
            conn.execute("DELETE FROM cache WHERE key = ?", (key,))

    def cache_keys(self, now: float) -> list[str]:
        try:
            rows = (
                self._conn().execute("SELECT key FROM cache WHERE expires > ?", (now,)).fetchall()
            )
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        return [str(r[0]) for r in rows]

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
