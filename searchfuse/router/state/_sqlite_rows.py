"""The SQLite store's tables and rows: the schema, the statements, writing records,
and the primitives the decisions written once above the backends work on (a
pacing log's slots, a month's start)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from searchfuse.router.state._codec import looks_like_state, state_from_json
from searchfuse.router.state._events import MAX_EVENTS, Event, event_to_fields
from searchfuse.router.state._records import (
    CHARGED_ACCOUNT_FIELDS,
    CHARGED_KEY_FIELDS,
    AccountUsage,
    KeyState,
    KeyUsage,
)
from searchfuse.router.state._ring import Ring
from searchfuse.router.state._skill import SKILL_FORMAT, KeySlot, by_position, is_positional
from searchfuse.router.state._values import (
    ACCOUNT_FIELDS,
    KEY_FIELDS,
    account_to_fields,
    key_from_fields,
    key_to_fields,
    optional_number,
    optional_text,
)
from searchfuse.router.state._values import _warn as _default_warn

log = logging.getLogger("searchfuse.state")

SCHEMA_VERSION = 1
SQL_TYPES = {"str?": "TEXT", "bool": "INTEGER", "int": "INTEGER", "int?": "INTEGER"}


def columns(spec: dict[str, str]) -> str:
    return ", ".join(f"{name} {SQL_TYPES.get(kind, 'REAL')}" for name, kind in spec.items())


#: Budget tallies (`state/_budgets.py`); made in databases older than them on open.
TALLIES = (
    "CREATE TABLE IF NOT EXISTS tallies (name TEXT PRIMARY KEY, period TEXT, used REAL, "
    "expires REAL)"
)
#: Expired tallies are dropped by expiry (`State.forget_tallies`).
TALLIES_EXPIRES = "CREATE INDEX IF NOT EXISTS tallies_expires ON tallies (expires)"
#: The event log (`state/_events.py`), the newest `MAX_EVENTS` rows; made in older
#: databases on open.
EVENTS = (
    "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, time REAL, kind TEXT, "
    "provider TEXT, fingerprint TEXT, retry_after REAL, until REAL, detail TEXT)"
)
# The text last: a number's bytes after a masked key in the file would read as its tail.
EVENT_COLS = ("time", "kind", "provider", "fingerprint", "retry_after", "until", "detail")
INSERT_EVENT = f"INSERT INTO events ({', '.join(EVENT_COLS)}) VALUES (?, ?, ?, ?, ?, ?, ?)"
#: Claims on cache entries being searched for (see `Store.cache_claim`); made in
#: older databases on open.
CLAIMS = "CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, owner TEXT, until REAL)"
KEY_COLS = tuple(KEY_FIELDS)
ACCOUNT_COLS = tuple(ACCOUNT_FIELDS)
SCHEMA = f"""
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
CREATE TABLE IF NOT EXISTS keys (fp TEXT PRIMARY KEY, {columns(KEY_FIELDS)}, rev INTEGER);
CREATE INDEX IF NOT EXISTS keys_rev ON keys (rev);
CREATE TABLE IF NOT EXISTS accounts (name TEXT PRIMARY KEY, {columns(ACCOUNT_FIELDS)},
    rev INTEGER);
CREATE INDEX IF NOT EXISTS accounts_rev ON accounts (rev);
CREATE TABLE IF NOT EXISTS rings (name TEXT PRIMARY KEY, size INTEGER, seq INTEGER);
CREATE TABLE IF NOT EXISTS ring_slots (name TEXT, slot INTEGER, t REAL,
    PRIMARY KEY (name, slot)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT, expires REAL);
