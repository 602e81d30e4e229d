"""The SQLite store's shared cache (entries with their expiry, and the claims that
let one process search for an entry while the others wait for it), and what
it reads without a write lock (budget tallies, a pacing log)."""

from __future__ import annotations

import sqlite3

from searchfuse.router.state._budgets import Tally
from searchfuse.router.state._codec import tally_from_fields
from searchfuse.router.state._sqlite_file import Database
from searchfuse.router.state._values import _warn as _default_warn
from searchfuse.router.state._values import optional_number

__all__ = ["SqlCache"]


class SqlCache(Database):
    """The shared cache's table and claims (a part of `SqliteStore`)."""

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

    def pacing_log(self, name: str) -> list[float] | None:
        try:
            rows = self._conn().execute("SELECT t FROM ring_slots WHERE name = ?", (name,))
            times = [t for (t,) in rows]
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        return sorted(t for t in times if isinstance(t, int | float) and not isinstance(t, bool))

    def cache_claim(self, key: str, owner: str, until: float) -> bool:
        import time

        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO claims (key, owner, until) VALUES (?, ?, ?) ON CONFLICT (key) "
                "DO UPDATE SET owner = excluded.owner, until = excluded.until "
                "WHERE claims.until <= ? OR claims.owner = excluded.owner",
                (key, owner, until, time.time()),
            )
            row = conn.execute("SELECT owner FROM claims WHERE key = ?", (key,)).fetchone()
        return row is not None and row[0] == owner

    def cache_release(self, key: str, owner: str) -> None:
        with self._transaction() as conn:
            conn.execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, owner))
