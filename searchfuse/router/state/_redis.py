"""State in Redis: shared by every process on every host that names the same server.

`state="redis://host:6379/0"` (also `rediss://` and `unix:///path.sock`),
with `pip install ".[redis]"`. Each key and account is one hash, so
a search touches only its own records. A search's grant is one Lua script
(`_redis_grant`, sent the short way of `_redis_wire`); every other
read-modify-write is one optimistic transaction (`WATCH` the records read,
then `MULTI`/`EXEC`; a conflicting write from another process makes it start
over), so the 429 hold, a key's park and the pacing decision are atomic
across hosts. Time decisions use the router's clock, never the server's `TIME`; Redis expiry
only collects records that no longer matter (pacing logs past their window,
a finished hold, last month's keys, expired cache entries).

An unreachable server raises [`StoreUnavailable`][searchfuse.errors.StoreUnavailable] naming it
without its password; searchfuse never falls back to local state on its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, TypeVar

from searchfuse.errors import ConfigError, StoreUnavailable
from searchfuse.router.state._base import Changes, Store
from searchfuse.router.state._budgets import Line, Tally, live_tallies
from searchfuse.router.state._codec import tally_from_fields
from searchfuse.router.state._events import MAX_EVENTS, Event, event_from_fields, event_to_fields
from searchfuse.router.state._fleet import DEFAULT_NAMESPACE, check_namespace, split_namespace
from searchfuse.router.state._grant import Charge, Grant
from searchfuse.router.state._month import Months, month_of, start_month
from searchfuse.router.state._records import AccountUsage, KeyState, State
from searchfuse.router.state._redis_cache import RedisBase
from searchfuse.router.state._redis_grant import GRANT, script_grant
from searchfuse.router.state._redis_life import Lifetime
from searchfuse.router.state._redis_tx import (
    BUMP,
    RELEASE,
    RedisMonth,
    RedisTx,
    count,
    keep_ms,
    put_fields,
    stored_month,
)
from searchfuse.router.state._redis_types import glob_escape
from searchfuse.router.state._redis_url import client_url, redacted_url
from searchfuse.router.state._redis_wire import MISSED, Packed, Wire
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


def _answers_bytes(client: Any) -> bool:
    """True for a redis-py client made without `decode_responses=True`."""
    encoder = getattr(client, "get_encoder", None)
    return callable(encoder) and getattr(encoder(), "decode_responses", True) is False


class RedisStore(RedisBase, Store):
    """Router state in Redis, shared by every process on every host using the same URL.

    Args:
        url: `redis://[:password@]host:port/db`, `rediss://...` or
            `unix:///path/to/redis.sock[?db=0]`; `?namespace=NAME` names the
            namespace in the URL.
        namespace: prefix of every Redis key (several routers with different
            keys may share a server under different namespaces; default
            `"searchfuse"`). A router that opens Redis from a URL uses its key
            set's namespace unless the URL names one (see `state/_fleet.py`).
        client: an existing `redis.Redis` to use instead of `url`, made with
            `decode_responses=True` (the store reads answers as text). Its retry
            policy applies where searchfuse goes through redis-py: a client
            that retries a command after a lost connection or a timeout
            (`redis.Redis(host=...)` does, ten times) may run a grant twice;
            pass `retry=None` (the one made from `url` does not retry).
    """

    blocking = True

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        namespace: str | None = None,
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
        url, named = split_namespace(url, self.url)
        if named is not None and namespace is not None and named != namespace:
            raise ConfigError(
                self.url,
                None,
                f"names the namespace {named!r} while namespace={namespace!r} was given",
                "name the namespace in one place",
            )
        self.ns = check_namespace(named or namespace or DEFAULT_NAMESPACE, self.url)
        self._months = Months()
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
        elif _answers_bytes(client):
            raise ConfigError(
                "RedisStore(client=...)",
                None,
                "the client answers bytes, and the store reads Redis's answers as text",
                "make the client with decode_responses=True",
            )
        else:
            # Messages name the server the client talks to, not the default URL.
            self.url = client_url(client) or self.url
        self.client = client
        self._bump = client.register_script(BUMP)
        self._grant = client.register_script(GRANT)
        self._release = client.register_script(RELEASE)
        self._wire = Wire(client, redis)
        #: The stored month as this process last accepted it (the grant script
        #: decides only in that month; `None`: not looked yet).
        self._month_now: str | None = None
        self._call(client.ping)
        self._life = Lifetime(client, self.ns, self.url)
        self._call(self._life.start)

    def __repr__(self) -> str:
        return f"RedisStore({self.url!r}, namespace={self.ns!r})"

    # -- transactions ---------------------------------------------------------------------

    def update(self, now: float, change: Callable[[State], T]) -> T:
        result: T = self._call(self._update, now, change)
        return result

    def _update(self, now: float, change: Callable[[State], T]) -> T:
        with self.client.pipeline() as pipe:
            for _ in range(MAX_ATTEMPTS):
                try:
                    pipe.watch(self.month_key, self.hold_key)
                    stored = stored_month(pipe.get(self.month_key))
                    target = self._months.rollover(stored, now)
                    if target is not None:
                        pipe.unwatch()
                        self._start_month(target, now)
                        continue
                    month = self._month_now = stored
                    hold = pipe.hmget(self.hold_key, "until", "key")
                    held = (
                        optional_number(hold[0], "hold_until"),
                        optional_text(hold[1], "hold_key"),
                    )
                    tx = RedisTx(self, pipe, month, held)
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
                        pipe.lpush(self.events_key, *encoded)
                        pipe.ltrim(self.events_key, 0, MAX_EVENTS - 1)
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
        tx: RedisTx,
        keys: dict[str, KeyState],
        accounts: dict[str, AccountUsage],
        now: float,
        month: str,
    ) -> None:
        keep = keep_ms(month, now)
        names = []
        for fp, ks in keys.items():
            put_fields(pipe, self.k(fp), key_to_fields(ks), keep)
            names.append(f"k:{fp}")
        for name, acc in accounts.items():
            put_fields(pipe, self.a(name), account_to_fields(acc), keep)
            names.append(f"a:{name}")
        if tx.hold_changed():
            if tx.hold_until is None:
                pipe.delete(self.hold_key)
            else:
                pipe.hset(
                    self.hold_key, mapping={"until": repr(tx.hold_until), "key": tx.hold_key or ""}
                )
                pipe.pexpire(self.hold_key, max(1000, math.ceil((tx.hold_until - now + 60) * 1000)))
        for op in tx.pending:
            op(pipe)
        if names or tx.hold_changed():
            self._bump(keys=[self.seq_key, self.revs_key], args=names, client=pipe)

    def _start_month(self, month: str, now: float, *, everything: bool = False) -> None:
        """Start `month` (see `_month.start_month`; `everything`: a cleared store keeps
        nothing), unless another process started it meanwhile."""
        with self.client.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(self.month_key, self.revs_key, self.hold_key)
                    stored = stored_month(pipe.get(self.month_key))
                    if not everything and self._months.rollover(stored, now) is None:
                        pipe.unwatch()
                        return
                    book = RedisMonth(self, pipe, now)
                    start_month(book, month, now, keep=not everything)
                    pipe.multi()
                    book.apply(pipe)
                    pipe.execute()
                    return
                except self._redis.WatchError:
                    continue

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
        """What `Store.grant` decides, in one round trip (`_redis_grant`); values
        the script does not take as they are, and a month's turn, take the careful
        path."""
        month = self._month_now
        if month and self._months.rollover(month, now) is None:
            found = script_grant(
                self,
                month,
                now,
                fp,
                rpm=rpm,
                window=window,
                honour_hold=honour_hold,
                charge=charge,
                spend=spend,
            )
            if found is not None:
                return found
        return super().grant(
            now, fp, rpm=rpm, window=window, honour_hold=honour_hold, charge=charge, spend=spend
        )

    def packed_script(self, keys: list[bytes], args: list[bytes], holes: tuple[int, ...]) -> Packed:
        """The grant script's call, packed once; `holes`: the arguments given per call."""
        head = [b"EVALSHA", self._grant.sha.encode(), b"%d" % len(keys), *keys]
        return Packed([*head, *args], [len(head) + h for h in holes])

    def run_script(self, command: Packed, values: list[bytes]) -> Any:
        """Run the grant script (`_redis_grant.GRANT`): `command` with `values` in
        its holes, the short way (`_redis_wire`), else redis-py's."""
        try:
            reply = self._wire.send(command.filled(values))
        except (self._redis.ConnectionError, self._redis.TimeoutError) as exc:
            # Sent, and perhaps run: never run again here (see `_redis_wire`).
            raise self._unavailable(exc) from None
        except self._redis.RedisError as exc:
            raise self._answered(exc) from None
        if reply is MISSED:
            words = command.words_with(values)
            n = 3 + int(words[2])
            reply = self._call(self._grant, keys=words[3:n], args=words[n:])
        return reply

    def log_events(self, events: list[Event]) -> None:
        """Add `events` to the event log (the newest `MAX_EVENTS` are kept)."""
        encoded = [json.dumps(event_to_fields(e)) for e in events]
        self._call(
            lambda: (
                self.client.pipeline()
                .lpush(self.events_key, *encoded)
                .ltrim(self.events_key, 0, MAX_EVENTS - 1)
                .execute()
            )
        )

    # -- reads ----------------------------------------------------------------------------------

    def changes(self, now: float, since: Any) -> Changes:
        return self._call(self._changes, now, since)

    def _changes(self, now: float, since: Any) -> Changes:
        with self.client.pipeline(transaction=False) as pipe:
            pipe.get(self.month_key).get(self.epoch_key).get(self.seq_key)
            pipe.hmget(self.hold_key, "until", "key").get(self._life.key)
            raw_month, epoch, seq, hold, born = pipe.execute()
        self._life.seen(born)
        month = stored_month(raw_month)
        target = self._months.rollover(month, now)
        if target is not None:
            # A new month: roll it over once for every process, then read as usual.
            self._start_month(target, now)
            return self._changes(now, since)
        self._month_now = month
        epoch_n, seq_n = count(epoch, "epoch"), count(seq, "seq")
        if epoch_n is None or seq_n is None:
            # Counters that hold no number: start a new epoch from 0, so every
            # reader reads everything again, and writes can count again.
            self.client.set(self.epoch_key, (epoch_n or 0) + 1)
            self.client.set(self.seq_key, 0)
            return self._changes(now, since)
        token = (epoch_n, seq_n)
        hold_until = optional_number(hold[0], "hold_until")
        hold_key = optional_text(hold[1], "hold_key")
        complete = not (isinstance(since, tuple) and since[0] == epoch_n)
        if not complete and since[1] == seq_n:
            return Changes(token, False, month, hold_until, hold_key)
        after = "-inf" if complete else f"({since[1]}"
        names = self.client.zrangebyscore(self.revs_key, after, "+inf")
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
            for k in self._call(lambda: list(self.client.scan_iter(match=f"{glob_escape(start)}*")))
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
        rows = self._call(self.client.lrange, self.events_key, 0, limit - 1)
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
        self._call(self._start_month, month_of(now), now, everything=True)

    def close(self) -> None:
        self._wire.close()
        self.client.close()