CREATE INDEX IF NOT EXISTS cache_expires ON cache (expires);
{TALLIES};
{TALLIES_EXPIRES};
{EVENTS}
"""
SELECT_KEY = f"SELECT {', '.join(KEY_COLS)} FROM keys WHERE fp = ?"
SELECT_ACCOUNT = f"SELECT {', '.join(ACCOUNT_COLS)} FROM accounts WHERE name = ?"
SELECT_META = "SELECT month, hold_until, hold_key, seq, epoch FROM searchfuse_meta"
#: The meta row and a pacing log's size, position and next slot, in one query
#: (`SELECT_META`'s columns, then `SELECT_RING_SLOT`'s, NULL for a log not made yet).
SELECT_META_RING = (
    "SELECT m.month, m.hold_until, m.hold_key, m.seq, m.epoch, r.size, r.seq, s.t "
    "FROM searchfuse_meta m LEFT JOIN rings r ON r.name = ? LEFT JOIN ring_slots s "
    "ON s.name = r.name AND s.slot = r.seq % r.size"
)
SELECT_RING_SLOT = (
    "SELECT r.size, r.seq, s.t FROM rings r LEFT JOIN ring_slots s "
    "ON s.name = r.name AND s.slot = r.seq % r.size WHERE r.name = ?"
)


def upsert(table: str, pk: str, cols: tuple[str, ...]) -> str:
    # An update in place when the row exists (no delete and re-insert of the row
    # and its index entries, which INSERT OR REPLACE would do).
    names = (*cols, "rev")
    return (
        f"INSERT INTO {table} ({pk}, {', '.join(names)}) "
        f"VALUES ({', '.join('?' * (len(names) + 1))}) "
        f"ON CONFLICT ({pk}) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in names)
    )


UPSERT_KEY = upsert("keys", "fp", KEY_COLS)
CHARGE_KEY = (
    f"UPDATE keys SET {', '.join(f'{c} = ?' for c in CHARGED_KEY_FIELDS)}, rev = ? WHERE fp = ?"
)
CHARGE_ACCOUNT = (
    f"UPDATE accounts SET {', '.join(f'{c} = ?' for c in CHARGED_ACCOUNT_FIELDS)}, rev = ? "
    "WHERE name = ?"
)
#: `UPDATE ... SET` statements by table and changed columns (a search changes the same few).
UPDATE_SQL: dict[tuple[str, tuple[str, ...]], str] = {}
USAGE_COLS = ("key_usage", "key_limit", "search_usage")
COLUMNS = frozenset(KEY_COLS) | frozenset(ACCOUNT_FIELDS)


def same(a: Any, b: Any) -> bool:
    # 1 and 1.0 are equal but not the same column value (an int column stays int).
    return a == b and type(a) is type(b)


def diff(before: Any, record: Any) -> list[tuple[str, Any]]:
    """The columns (and new values) in which two records of one row differ."""
    old = before.__dict__
    out: list[tuple[str, Any]] = []
    for name, value in record.__dict__.items():
        was = old.get(name)
        if same(value, was):
            continue
        if name == "last_usage":
            new_usage, old_usage = value or KeyUsage(), was or KeyUsage()
            for col in USAGE_COLS:
                v = getattr(new_usage, col)
                if not same(v, getattr(old_usage, col)):
                    out.append((col, v))
        elif name in COLUMNS:
            out.append((name, value))
    return out


UPSERT_ACCOUNT = upsert("accounts", "name", ACCOUNT_COLS)


def write_key(conn: sqlite3.Connection, fp: str, ks: KeyState, rev: int) -> None:
    values = key_to_fields(ks)
    conn.execute(UPSERT_KEY, (fp, *(values[c] for c in KEY_COLS), rev))


def write_account(conn: sqlite3.Connection, name: str, acc: AccountUsage, rev: int) -> None:
    values = account_to_fields(acc)
    conn.execute(UPSERT_ACCOUNT, (name, *(values[c] for c in ACCOUNT_COLS), rev))


def write_changed(
    conn: sqlite3.Connection,
    table: str,
    pk: str,
    name: str,
    before: KeyState | AccountUsage,
    record: KeyState | AccountUsage,
    rev: int,
) -> None:
    """Update only the columns of an existing row that changed (and its `rev`)."""
    changed = diff(before, record)
    cols = tuple(c for c, _ in changed)
    sql = UPDATE_SQL.get((table, cols))
    if sql is None:
        sets = ", ".join(f"{c} = ?" for c in (*cols, "rev"))
        sql = f"UPDATE {table} SET {sets} WHERE {pk} = ?"
        if len(UPDATE_SQL) < 1000:
            UPDATE_SQL[(table, cols)] = sql
    conn.execute(sql, (*(v for _, v in changed), rev, name))


def log_events(conn: sqlite3.Connection, events: list[Event]) -> None:
    """Add `events` to the log, inside the transaction that made them; the oldest go."""
    rows = []
    for event in events:
        fields = event_to_fields(event)
        rows.append(tuple(fields.get(c) for c in EVENT_COLS))
    conn.executemany(INSERT_EVENT, rows)
    conn.execute("DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - ?", (MAX_EVENTS,))


def ident_of(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path` (`None`: nothing there)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return UNKNOWN
    return (info.st_dev, info.st_ino)


#: `ident_of` a path that cannot be looked at (permissions): taken as unchanged.
UNKNOWN = (-1, -1)


def rollback(conn: sqlite3.Connection) -> None:
    with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK")


def collect(bad: list[str], warn: Callable[[str], None] | None) -> Callable[[str], None]:
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
MAX_COUNTER = 2**62


def positive_int(value: Any, zero: bool = False) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and (value >= 0 if zero else value > 0)
        and value < MAX_COUNTER
    )


def meta_counters_bad(row: tuple[Any, ...]) -> bool:
    """Whether a `SELECT_META` row's seq or epoch is not a counter (edited by
    hand, or out of range): the next write transaction renumbers them."""
    return not (positive_int(row[3], zero=True) and positive_int(row[4], zero=True))


def import_json(
    conn: sqlite3.Connection, path: Path, key_order: Sequence[KeySlot] | None = None
) -> None:
    """Bring `quota.json` from the same folder into a new database, once.

    The JSON file is only read: it stays as it is, and is never written again.
    """
    source = path.parent / "quota.json"
    try:
        data = json.loads(source.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        log.warning("not importing %s into %s: %s", source.name, path.name, exc)
        return
    how = ""
    if is_positional(data):
        data, how = by_position(data, key_order)
        if data is None:
            log.warning(
                "not importing %s into %s: %s (%s is left as it is; cooldowns are "
                "relearned from Tavily's answers)",
                source.name,
                path.name,
                how,
                source.name,
            )
            return
    if not looks_like_state(data):
        log.warning("not importing %s: it is not searchfuse state", source.name)
        return
    state = state_from_json(data)
    for fp, ks in state.keys.items():
        write_key(conn, fp, ks, 1)
    for name, acc in state.accounts.items():
        write_account(conn, name, acc, 1)
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
        path.name,
    )


def parse_meta(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """`(month, hold_until, hold_key, seq, epoch)` of a `SELECT_META` row, each value
    checked (a bad one reads as none, or 0)."""
    seq = row[3] if positive_int(row[3], zero=True) else 0
    epoch = row[4] if positive_int(row[4], zero=True) else 0
    hold_until = optional_number(row[1], "hold_until")
    hold_key = optional_text(row[2], "hold_key")
    month = row[0] if isinstance(row[0], str) else ""
    return (month, hold_until, hold_key, seq, epoch)


class SqlLog:
    """The pacing logs' rows as a `SlotLog` (see `_pacing`), inside a transaction.

    `first` is a log's head already read with the meta row (one query for a grant)."""

    __slots__ = ("conn", "first")

    def __init__(self, conn: sqlite3.Connection, first: tuple[str, tuple[Any, ...]] | None = None):
        self.conn = conn
        self.first = first

    def head(self, name: str) -> tuple[int | None, int, float | None]:
        first, self.first = self.first, None
        if first is not None and first[0] == name:
            row: Any = first[1]
        else:
            row = self.conn.execute(SELECT_RING_SLOT, (name,)).fetchone()
        if row is None or not positive_int(row[0]) or not positive_int(row[1], zero=True):
            return None, 0, None
        return int(row[0]), int(row[1]), optional_number(row[2], f"pacing log {name}")

    def stored_times(self, name: str, most: int) -> Iterable[float | None]:
        where = f"pacing log {name}"
        rows = self.conn.execute(
            "SELECT t FROM ring_slots WHERE name = ? ORDER BY t DESC LIMIT ?", (name, most)
        )
        return [optional_number(t, where) for (t,) in rows]

    def replace(self, name: str, ring: Ring) -> None:
        self.conn.execute("DELETE FROM ring_slots WHERE name = ?", (name,))
        self.conn.executemany(
            "INSERT INTO ring_slots (name, slot, t) VALUES (?, ?, ?)",
            [(name, i, t) for i, t in enumerate(ring.slots) if t is not None],
        )
        self.conn.execute(
            "INSERT OR REPLACE INTO rings (name, size, seq) VALUES (?, ?, ?)",
            (name, ring.size, ring.seq),
        )

    def clamp(self, name: str, now: float) -> None:
        self.conn.execute("UPDATE ring_slots SET t = ? WHERE name = ? AND t > ?", (now, name, now))

    def put(self, name: str, slot: int, t: float, position: int, size: int) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO ring_slots (name, slot, t) VALUES (?, ?, ?)", (name, slot, t)
        )
        self.conn.execute("UPDATE rings SET seq = ? WHERE name = ?", (position, name))


