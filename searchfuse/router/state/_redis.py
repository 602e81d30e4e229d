"""State in Redis: shared by every process on every host that names the same server.

`state="redis://host:6379/0"` (also `rediss://` and `unix:///path.sock`),
with `pip install ".[redis]"`. Each key and account is one hash, so
a search touches only its own records. Every read-modify-write is one
optimistic transaction (`WATCH` the records read, then `MULTI`/`EXEC`;
a conflicting write from another process makes it start over), so the 429
hold, a key's park and the pacing decision are atomic across hosts. Time
decisions use the router's clock, never the server's `TIME`; Redis expiry
only collects records that no longer matter (pacing logs past their window,
a finished hold, last month's keys, expired cache entries).

An unreachable server raises [`StoreUnavailable`][searchfuse.errors.StoreUnavailable] naming it
without its password; searchfuse never falls back to local state on its own.
"""

from __future__ import annotations

import calendar
import json
import math
import re
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

from searchfuse.errors import ConfigError, StoreUnavailable
from searchfuse.router.state._base import Changes, Store, TxState
from searchfuse.router.state._budgets import Tally, live_tallies, period_end
from searchfuse.router.state._codec import tally_from_fields
from searchfuse.router.state._events import MAX_EVENTS, Event, event_from_fields, event_to_fields
from searchfuse.router.state._month import month_of, rolled_key, rollover
from searchfuse.router.state._records import AccountUsage, KeyState, State
from searchfuse.router.state._redis_types import reset_wrong_types, wrong_type
from searchfuse.router.state._ring import Ring
from searchfuse.router.state._trust import future_slot, newest_ring
from searchfuse.router.state._values import (
    _warn,
    account_from_fields,
    account_to_fields,
    key_from_fields,
    key_to_fields,
    optional_number,
    optional_text,
)

__all__ = ["RedisStore", "redacted_url"]

T = TypeVar("T")
R = TypeVar("R")

#: Attempts of one optimistic transaction before giving up (each conflict means
#: another process changed a record this one read).
MAX_ATTEMPTS = 200
#: Bound on connecting and on every command.
SOCKET_TIMEOUT = 5.0

# INCR the change counter and stamp every named record with the new revision,
# inside the transaction's MULTI, so readers of `changes` see whole updates.
_BUMP = """
local rev = redis.call('INCR', KEYS[1])
for i = 1, #ARGV do
  redis.call('ZADD', KEYS[2], rev, ARGV[i])
end
return rev
"""


def redacted_url(url: str) -> str:
    """`url` without its password (and user), for messages and `repr`.

    A URL that cannot be parsed (a port out of range or not a number, an
    unclosed `[` of an IPv6 address) is a ConfigError naming the setting,
    showing the URL without what came before its last `@`."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        scheme, sep, rest = url.partition("://")
        shown = scheme + sep + rest[rest.rfind("@") + 1 :]
        raise ConfigError(
            "state",
            None,
            f"{shown!r} is not a usable Redis URL ({exc})",
            "write redis://[user:password@]host:port/db with a port from 1 to 65535, "
            "for example redis://127.0.0.1:6379/0",
        ) from None
    host = parts.hostname or ""
    if port:
        host = f"{host}:{port}"
    if parts.scheme == "unix":
        shown = f"unix://{parts.path}"
    else:
        shown = urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
    _check_database(parts, shown)
    return shown


def _check_database(parts: urllib.parse.SplitResult, shown: str) -> None:
    """A database the URL names (`/3`, `?db=3`) must be a whole number: the Redis
    client reads `redis://host/zero` as database 0 without a word, and another
    fleet's state may live there."""
    named = urllib.parse.parse_qs(parts.query).get("db", [])
    if parts.scheme != "unix" and parts.path.strip("/"):
        named.insert(0, parts.path.strip("/"))
    for db in named:
        if not (db.isascii() and db.isdigit()):
            raise ConfigError(
                "state",
                None,
                f"{shown!r} names the Redis database {db[:40]!r}, which is not a number",
                "write the database as a number, for example redis://127.0.0.1:6379/0",
            )


def _encode(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    return str(value)


_MONTH = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])")
_COUNT = re.compile(r"[0-9]{1,18}")


