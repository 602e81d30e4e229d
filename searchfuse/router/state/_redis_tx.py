"""What a Redis store's transaction works on: records `WATCH`ed and read when first
named, writes queued for `MULTI`; the primitives of the pacing log and of a
month's start (the decisions are written once above the backends)."""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from searchfuse.router.state._base import TxState
from searchfuse.router.state._budgets import Tally, period_end
from searchfuse.router.state._codec import tally_from_fields
from searchfuse.router.state._pacing import take_slot
from searchfuse.router.state._records import AccountUsage, KeyState
from searchfuse.router.state._ring import Ring
from searchfuse.router.state._trust import newest_ring
from searchfuse.router.state._values import (
    _warn,
    account_from_fields,
    key_from_fields,
    key_to_fields,
    optional_number,
    optional_text,
)

__all__ = [
    "BUMP",
    "RELEASE",
    "RedisMonth",
    "RedisTx",
    "count",
    "keep_ms",
    "put_fields",
    "stored_month",
]


# INCR the change counter and stamp every named record with the new revision,
# inside the transaction's MULTI, so readers of `changes` see whole updates.
BUMP = """
local rev = redis.call('INCR', KEYS[1])
for i = 1, #ARGV do
  redis.call('ZADD', KEYS[2], rev, ARGV[i])
end
return rev
"""

#: Delete a claim only if its owner is the one releasing it (it may have expired
#: and been taken by another process meanwhile).
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _encode(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    return str(value)


_MONTH = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])")
_COUNT = re.compile(r"[0-9]{1,18}")


def stored_month(value: Any) -> str:
    """The month stamped on the state, or `""` (a new month starts) when it is no month."""
    if isinstance(value, str) and _MONTH.fullmatch(value):
        return value
    if value:
        _warn(f"month {str(value)[:40]!r} is not a month (YYYY-MM); reset")
    return ""


def count(value: Any, name: str) -> int | None:
    """A stored counter (`epoch`, `seq`), or `None` when it holds no whole number."""
    if value is None or value == "":
        return 0
    if isinstance(value, str) and _COUNT.fullmatch(value):
        return int(value)
    _warn(f"{name} {str(value)[:40]!r} is not a whole number; reset")
    return None


def month_end(month: str) -> float:
    year, mon = (int(p) for p in month.split("-"))
    days = calendar.monthrange(year, mon)[1]
    return calendar.timegm((year, mon, days, 23, 59, 59, 0, 0, 0)) + 1.0


def keep_ms(month: str, now: float) -> int:
    # Last month's records mean nothing: let Redis collect them a day after it ends.
    return max(1000, math.ceil((month_end(month) - now + 86400) * 1000))


def put_fields(pipe: Any, key: str, fields: dict[str, Any], keep_ms: int) -> None:
    present = {n: _encode(v) for n, v in fields.items() if v is not None}
    absent = [n for n, v in fields.items() if v is None]
    if absent:
        pipe.hdel(key, *absent)
    if present:
        pipe.hset(key, mapping=present)
    pipe.pexpire(key, keep_ms)


