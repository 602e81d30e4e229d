"""What an SQLite store's transaction works on: records loaded from rows when
first named (`SqlTx`), or the rows a grant remembers (`Known`)."""

from __future__ import annotations

import sqlite3
from typing import Any

from searchfuse.router.state._base import TxState
from searchfuse.router.state._budgets import Tally
from searchfuse.router.state._codec import tally_from_fields
from searchfuse.router.state._pacing import take_slot
from searchfuse.router.state._records import AccountUsage, KeyState, State, copied
from searchfuse.router.state._ring import Ring
from searchfuse.router.state._sqlite_file import Database
from searchfuse.router.state._sqlite_rows import SELECT_ACCOUNT, SELECT_KEY, SqlLog, load_ring
from searchfuse.router.state._values import _warn as _default_warn

__all__ = ["Known", "SqlTx"]


class SqlTx(TxState):
    """A transaction's state: rows are loaded when first named.

    `current` holds records known to equal their rows (nothing was committed
    since this process last read or wrote them): those are not read again.
    """

    def __init__(
        self,
        store: Database,
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
        row = self._conn.execute(SELECT_KEY, (fp,)).fetchone()
        if row is None:
            return None
        return self._store.key_record(
            fp, row, self._store.warner(lambda: self.rewrite.add(f"k:{fp}"))
        )

    def load_account(self, name: str) -> AccountUsage | None:
        known = self._current.get(("a", name))
        if known is not None:
            return copied(known)  # type: ignore[no-any-return]
        row = self._conn.execute(SELECT_ACCOUNT, (name,)).fetchone()
        if row is None:
            return None
        return self._store.account_record(
            name, row, self._store.warner(lambda: self.rewrite.add(f"a:{name}"))
        )

    def ring(self, name: str, size: int) -> Ring:
        return load_ring(self._conn, name, size)

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
        return take_slot(SqlLog(self._conn), name, limit, window, now)


class Known(State):
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
        log, self._ring = SqlLog(self._conn, self._ring), None
        return take_slot(log, name, limit, window, now)