def _glob(text: str) -> str:
    """`text` as a Redis glob pattern matching only itself."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def _stored_month(value: Any) -> str:
    """The month stamped on the state, or `""` (a new month starts) when it is no month."""
    if isinstance(value, str) and _MONTH.fullmatch(value):
        return value
    if value:
        _warn(f"month {str(value)[:40]!r} is not a month (YYYY-MM); reset")
    return ""


def _count(value: Any, name: str) -> int | None:
    """A stored counter (`epoch`, `seq`), or `None` when it holds no whole number."""
    if value is None or value == "":
        return 0
    if isinstance(value, str) and _COUNT.fullmatch(value):
        return int(value)
    _warn(f"{name} {str(value)[:40]!r} is not a whole number; reset")
    return None


def _month_end(month: str) -> float:
    year, mon = (int(p) for p in month.split("-"))
    days = calendar.monthrange(year, mon)[1]
    return calendar.timegm((year, mon, days, 23, 59, 59, 0, 0, 0)) + 1.0


class _Tx(TxState):
    """A transaction: records are WATCHed and read when first named; writes wait for MULTI."""

    def __init__(self, store: RedisStore, pipe: Any, month: str, hold: tuple[Any, Any]):
        super().__init__(month, hold[0], hold[1])
        self._store = store
        self._pipe = pipe
        self.pending: list[Callable[[Any], object]] = []
        self.touched_rings: set[str] = set()
        #: The transaction's time on the router's clock (expiry is counted from it).
        self.now = 0.0

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

    def _ring(self, name: str) -> tuple[str, int | None, int]:
        key = self._store.ring_key(name)
        if name not in self.touched_rings:
            self._pipe.watch(key)
            self.touched_rings.add(name)
        size, seq = self._pipe.hmget(key, "size", "seq")
        try:
            stored, position = int(size), int(seq)
        except (TypeError, ValueError):
            return key, None, 0
        if stored < 1 or position < 0:
            return key, None, 0
        return key, stored, position

    def _times(self, key: str, name: str) -> dict[str, float | None]:
        """The log's slot fields and their times (only the fields really stored)."""
        where = f"pacing log {name}"
        return {
            field: optional_number(value, where)
            for field, value in self._pipe.hgetall(key).items()
            if field[:1] == "s" and field[1:].isdigit()
        }

    def ring(self, name: str, size: int) -> Ring:
        return self._sized(name, size, math.inf)

    def _sized(self, name: str, size: int, now: float) -> Ring:
        key, stored, seq = self._ring(name)
        times = self._times(key, name) if stored else {}
        if stored == size:
            ring = Ring(size, seq)
            for field, t in times.items():
                if int(field[1:]) < size:
                    ring.set(int(field[1:]), t)
        else:
            # From the times really stored, never a loop over the stored size.
            ring = newest_ring(name, times.values(), size, now)
            fields = {f"s{i}": repr(t) for i, t in enumerate(ring.slots) if t is not None}
            fields.update(size=str(size), seq=str(ring.seq))
            self.pending.append(lambda p: (p.delete(key), p.hset(key, mapping=fields)))
        self.rings[name] = ring
        return ring

    def take(self, name: str, limit: int, window: float, now: float) -> float:
        key, stored, seq = self._ring(name)
        if stored != limit:
            resized = self._sized(name, limit, now)  # its rewrite is queued for MULTI
            seq = resized.seq
            oldest = resized.get(seq % limit)
        else:
            oldest = optional_number(self._pipe.hget(key, f"s{seq % limit}"), f"pacing log {name}")
            if future_slot(name, oldest, now):
                # Not believed past now, here and in every other slot of the log.
                late = {f: repr(now) for f, t in self._times(key, name).items() if t and t > now}
                self.pending.append(lambda p: p.hset(key, mapping=late))
                oldest = now
        slot = seq % limit
        if oldest is not None and oldest + window > now:
            return oldest + window - now
        ttl = max(1, math.ceil(window * 2 * 1000))

        def write(p: Any) -> None:
            p.hset(key, mapping={f"s{slot}": repr(now), "seq": str(seq + 1), "size": str(limit)})
            p.pexpire(key, ttl)

        self.pending.append(write)
        return 0.0