class RedisTx(TxState):
    """A transaction: records are WATCHed and read when first named; writes wait for MULTI."""

    def __init__(self, store: Any, pipe: Any, month: str, hold: tuple[Any, Any]):
        super().__init__(month, hold[0], hold[1])
        self._store = store
        self._pipe = pipe
        self.pending: list[Callable[[Any], object]] = []
        self.touched_rings: set[str] = set()
        #: The transaction's time on the router's clock (expiry is counted from it).
        self.now = 0.0
        #: The window of the pacing decision being made (a log lives twice as long).
        self.window = 60.0

    def load_key(self, fp: str) -> KeyState | None:
        name = self._store.k(fp)
        self._pipe.watch(name)
        raw = self._pipe.hgetall(name)
        return key_from_fields(raw, f"key {fp}") if raw else None

    def load_account(self, name: str) -> AccountUsage | None:
        key = self._store.a(name)
        self._pipe.watch(key)
        raw = self._pipe.hgetall(key)
        return account_from_fields(raw, f"account {name}") if raw else None

    def load_tally(self, name: str) -> Tally | None:
        key = self._store.tally_key(name)
        self._pipe.watch(key)
        raw = self._pipe.hmget(key, "period", "used", "expires")
        if raw[0] is None and raw[1] is None:
            return None
        return tally_from_fields(raw[0], raw[1], f"budget {name}", _warn, raw[2])

    def set_tally(self, name: str, tally: Tally) -> None:
        super().set_tally(name, tally)
        key = self._store.tally_key(name)
        expires = tally.expires
        if expires is None and (end := period_end(tally.period)) is not None:
            expires = end + 86400  # a day after its period ends nobody reads it again
        fields = {"period": tally.period, "used": repr(tally.used)}

        def write(p: Any) -> None:
            p.hset(key, mapping={**fields, "expires": repr(expires) if expires else ""})
            if expires is not None:
                # Redis drops it when it expires, counted on the router's clock as
                # every expiry here (`State.forget_tallies` has nothing to do).
                p.pexpire(key, max(1000, math.ceil((expires - self.now) * 1000)))
            else:
                p.persist(key)

        self.pending.append(write)

    def forget_tallies(self, now: float) -> None:
        return None  # each tally's TTL does it

    def ring(self, name: str, size: int) -> Ring:
        """Pacing log `name` as a ring of `size` slots, to look at (nothing is written)."""
        size_now, position, _ = self.head(name)
        times = self._times(self._store.ring_key(name), name)
        if size_now != size:
            return newest_ring(name, times.values(), size, math.inf)
        ring = Ring(size, position)
        for slot, t in times.items():
            if int(slot[1:]) < size:
                ring.set(int(slot[1:]), t)
        return ring

    def take(self, name: str, limit: int, window: float, now: float) -> float:
        self.window = window
        return take_slot(self, name, limit, window, now)

    # -- the pacing log's primitives (a `SlotLog`, see `_pacing`) ---------------------

    def head(self, name: str) -> tuple[int | None, int, float | None]:
        key = self._store.ring_key(name)
        if name not in self.touched_rings:
            self._pipe.watch(key)
            self.touched_rings.add(name)
        size, seq = self._pipe.hmget(key, "size", "seq")
        try:
            stored, position = int(size), int(seq)
        except (TypeError, ValueError):
            return None, 0, None
        if stored < 1 or position < 0:
            return None, 0, None
        oldest = self._pipe.hget(key, f"s{position % stored}")
        return stored, position, optional_number(oldest, f"pacing log {name}")

    def _times(self, key: str, name: str) -> dict[str, float | None]:
        """The log's slot fields and their times (only the fields really stored)."""
        where = f"pacing log {name}"
        return {
            field: optional_number(value, where)
            for field, value in self._pipe.hgetall(key).items()
            if field[:1] == "s" and field[1:].isdigit()
        }

    def stored_times(self, name: str, most: int) -> Iterable[float | None]:
        return self._times(self._store.ring_key(name), name).values()

    def replace(self, name: str, ring: Ring) -> None:
        key = self._store.ring_key(name)
        fields = {f"s{i}": repr(t) for i, t in enumerate(ring.slots) if t is not None}
        fields.update(size=str(ring.size), seq=str(ring.seq))
        # Kept as a grant keeps it, even when no slot is taken after (a paced grant).
        ttl = max(1, math.ceil(self.window * 2 * 1000))
        self.pending.append(
            lambda p: (p.delete(key), p.hset(key, mapping=fields), p.pexpire(key, ttl))
        )

    def clamp(self, name: str, now: float) -> None:
        key = self._store.ring_key(name)
        late = {f: repr(now) for f, t in self._times(key, name).items() if t and t > now}
        if late:
            self.pending.append(lambda p: p.hset(key, mapping=late))

    def put(self, name: str, slot: int, t: float, position: int, size: int) -> None:
        key = self._store.ring_key(name)
        ttl = max(1, math.ceil(self.window * 2 * 1000))
        fields = {f"s{slot}": repr(t), "seq": str(position), "size": str(size)}

        def write(p: Any) -> None:
            p.hset(key, mapping=fields)
            p.pexpire(key, ttl)

        self.pending.append(write)


class RedisMonth:
    """The namespace as a `MonthBook` (see `_month.start_month`), inside a `WATCH`:
    reads go to the server at once, writes wait for `apply` inside `MULTI`."""

    def __init__(self, store: Any, pipe: Any, now: float) -> None:
        self.store, self.pipe, self.now = store, pipe, now
        self.names: list[str] = pipe.zrange(store.revs_key, 0, -1)
        self.writes: list[Callable[[Any], object]] = []
        self.month = ""

    def lasting(self, since: float) -> Iterable[tuple[str, KeyState]]:
        ns = self.store.ns
        for name in self.names:
            if name.startswith("k:"):
                self.pipe.watch(f"{ns}:{name}")
                raw = self.pipe.hgetall(f"{ns}:{name}")
                yield name[2:], key_from_fields(raw, name)

    def stored_hold(self) -> tuple[float | None, str | None]:
        hold = self.pipe.hmget(self.store.hold_key, "until", "key")
        return optional_number(hold[0], "hold_until"), optional_text(hold[1], "hold_key")

    def empty(self, month: str) -> None:
        store, names = self.store, list(self.names)
        self.month = month

        def write(p: Any) -> None:
            for name in names:
                p.delete(f"{store.ns}:{name}")
            p.delete(store.revs_key, store.seq_key, store.hold_key)
            p.set(store.month_key, month)
            p.incr(store.epoch_key)

        self.writes.append(write)

    def put_key(self, fp: str, ks: KeyState) -> None:
        key, fields = self.store.k(fp), key_to_fields(ks)
        keep = keep_ms(self.month, self.now)
        revs = self.store.revs_key

        def write(p: Any) -> None:
            put_fields(p, key, fields, keep)
            p.zadd(revs, {f"k:{fp}": 0})

        self.writes.append(write)

    def put_hold(self, until: float, key: str | None) -> None:
        hold, ttl = self.store.hold_key, max(1000, math.ceil((until - self.now + 60) * 1000))
        fields = {"until": repr(until), "key": key or ""}
        self.writes.append(lambda p: (p.hset(hold, mapping=fields), p.pexpire(hold, ttl)))

    def apply(self, pipe: Any) -> None:
        for write in self.writes:
            write(pipe)
