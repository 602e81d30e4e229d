"""State in an SQLite database: the embedded default (`state/searchfuse.db`).

One row per key and per account, so a search reads and writes only the rows
it touches; WAL mode, so readers never wait for the writer; every
read-modify-write is one `BEGIN IMMEDIATE` transaction, so the 429 hold,
a key's park and the pacing decision are atomic across processes. Lock waits
are bounded by `busy_timeout` (default 5 s), then
[`StoreUnavailable`][searchfuse.errors.StoreUnavailable]. Columns are typed and every value is
validated on read: a bad one is reset with a warning, never a crash.

The file and its connections are `_sqlite_file`, the tables and rows
`_sqlite_rows`; the decisions (the month's start, the pacing log, the grant)
are written once above the backends and run here on the rows.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from searchfuse.router.state._base import Changes, Store
from searchfuse.router.state._budgets import Line
from searchfuse.router.state._events import Event, event_from_fields
from searchfuse.router.state._grant import FRESH, FRESH_CLEAN, Charge, Grant, acquire, search_log
from searchfuse.router.state._month import Months, month_bounds, month_of, start_month
from searchfuse.router.state._paths import not_state
from searchfuse.router.state._records import (
    CHARGED_ACCOUNT_FIELDS,
    CHARGED_KEY_FIELDS,
    AccountUsage,
    KeyState,
    State,
    copied,
)
from searchfuse.router.state._skill import KeySlot
from searchfuse.router.state._sqlite_cache import SqlCache
from searchfuse.router.state._sqlite_file import CHECKPOINT_EVERY
from searchfuse.router.state._sqlite_rows import (
    ACCOUNT_COLS,
    CHARGE_ACCOUNT,
    CHARGE_KEY,
    EVENT_COLS,
    KEY_COLS,
    SCHEMA_VERSION,
    SELECT_META,
    SELECT_META_RING,
    SqlMonth,
    log_events,
    meta_counters_bad,
    parse_meta,
    positive_int,
    rollback,
    write_account,
    write_changed,
    write_key,
)
from searchfuse.router.state._sqlite_tx import Known, SqlTx
from searchfuse.router.state._values import _warn as _default_warn
from searchfuse.router.state._values import optional_number, optional_text

__all__ = ["CHECKPOINT_EVERY", "SCHEMA_VERSION", "SqliteStore"]

T = TypeVar("T")

#: Own commits remembered to answer `changes` without reading rows.
_MAX_LOG = 64


class SqliteStore(SqlCache, Store):
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
        # What this process knows to be in the database: as of token `_known`
        # (epoch, seq), the records in `_current` equal their rows, and `_log`
        # holds what each commit after `_log_base` changed (this process's own
        # commits, one after another). A transaction that finds another token
        # forgets it all. It saves a search rereading the rows it just wrote.
        self._sync_lock = threading.Lock()
        self._months = Months()
        self._forget()
        super().__init__(path, busy_timeout=busy_timeout, key_order=key_order)

    def __repr__(self) -> str:
        return f"SqliteStore({self.path.name!r})"

    def _forget(self) -> None:
        with self._sync_lock:
            self._known: tuple[Any, Any] | None = None
            self._current: dict[tuple[str, str], Any] = {}
            self._log: list[tuple[int, dict[str, KeyState], dict[str, AccountUsage]]] = []
            self._log_base: tuple[Any, Any] | None = None
            #: The meta row last parsed, the month it holds (its bounds) and what
            #: `_meta` made of it: the same row in that month is not parsed again.
            self._meta_seen: tuple[Any, ...] | None = None

    def _meta(
        self, conn: sqlite3.Connection, now: float, row: tuple[Any, ...] | None = None
    ) -> tuple[Any, ...]:
        """`(month, hold_until, hold_key, seq, epoch)`, from `row` if it was read
        already (`SELECT_META` columns first); a new month resets key state."""
        if row is None:
            row = conn.execute(SELECT_META).fetchone()
        if row is None:
            raise not_state(self.path, "its searchfuse_meta row is missing")
        raw = row[:5]
        seen = self._meta_seen
        if seen is not None and seen[0] == raw and seen[1] <= now < seen[2]:
            # Nothing was written since (the change counter is part of the row)
            # and `now` is in the month the row is of: decided as before.
            return seen[3]  # type: ignore[no-any-return]
        meta = parse_meta(row)
        month = self._months.rollover(meta[0], now)
        if month is not None:
            # Usage resets; running cooldowns and a running hold are kept.
            book = SqlMonth(conn, (meta[1], meta[2]), meta[4] + 1)
            start_month(book, month, now)
            return (month, *book.hold, 0, book.epoch)
        if meta_counters_bad(row):
            _default_warn(
                f"{self.path.name}: searchfuse_meta seq/epoch out of range "
                f"({row[3]!r}, {row[4]!r}); renumbered"
            )
            epoch = meta[4] + 1
            conn.execute("UPDATE keys SET rev = 0")
            conn.execute("UPDATE accounts SET rev = 0")
            conn.execute("UPDATE searchfuse_meta SET seq = 0, epoch = ?", (epoch,))
            return (meta[0], meta[1], meta[2], 0, epoch)
        start, end, current = month_bounds(now)
        if current == meta[0]:
            self._meta_seen = (raw, start, end, meta)
        return meta

    # -- the Store interface --------------------------------------------------------------

    def update(self, now: float, change: Callable[[State], T]) -> T:
        # The transaction is spelled out (not `_transaction()`): a context
        # manager costs a write a few microseconds.
        conn = self._begin()
        try:
            meta = self._meta(conn, now)
            start = (meta[4], meta[3])
            current = self._known_at(start)
            tx = SqlTx(self, conn, meta, current)
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
                        write_key(conn, fp, ks, rev)
                    else:
                        write_changed(conn, "keys", "fp", fp, before, ks, rev)
                for name, acc in accounts.items():
                    before_acc = tx.seen_accounts.get(name)
                    if before_acc is None or f"a:{name}" in tx.rewrite:
                        write_account(conn, name, acc, rev)
                    else:
                        write_changed(conn, "accounts", "name", name, before_acc, acc, rev)
                conn.execute(
                    "UPDATE searchfuse_meta SET hold_until = ?, hold_key = ?, seq = ?",
                    (tx.hold_until, tx.hold_key, rev),
                )
            made = tx.made_events(now, keys)
            if made:
                log_events(conn, made)
        except sqlite3.Error as exc:
            rollback(conn)
            raise self._error(exc) from None
        except BaseException:
            rollback(conn)
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

        def acquired(state: State) -> Grant:
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
            return self.update(now, acquired)
        conn = self._begin()
        try:
            log = search_log(fp)
            row = conn.execute(SELECT_META_RING, (log,)).fetchone()
            meta = self._meta(conn, now, row)
            start = (meta[4], meta[3])
            current = self._known_at(start)
            known_key = current.get(("k", fp))
            known_account = current.get(("a", charge.account_id))
            if known_key is None or known_account is None:
                rollback(conn)
                return self.update(now, acquired)
            state = Known(
                conn,
                meta,
                {fp: copied(known_key)},
                {charge.account_id: copied(known_account)},
                # A log not made yet (or a broken row) is looked at again by `_take`.
                None if row is None or row[5] is None else (log, row[5:]),
            )
            grant = acquired(state)
            ks, acc = state.keys[fp], state.accounts[charge.account_id]
            written = grant.verdict == "ok"
            if written:
                rev = meta[3] + 1
                # A grant changes only what a charge does: no comparing of fields.
                conn.execute(CHARGE_KEY, (*(getattr(ks, c) for c in CHARGED_KEY_FIELDS), rev, fp))
                conn.execute(
                    CHARGE_ACCOUNT,
                    (*(getattr(acc, c) for c in CHARGED_ACCOUNT_FIELDS), rev, charge.account_id),
                )
                conn.execute("UPDATE searchfuse_meta SET seq = ?", (rev,))
        except sqlite3.Error as exc:
            rollback(conn)
            raise self._error(exc) from None
        except BaseException:
            rollback(conn)
            raise
        self._commit(conn)
        if not written:
            return grant
        seen = self._meta_seen
        if seen is not None and seen[3] is meta:
            # The row as this commit left it: the next grant need not parse it.
            raw = seen[0]
            self._meta_seen = ((*raw[:3], rev, raw[4]), seen[1], seen[2], (*meta[:3], rev, meta[4]))
        with self._sync_lock:
            if self._known == start:
                self._wrote(start, rev, {fp: ks}, {charge.account_id: acc})
        return FRESH_CLEAN if grant.clean else FRESH

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

    def events(self, limit: int = 50) -> list[Event]:
        if limit <= 0:
            return []
        try:
            rows = self._conn().execute(
                f"SELECT {', '.join(EVENT_COLS)} FROM events ORDER BY id DESC LIMIT ?", (limit,)
            )
            found = [event_from_fields(dict(zip(EVENT_COLS, row, strict=True))) for row in rows]
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        return [e for e in found if e is not None]

    def changes(self, now: float, since: Any) -> Changes:
        conn = self._conn()
        try:
            row = conn.execute(SELECT_META).fetchone()
            if row is None:
                raise not_state(self.path, "its searchfuse_meta row is missing")
            if self._months.rollover(
                row[0] if isinstance(row[0], str) else "", now
            ) is not None or meta_counters_bad(row):
                # A new month: roll it over once for every process (usage resets,
                # running cooldowns stay), then read as usual. Counters out of
                # range are renumbered the same way.
                with self._transaction() as wconn:
                    self._meta(wconn, now)
                row = conn.execute(SELECT_META).fetchone()
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
                    f"SELECT fp, {', '.join(KEY_COLS)} FROM keys WHERE rev > ?", (after,)
                )
            }
            accounts = {
                row[0]: self.account_record(row[0], row[1:])
                for row in conn.execute(
                    f"SELECT name, {', '.join(ACCOUNT_COLS)} FROM accounts WHERE rev > ?",
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
            epoch = row[0] if row and positive_int(row[0], zero=True) else 0
            start_month(SqlMonth(conn, (None, None), epoch + 1), month_of(now), now, keep=False)