class RedisStore(Store):
    """Router state in Redis, shared by every process on every host using the same URL.

    Args:
        url: `redis://[:password@]host:port/db`, `rediss://...` or
            `unix:///path/to/redis.sock[?db=0]`.
        namespace: prefix of every Redis key (several routers with different
            keys may share a server under different namespaces).
        client: an existing `redis.Redis` to use instead of `url`.
    """

    blocking = True

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        namespace: str = "searchfuse",
        client: Any = None,
    ) -> None:
        try:
            import redis
        except ImportError:
            raise ConfigError(
                redacted_url(url),
                None,
                "Redis state needs the redis client, which is not installed",
                'install the "redis" extra (pip install ".[redis]" in a checkout of searchfuse)',
            ) from None
        self._redis = redis
        self.url = redacted_url(url)
        self.ns = namespace
        if client is None:
            try:
                client = redis.Redis.from_url(
                    url,
                    decode_responses=True,
                    socket_timeout=SOCKET_TIMEOUT,
                    socket_connect_timeout=SOCKET_TIMEOUT,
                )
            except ValueError as exc:
                raise ConfigError(
                    self.url, None, f"is not a Redis URL ({exc})", "write redis://host:6379/0"
                ) from None
        self.client = client
        self._bump = client.register_script(_BUMP)
        self._call(client.ping)

    def __repr__(self) -> str:
        return f"RedisStore({self.url!r}, namespace={self.ns!r})"

    # -- names -----------------------------------------------------------------------------

    def k(self, fp: str) -> str:
        return f"{self.ns}:k:{fp}"

    def a(self, name: str) -> str:
        return f"{self.ns}:a:{name}"

    def ring_key(self, name: str) -> str:
        return f"{self.ns}:ring:{name}"

    def tally_key(self, name: str) -> str:
        return f"{self.ns}:t:{name}"

    @property
    def _month(self) -> str:
        return f"{self.ns}:month"

    @property
    def _hold(self) -> str:
        return f"{self.ns}:hold"

    @property
    def _seq(self) -> str:
        return f"{self.ns}:seq"

    @property
    def _epoch(self) -> str:
        return f"{self.ns}:epoch"

    @property
    def _events(self) -> str:
        return f"{self.ns}:events"

    @property
    def _revs(self) -> str:
        return f"{self.ns}:revs"

    def _cache(self, key: str) -> str:
        return f"{self.ns}:c:{key}"

    @property
    def _cache_index(self) -> str:
        return f"{self.ns}:cache"

    # -- errors ------------------------------------------------------------------------------

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(
            self.url,
            f"cannot be reached ({type(exc).__name__})",
            "Start Redis or fix the URL; searchfuse does not fall back to local state on "
            "its own (use state=None or a file path for that)",
        )

    def _call(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        for attempt in range(2):
            try:
                return fn(*args, **kwargs)
            except self._redis.WatchError:
                raise
            except (self._redis.ConnectionError, self._redis.TimeoutError) as exc:
                raise self._unavailable(exc) from None
            except self._redis.ResponseError as exc:
                # A key of ours holding another type: reset it (named in the log), once.
                if attempt or not wrong_type(exc) or not self._reset_wrong_types():
                    raise self._answered(exc) from None
            except self._redis.RedisError as exc:
                raise self._answered(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _reset_wrong_types(self) -> list[str]:
        try:
            return reset_wrong_types(self.client, self.ns)
        except (self._redis.ConnectionError, self._redis.TimeoutError) as exc:
            raise self._unavailable(exc) from None
        except self._redis.RedisError as exc:
            raise self._answered(exc) from None

    def _answered(self, exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(
            self.url,
            f"answered an error ({type(exc).__name__}: {str(exc)[:120]})",
            "check the server",
        )

    # -- transactions ---------------------------------------------------------------------

    def update(self, now: float, change: Callable[[State], T]) -> T:
        result: T = self._call(self._update, now, change)
        return result

    def _update(self, now: float, change: Callable[[State], T]) -> T:
        with self.client.pipeline() as pipe:
            for _ in range(MAX_ATTEMPTS):
                try:
                    pipe.watch(self._month, self._hold)
                    stored = _stored_month(pipe.get(self._month))
                    target = rollover(stored, now)
                    if target is not None:
                        pipe.unwatch()
                        self._roll(target, now)
                        continue
                    month = stored
                    hold = pipe.hmget(self._hold, "until", "key")
                    held = (
                        optional_number(hold[0], "hold_until"),
                        optional_text(hold[1], "hold_key"),
                    )
                    tx = _Tx(self, pipe, month, held)
                    tx.now = now
                    result = change(tx)
                    keys = tx.changed_keys()
                    accounts = tx.changed_accounts()
                    made = tx.made_events(now, keys)
                    if not (keys or accounts or tx.hold_changed() or tx.pending or made):
                        pipe.unwatch()
                        return result
                    pipe.multi()
                    self._write(pipe, tx, keys, accounts, now, month)
                    if made:
                        # In the same MULTI: the log shows what the transaction wrote.
                        encoded = [json.dumps(event_to_fields(e)) for e in made]
                        pipe.lpush(self._events, *encoded)
                        pipe.ltrim(self._events, 0, MAX_EVENTS - 1)
                    pipe.execute()
                    return result
                except self._redis.WatchError:
                    continue
        raise StoreUnavailable(
            self.url,
            f"a transaction met {MAX_ATTEMPTS} conflicting writes in a row",
            "too many processes are changing the same records; retry shortly",
        )

    def _write(
        self,
        pipe: Any,
        tx: _Tx,
        keys: dict[str, KeyState],
        accounts: dict[str, AccountUsage],
        now: float,
        month: str,
    ) -> None:
        keep_ms = self._keep_ms(month, now)
        names = []
        for fp, ks in keys.items():
            self._put(pipe, self.k(fp), key_to_fields(ks), keep_ms)
            names.append(f"k:{fp}")
        for name, acc in accounts.items():
            self._put(pipe, self.a(name), account_to_fields(acc), keep_ms)
            names.append(f"a:{name}")
        if tx.hold_changed():
            if tx.hold_until is None:
                pipe.delete(self._hold)
            else:
                pipe.hset(
                    self._hold, mapping={"until": repr(tx.hold_until), "key": tx.hold_key or ""}
                )
                pipe.pexpire(self._hold, max(1000, math.ceil((tx.hold_until - now + 60) * 1000)))
        for op in tx.pending:
            op(pipe)
        if names or tx.hold_changed():
            self._bump(keys=[self._seq, self._revs], args=names, client=pipe)

    @staticmethod
    def _keep_ms(month: str, now: float) -> int:
        # Last month's records mean nothing: let Redis collect them a day after it ends.
        return max(1000, math.ceil((_month_end(month) - now + 86400) * 1000))

    @staticmethod
    def _put(pipe: Any, key: str, fields: dict[str, Any], keep_ms: int) -> None:
        present = {n: _encode(v) for n, v in fields.items() if v is not None}
        absent = [n for n, v in fields.items() if v is None]
        if absent:
            pipe.hdel(key, *absent)
        if present:
            pipe.hset(key, mapping=present)
        pipe.pexpire(key, keep_ms)

    def _roll(self, month: str, now: float, *, everything: bool = False) -> None:
        """Start `month`: usage resets; running cooldowns and a running hold are kept
        (`everything`: a cleared store keeps nothing). Pacing logs always stay."""
        with self.client.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(self._month, self._revs, self._hold)
                    stored = _stored_month(pipe.get(self._month))
                    if not everything and rollover(stored, now) is None:
                        pipe.unwatch()
                        return
                    names = pipe.zrange(self._revs, 0, -1)
                    kept: dict[str, KeyState] = {}
                    if not everything:
                        for name in names:
                            if name.startswith("k:"):
                                pipe.watch(f"{self.ns}:{name}")
                                raw = pipe.hgetall(f"{self.ns}:{name}")
                                survivor = rolled_key(key_from_fields(raw, name), now)
                                if survivor is not None:
                                    kept[name[2:]] = survivor
                    hold = pipe.hmget(self._hold, "until", "key")
                    hold_until = optional_number(hold[0], "hold_until")
                    held = not everything and hold_until is not None and hold_until > now
                    pipe.multi()
                    for name in names:
                        pipe.delete(f"{self.ns}:{name}")
                    pipe.delete(self._revs, self._seq)
                    if not held:
                        pipe.delete(self._hold)
                    keep_ms = self._keep_ms(month, now)
                    for fp, ks in kept.items():
                        self._put(pipe, self.k(fp), key_to_fields(ks), keep_ms)
                        pipe.zadd(self._revs, {f"k:{fp}": 0})
                    pipe.set(self._month, month)
                    pipe.incr(self._epoch)
                    pipe.execute()
                    return
                except self._redis.WatchError:
                    continue

    # -- reads ----------------------------------------------------------------------------------

    def changes(self, now: float, since: Any) -> Changes:
        return self._call(self._changes, now, since)

    def _changes(self, now: float, since: Any) -> Changes:
        with self.client.pipeline(transaction=False) as pipe:
            pipe.get(self._month).get(self._epoch).get(self._seq).hmget(self._hold, "until", "key")
            stored_month, epoch, seq, hold = pipe.execute()
        stored_month = _stored_month(stored_month)
        target = rollover(stored_month, now)
        if target is not None:
            # A new month: roll it over once for every process, then read as usual.
            self._roll(target, now)
            return self._changes(now, since)
        month = stored_month
        epoch_n, seq_n = _count(epoch, "epoch"), _count(seq, "seq")
        if epoch_n is None or seq_n is None:
            # Counters that hold no number: start a new epoch from 0, so every
            # reader reads everything again, and writes can count again.
            self.client.set(self._epoch, (epoch_n or 0) + 1)
            self.client.set(self._seq, 0)
            return self._changes(now, since)
        token = (epoch_n, seq_n)
        hold_until = optional_number(hold[0], "hold_until")
        hold_key = optional_text(hold[1], "hold_key")
        complete = not (isinstance(since, tuple) and since[0] == epoch_n)
        if not complete and since[1] == seq_n:
            return Changes(token, False, month, hold_until, hold_key)
        after = "-inf" if complete else f"({since[1]}"
        names = self.client.zrangebyscore(self._revs, after, "+inf")
        keys: dict[str, KeyState] = {}
        accounts: dict[str, AccountUsage] = {}
        with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(f"{self.ns}:{name}")
            rows = pipe.execute()
        for name, raw in zip(names, rows, strict=True):
            if not raw:
                continue
            if name.startswith("k:"):
                keys[name[2:]] = key_from_fields(raw, f"key {name[2:]}")
            elif name.startswith("a:"):
                accounts[name[2:]] = account_from_fields(raw, f"account {name[2:]}")
        return Changes(token, complete, month, hold_until, hold_key, keys, accounts)

    def read(self, now: float) -> State:
        return self.changes(now, None).as_state()

    def tallies(self, now: float, prefix: str = "") -> dict[str, Tally]:
        start = self.tally_key("")
        names = [
            k.decode() if isinstance(k, bytes) else str(k)
            for k in self._call(lambda: list(self.client.scan_iter(match=f"{_glob(start)}*")))
        ]
        names = [n for n in names if n[len(start) :].startswith(prefix)]
        with self.client.pipeline(transaction=False) as pipe:
            for n in names:
                pipe.hmget(n, "period", "used", "expires")
            rows = self._call(pipe.execute) if names else []
        found = {
            n[len(start) :]: tally_from_fields(r[0], r[1], f"budget {n}", _warn, r[2])
            for n, r in zip(names, rows, strict=True)
            if r[0] is not None or r[1] is not None
        }
        return live_tallies(found, now, prefix)

    def events(self, limit: int = 50) -> list[Event]:
        if limit <= 0:
            return []
        rows = self._call(self.client.lrange, self._events, 0, limit - 1)
        found = []
        for row in rows:
            try:
                event = event_from_fields(json.loads(row))
            except (ValueError, TypeError, RecursionError):
                event = None
            if event is not None:
                found.append(event)
        return found

    def pacing_log(self, name: str) -> list[float] | None:
        fields = self._call(self.client.hgetall, self.ring_key(name))
        times = []
        for field, value in fields.items():
            if field[:1] == "s" and field[1:].isdigit():
                try:
                    times.append(float(value))
                except ValueError:
                    continue
        return sorted(t for t in times if math.isfinite(t))

    def clear(self, now: float) -> None:
        self._call(self._roll, month_of(now), now, everything=True)

    # -- the shared cache --------------------------------------------------------------------

    def cache_get(self, key: str, now: float) -> str | None:
        raw = self._call(self.client.get, self._cache(key))
        if raw is None:
            return None
        try:
            value, expires = json.loads(raw)
        except (ValueError, TypeError):
            return None
        if not isinstance(value, str) or not isinstance(expires, int | float) or expires <= now:
            return None
        return value

    def cache_set(
        self, key: str, value: str, expires_at: float, maxsize: int, *, now: float | None = None
    ) -> None:
        # Expiry is decided on the router's clock (stored with the value); Redis's
        # own TTL, counted from now on the server, only collects the entry later:
        # it is the entry's length on the writer's clock (a test clock months
        # behind would otherwise make it a second), with a minute to spare.
        left = expires_at - (time.time() if now is None else now)
        ttl_ms = max(1000, math.ceil(left * 1000) + 60_000)

        def put() -> None:
            with self.client.pipeline() as pipe:
                pipe.set(self._cache(key), json.dumps([value, expires_at]), px=ttl_ms)
                pipe.zadd(self._cache_index, {key: expires_at})
                pipe.execute()
            extra = self.client.zcard(self._cache_index) - max(1, maxsize)
            if extra > 0:
                oldest = self.client.zrange(self._cache_index, 0, extra - 1)
                if oldest:
                    with self.client.pipeline() as pipe:
                        pipe.delete(*[self._cache(k) for k in oldest])
                        pipe.zrem(self._cache_index, *oldest)
                        pipe.execute()

        self._call(put)

    def cache_delete(self, key: str) -> None:
        def drop() -> None:
            with self.client.pipeline() as pipe:
                pipe.delete(self._cache(key))
                pipe.zrem(self._cache_index, key)
                pipe.execute()

        self._call(drop)

    def cache_keys(self, now: float) -> list[str]:
        return list(self._call(self.client.zrangebyscore, self._cache_index, f"({now}", "+inf"))

    def close(self) -> None:
        self.client.close()