def load_ring(conn: sqlite3.Connection, name: str, size: int) -> Ring:
    """Pacing log `name` as a ring of `size` slots, to look at (nothing is written)."""
    from searchfuse.router.state._trust import newest_ring

    row = conn.execute("SELECT size, seq FROM rings WHERE name = ?", (name,)).fetchone()
    if row is None or row[0] != size or not positive_int(row[1], zero=True):
        return newest_ring(name, SqlLog(conn).stored_times(name, size), size, float("inf"))
    ring = Ring(int(row[0]), int(row[1]))
    for slot, t in conn.execute("SELECT slot, t FROM ring_slots WHERE name = ?", (name,)):
        if positive_int(slot, zero=True) and slot < ring.size:
            ring.set(slot, optional_number(t, f"pacing log {name}"))
    return ring


class SqlMonth:
    """The database as a `MonthBook` (see `_month.start_month`), inside a transaction;
    `hold` is the meta row's, `epoch` the change log's next one."""

    def __init__(
        self, conn: sqlite3.Connection, hold: tuple[float | None, str | None], epoch: int
    ) -> None:
        self.conn, self.hold, self.epoch = conn, hold, epoch

    def lasting(self, since: float) -> Iterable[tuple[str, KeyState]]:
        rows = self.conn.execute(
            f"SELECT fp, {', '.join(KEY_COLS)} FROM keys "
            "WHERE cooldown_until > ? OR usage_blocked_until > ?",
            (since, since),
        )
        return [
            (fp, key_from_fields(dict(zip(KEY_COLS, rest, strict=True)), f"key {fp}"))
            for fp, *rest in rows
        ]

    def stored_hold(self) -> tuple[float | None, str | None]:
        return self.hold

    def empty(self, month: str) -> None:
        self.conn.execute("DELETE FROM keys")
        self.conn.execute("DELETE FROM accounts")
        self.conn.execute(
            "UPDATE searchfuse_meta SET month = ?, hold_until = NULL, hold_key = NULL, "
            "seq = 0, epoch = ?",
            (month, self.epoch),
        )
        self.hold = (None, None)

    def put_key(self, fp: str, ks: KeyState) -> None:
        write_key(self.conn, fp, ks, 0)

    def put_hold(self, until: float, key: str | None) -> None:
        self.conn.execute("UPDATE searchfuse_meta SET hold_until = ?, hold_key = ?", (until, key))
        self.hold = (until, key)
