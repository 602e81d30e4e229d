"""The router's state as typed records, and the changes an answer makes to them.

State is a cache, not ground truth (incident 2): an expired cooldown is simply
available, and a `/usage` answer always wins over local counts. It is keyed by
key fingerprint, never by list position and never by the raw key.

Every store (memory, JSON file, SQLite, Redis) keeps these same records; the
changes below are written once and run inside the store's transaction.
"""

from __future__ import annotations

import array
import base64
import binascii
import calendar
import enum
import logging
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

from searchfuse._secrets import redact
from searchfuse.router.state import _budgets as budgets
from searchfuse.router.state._budgets import Line, Tally

__all__ = [
    "STATE_VERSION",
    "AccountUsage",
    "Availability",
    "Charge",
    "Grant",
    "KeyState",
    "KeyUsage",
    "Ring",
    "State",
    "acquire",
    "month_of",
]

log = logging.getLogger("searchfuse.state")

STATE_VERSION = 2
R = TypeVar("R")
Rec = TypeVar("Rec", "KeyState", "AccountUsage")


def copied(record: Rec) -> Rec:
    """A shallow copy of a key or account record (`dataclasses.replace` without
    changes, minus its field-by-field `__init__` call: a search makes several)."""
    new = object.__new__(type(record))
    new.__dict__.update(record.__dict__)
    return new


def month_of(epoch: float) -> str:
    """`"2026-11"`: the billing month (UTC) an instant belongs to; Tavily resets monthly."""
    global _last_month
    start, end, month = _last_month
    if start <= epoch < end:
        return month
    t = time.gmtime(epoch)
    month = time.strftime("%Y-%m", t)
    # Every search asks (twice): the month's bounds answer the next asks.
    year, mon = t.tm_year, t.tm_mon
    start = calendar.timegm((year, mon, 1, 0, 0, 0, 0, 0, 0))
    end = calendar.timegm((year + mon // 12, mon % 12 + 1, 1, 0, 0, 0, 0, 0, 0))
    _last_month = (start, end, month)
    return month


#: The month `month_of` last named, with its first instant and the next month's.
_last_month: tuple[float, float, str] = (0.0, 0.0, "")


#: Shared state rolls into a new month only once this process's clock is this
#: far past the month's first instant: a clock running a few minutes ahead must
#: not reset counters that every process shares.
ROLLOVER_GRACE = 600.0


def rollover(stored: str, now: float) -> str | None:
    """The month that state stamped `stored` rolls into at `now`, or `None` to keep it.

    Never backwards for small skew: state stamped with the next month (written
    by a process whose clock ran a little ahead at the month's turn) is kept as
    it is, so processes with different clocks cannot reset each other's
    counters back and forth. A month further ahead is not believed: it rolls
    to this clock's month, with a warning.
    """
    if not stored:
        return month_of(now)
    target = month_of(now - ROLLOVER_GRACE)
    if target > stored:
        return target
    current = month_of(now)
    year, month = int(current[:4]), int(current[5:7])
    next_month = f"{year + month // 12:04d}-{month % 12 + 1:02d}"
    if stored > next_month:
        # More than a month ahead: a clock far in the future stamped it, not
        # the small skew at a month's turn. Believing it would stop every
        # process with a correct clock from ever starting a new month.
        _warn(
            f"the state's month {stored[:16]!r} is more than a month ahead of this "
            f"clock's {current}: a process with a wrong clock wrote it; starting {current}"
        )
        return current
    return None


class Availability(enum.StrEnum):
    """Whether a key can serve: the one place that decides it."""

    AVAILABLE = "available"
    COOLING = "cooling"
    EXHAUSTED = "exhausted"
    DISABLED = "disabled"


@dataclass(frozen=True)
class KeyUsage:
    """A key's own figures from its last `/usage` answer."""

    key_usage: float | None = None
    key_limit: float | None = None
    search_usage: float | None = None

    def left(self, local_credits: float = 0.0) -> float:
        """Credits left on the key (`inf` without a limit), counting local spending."""
        if self.key_limit is None:
            return math.inf
        return self.key_limit - ((self.key_usage or 0.0) + local_credits)


@dataclass
class AccountUsage:
    """An account's plan figures, shared by every key of that account."""

    current_plan: str | None = None
    plan_usage: float | None = None
    plan_limit: float | None = None
    paygo_usage: float | None = None
    paygo_limit: float | None = None
    synced_at: float | None = None
    #: Credits spent through this router since `synced_at` (not yet in `plan_usage`).
    local_credits: float = 0.0

    def left(self) -> float:
        """Credits left on the account: the plan, then pay-as-you-go (`inf` when unknown)."""
        if self.plan_limit is None:
            return math.inf
        left = self.plan_limit - ((self.plan_usage or 0.0) + self.local_credits)
        if self.paygo_limit is not None:
            left = max(left, 0.0) + max(self.paygo_limit - (self.paygo_usage or 0.0), 0.0)
        return left


@dataclass
class KeyState:
    """What the router knows about one key. Never holds the key itself."""

    account: str | None = None
    disabled: bool = False
    cooldown_until: float | None = None
    cooldown_reason: str | None = None
    cooldown_started: float | None = None
    exhausted: bool = False
    last_error: str | None = None
    last_error_at: float | None = None
    last_status: int | None = None
    #: The key's figures from the last `/usage` (the account's are in `AccountUsage`).
    last_usage: KeyUsage | None = None
    last_sync_at: float | None = None
    #: Credits spent through this router since `last_sync_at`.
    local_credits: float = 0.0
    #: Searches served this month (all processes sharing the store).
    searches: int = 0
    last_used_at: float | None = None
    #: `/usage` answered 429: no further `/usage` call for this key until then.
    usage_blocked_until: float | None = None

    # -- reading -------------------------------------------------------------------

    def cooling(self, now: float) -> bool:
        """True while a cooldown runs. An expired cooldown is simply over."""
        return self.cooldown_until is not None and self.cooldown_until > now

    def cooldown_left(self, now: float) -> float:
        """Seconds of cooldown left (0.0 when none runs)."""
        if self.cooldown_until is None:
            return 0.0
        return max(0.0, self.cooldown_until - now)

    def availability(self, now: float) -> Availability:
        """Available, cooling, exhausted or disabled -- in that order of checks reversed:
        disabled wins over cooling, cooling over exhausted."""
        if self.disabled:
            return Availability.DISABLED
        if self.cooling(now):
            return Availability.COOLING
        if self.exhausted:
            return Availability.EXHAUSTED
        return Availability.AVAILABLE

    def left(self) -> float:
        """Credits left on the key itself (`inf` when unknown or unlimited)."""
        if self.last_usage is None:
            return math.inf
        return self.last_usage.left(self.local_credits)

    def search_usage(self) -> float:
        """Searches' credits as Tavily last reported them plus local spending."""
        synced = self.last_usage.search_usage if self.last_usage is not None else None
        return (synced or 0.0) + self.local_credits

    # -- changes ---------------------------------------------------------------------

    def park(self, now: float, seconds: float, reason: str) -> None:
        """Cool the key down for `seconds` (a float all the way: incident 4)."""
        self.cooldown_until = now + seconds
        self.cooldown_reason = reason
        self.cooldown_started = now

    def clear(self) -> None:
        """End any cooldown and forget the last error."""
        self.cooldown_until = None
        self.cooldown_reason = None
        self.cooldown_started = None
        self.last_error = None

    def note_error(self, now: float, status: int | None, error: str) -> None:
        """Remember what went wrong (`error` never contains a key)."""
        self.last_status = status
        self.last_error = error
        self.last_error_at = now

    def apply_success(self, now: float, credits: float) -> None:
        """A search was served: clear the key, count it and its credits."""
        self.clear()
        self.last_status = 200
        self.exhausted = False
        self.searches += 1
        self.last_used_at = now
        self.local_credits += credits

    def charge(self, now: float, credits: float) -> bool:
        """Count a search about to be sent, and its expected `credits`, in advance.

        Returns True when the key is already as a success leaves it (last
        answer 200, no error, no cooldown): then a success that costs what
        was charged needs no second write.
        """
        self.searches += 1
        self.last_used_at = now
        self.local_credits += credits
        return (
            self.last_status == 200
            and self.last_error is None
            and self.cooldown_until is None
            and self.cooldown_reason is None
            and self.cooldown_started is None
            and not self.exhausted
        )

    def refund(self, credits: float) -> None:
        """Take back a `charge` whose search was not served."""
        self.searches = max(0, self.searches - 1)
        self.local_credits = max(0.0, self.local_credits - credits)


#: The fields `State.charge` changes, of the key and of its account.
CHARGED_KEY_FIELDS = ("account", "searches", "last_used_at", "local_credits")
CHARGED_ACCOUNT_FIELDS = ("local_credits",)


class Ring:
    """The times of the last `size` events of one kind: a sliding-window log.

    At most `size` events may fall in any `window` seconds. The slot the
    next event would take holds the event `size` events ago; the next event
    may happen once that one has left the window. Unlike a token bucket that
    starts full and refills per second (which lets `rpm` requests through at
    once and then more as it refills, so a 60-second window can see up to twice
    `rpm`), this never admits more than `size` events in any window, and it
    costs one slot read and one slot write per event whatever `size` is.
    """

    __slots__ = ("seq", "size", "slots")

    def __init__(self, size: int, seq: int = 0, slots: list[float | None] | None = None) -> None:
        self.size = size
        self.seq = seq
        #: Grows to `size` as events come: a rate of a million costs nothing until used.
        self.slots: list[float | None] = slots if slots is not None else []

    def get(self, index: int) -> float | None:
        """The time in slot `index` (`None`: never used)."""
        return self.slots[index] if index < len(self.slots) else None

    def set(self, index: int, t: float | None) -> None:
        """Put time `t` in slot `index`."""
        if index >= len(self.slots):
            self.slots.extend([None] * (index + 1 - len(self.slots)))
        self.slots[index] = t

    def resized(self, size: int) -> Ring:
        """The same history in a ring of `size` slots (the newest events kept)."""
        ring = Ring(size)
        for t in self.ordered()[-size:] if size else []:
            ring.set(ring.seq % size, t)
            ring.seq += 1
        return ring

    def ordered(self) -> list[float]:
        """The remembered times, oldest first."""
        n = self.size
        out = [self.get((self.seq + i) % n) for i in range(n)] if n else []
        return [t for t in out if t is not None]

    def wait(self, window: float, now: float) -> float:
        """Seconds until the next event fits (0.0: now)."""
        if self.size <= 0:
            return math.inf
        oldest = self.get(self.seq % self.size)
        if oldest is None:
            return 0.0
        return max(0.0, oldest + window - now)

    def take(self, window: float, now: float) -> float:
        """Record an event now if it fits and return 0.0, else the seconds to wait."""
        wait = self.wait(window, now)
        if wait <= 0.0:
            self.set(self.seq % self.size, now)
            self.seq += 1
        return wait


@dataclass
class State:
    """The whole state: the month it belongs to, per-key and per-account records.

    Stores hand a `State` to the change function of a transaction. Records are
    reached through `key`, `account` and `take`, which a store
    may load on demand, so a change touches only what it names.
    """

    month: str
    keys: dict[str, KeyState] = field(default_factory=dict)
    accounts: dict[str, AccountUsage] = field(default_factory=dict)
    #: Under `on_429="stop"`, a 429 on any key holds the whole router until
    #: this time: a burst that 429s one key 429s them all (incident 1).
    hold_until: float | None = None
    #: Fingerprint of the key whose 429 set the hold.
    hold_key: str | None = None
    #: Pacing logs by name (`"search:<fp>"`, `"usage:<fp>"`).
    rings: dict[str, Ring] = field(default_factory=dict)
    #: Budget tallies by name (see `state/_budgets.py`); they carry their own period.
    tallies: dict[str, Tally] = field(default_factory=dict)

    def hold_left(self, now: float) -> float:
        """Seconds the router-wide rate-limit hold still runs (0.0 when none)."""
        if self.hold_until is None:
            return 0.0
        return max(0.0, self.hold_until - now)

    def key(self, fp: str) -> KeyState:
        """The record for key fingerprint `fp`, created empty when missing."""
        record = self.keys.get(fp)
        if record is None:
            record = self.keys[fp] = KeyState()
        return record

    def account(self, account_id: str) -> AccountUsage:
        """The record for an account, created empty when missing."""
        record = self.accounts.get(account_id)
        if record is None:
            record = self.accounts[account_id] = AccountUsage()
        return record

    def ring(self, name: str, size: int) -> Ring:
        """The pacing log `name` with `size` slots."""
        ring = self.rings.get(name)
        if ring is None:
            ring = self.rings[name] = Ring(size)
        elif ring.size != size:
            ring = self.rings[name] = ring.resized(size)
        return ring

    def take(self, name: str, limit: int, window: float, now: float) -> float:
        """Count one event in pacing log `name` if at most `limit` then fall in any
        `window` seconds; returns 0.0 when counted, else the seconds until it would fit."""
        return self.ring(name, limit).take(window, now)

    def tally(self, name: str) -> Tally | None:
        """Budget tally `name` (`None`: never counted)."""
        return self.tallies.get(name)

    def set_tally(self, name: str, tally: Tally) -> None:
        """Replace budget tally `name` (a store may write it at once)."""
        self.tallies[name] = tally

    # -- changes ---------------------------------------------------------------------

    def hold(self, fp: str, until: float) -> None:
        """Hold the whole router until `until` (extends, never shortens, a running hold)."""
        if self.hold_until is None or self.hold_until < until:
            self.hold_until = until
            self.hold_key = fp

    def apply_success(
        self, fp: str, account_id: str, account: str | None, credits: float, now: float
    ) -> None:
        """A search on `fp` was served and cost `credits`."""
        ks = self.key(fp)
        ks.account = account
        ks.apply_success(now, credits)
        self.account(account_id).local_credits += credits

    def charge(
        self, fp: str, account_id: str, account: str | None, credits: float, now: float
    ) -> bool:
        """Count a search on `fp` before it is sent (see `KeyState.charge`).

        Changes only `CHARGED_KEY_FIELDS` of the key and `CHARGED_ACCOUNT_FIELDS`
        of the account (a store may write just those).
        """
        ks = self.key(fp)
        ks.account = account
        self.account(account_id).local_credits += credits
        return ks.charge(now, credits)

    def refund(self, fp: str, account_id: str, credits: float) -> None:
        """Take back a `charge` on `fp` whose search was not served."""
        self.key(fp).refund(credits)
        acc = self.account(account_id)
        acc.local_credits = max(0.0, acc.local_credits - credits)

    def settle(
        self, fp: str, account_id: str, account: str | None, charged: float, credits: float
    ) -> None:
        """A charged search was served and cost `credits`: the success the charge
        did not write (the key cleared, its last answer 200), and the difference."""
        ks = self.key(fp)
        ks.account = account
        ks.clear()
        ks.last_status = 200
        ks.exhausted = False
        delta = credits - charged
        if delta:
            ks.local_credits = max(0.0, ks.local_credits + delta)
            acc = self.account(account_id)
            acc.local_credits = max(0.0, acc.local_credits + delta)

    def apply_usage(
        self,
        fp: str,
        account_id: str,
        account: str | None,
        key: KeyUsage,
        plan: AccountUsage,
        same_account: list[str],
        now: float,
        *,
        auth_reason: str,
    ) -> None:
        """Store a `/usage` answer for `fp`: it wins over local counts.

        The plan is shared: its figures speak for every key of the account.
        A 200 also proves the key is valid again, so an auth cooldown
        (`auth_reason`) is over (incident 7).
        """
        ks = self.key(fp)
        ks.account = account
        # searchfuse never disables a key in the state (the keys file does that):
        # a flag found here is a leftover, and a 200 proves the key works.
        ks.disabled = False
        before = ks.last_usage.key_usage if ks.last_usage is not None else None
        ks.local_credits = unshown(ks.local_credits, before, key.key_usage)
        ks.last_usage = key
        ks.last_sync_at = now
        # The sync is done: the next one is due after the sync interval.
        ks.usage_blocked_until = None
        acc = self.account(account_id)
        fresh = replace(
            plan,
            synced_at=now,
            local_credits=unshown(acc.local_credits, acc.plan_usage, plan.plan_usage),
        )
        for f in fields(AccountUsage):
            setattr(acc, f.name, getattr(fresh, f.name))
        plan_spent = acc.left() <= 0
        ks.exhausted = key.left() <= 0 or plan_spent
        for other_fp in same_account:
            if other_fp == fp:
                continue
            other = self.key(other_fp)
            if plan_spent:
                other.exhausted = True
            elif other.exhausted and other.last_usage is not None:
                # Headroom on the plan again: only the key's own limit can hold it back.
                other.exhausted = other.last_usage.left() <= 0
        if ks.cooldown_reason == auth_reason and ks.cooling(now):
            ks.clear()


def unshown(local: float, before: float | None, after: float | None) -> float:
    """What of `local` (credits counted here since the last sync) a fresh `/usage`
    figure `after` does not show yet.

    The figure's growth since the last sync (`before`; none yet: 0) is taken
    to be these credits; the rest were searches still in flight when `/usage`
    answered, and stay counted (a figure that does not count them yet must not
    make their quota look unspent). Without a figure, `local` stays as it is.
    """
    if after is None:
        return local
    grown = max(0.0, after - (before or 0.0))
    return max(0.0, local - grown)


# -- validation of stored values -----------------------------------------------------------

#: Field kinds of each record, for stores that keep them as columns or strings.
KEY_FIELDS: dict[str, str] = {
    "account": "str?",
    "disabled": "bool",
    "cooldown_until": "float?",
    "cooldown_reason": "str?",
    "cooldown_started": "float?",
    "exhausted": "bool",
    "last_error": "str?",
    "last_error_at": "float?",
    "last_status": "int?",
    "key_usage": "float?",
    "key_limit": "float?",
    "search_usage": "float?",
    "last_sync_at": "float?",
    "local_credits": "float",
    "searches": "int",
    "last_used_at": "float?",
    "usage_blocked_until": "float?",
}
ACCOUNT_FIELDS: dict[str, str] = {
    "current_plan": "str?",
    "plan_usage": "float?",
    "plan_limit": "float?",
    "paygo_usage": "float?",
    "paygo_limit": "float?",
    "synced_at": "float?",
    "local_credits": "float",
}
_DEFAULTS = {"bool": False, "float": 0.0, "int": 0}
_MAX_TEXT = 2000


def rolled_key(ks: KeyState, now: float) -> KeyState | None:
    """What of a key's record survives a new month: an active cooldown (with its
    error), nothing else. `None` when nothing survives."""
    if not ks.cooling(now):
        return None
    return KeyState(
        account=ks.account,
        cooldown_until=ks.cooldown_until,
        cooldown_reason=ks.cooldown_reason,
        cooldown_started=ks.cooldown_started,
        last_error=ks.last_error,
        last_error_at=ks.last_error_at,
        last_status=ks.last_status,
        usage_blocked_until=ks.usage_blocked_until,
    )


def rolled(state: State, month: str, now: float) -> State:
    """`state` in a new month. Tavily's quotas roll over, so usage figures,
    counters and exhausted flags reset; a cooldown or a 429 hold still running
    is a fact about now, not about the month, and is kept (a hold written at
    23:59:50 on the last day still holds at 00:00:05). Pacing logs live on."""
    keys = {fp: kept for fp, ks in state.keys.items() if (kept := rolled_key(ks, now))}
    held = state.hold_until is not None and state.hold_until > now
    return State(
        month=month,
        keys=keys,
        hold_until=state.hold_until if held else None,
        hold_key=state.hold_key if held else None,
        rings=state.rings,
        tallies=state.tallies,
    )


class BadValue(ValueError):
    """A stored value of the wrong type or out of range."""


def _parse(kind: str, value: Any) -> Any:
    """`value` as `kind` (accepting the text form Redis stores), or `BadValue`."""
    # The common case first: a typed column already holds the right type.
    cls = type(value)
    if cls is float and kind[0] == "f" and math.isfinite(value) and abs(value) <= 1e15:
        return value
    if cls is int and kind[0] == "i" and abs(value) <= 2**62:
        return value
    if cls is str and kind[0] == "s" and value and len(value) <= _MAX_TEXT:
        # Text read from a store or an imported file may hold a key (a legacy
        # last_error "401: invalid key tvly-..."): it is kept only redacted.
        return redact(value, ())
    if value is None or value == "":
        if kind.endswith("?"):
            return None
        raise BadValue("missing")
    base = kind.rstrip("?")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if base == "str":
        if not isinstance(value, str):
            raise BadValue(f"expected text, got {type(value).__name__}")
        return redact(value[:_MAX_TEXT], ())
    if base == "bool":
        if isinstance(value, bool):
            return value
        if value in (0, 1, "0", "1"):
            return bool(int(value))
        raise BadValue(f"expected 0 or 1, got {value!r}"[:80])
    if isinstance(value, bool):
        raise BadValue(f"expected a number, got {value!r}")
    try:
        number = float(value) if isinstance(value, str) else value
    except ValueError:
        raise BadValue(f"expected a number, got {value!r}"[:80]) from None
    if not isinstance(number, int | float) or not math.isfinite(number):
        raise BadValue(f"expected a finite number, got {value!r}"[:80])
    if base == "int":
        if number != int(number) or abs(number) > 2**62:
            raise BadValue(f"expected an integer, got {value!r}"[:80])
        return int(number)
    if abs(number) > 1e15:
        raise BadValue(f"out of range: {value!r}"[:80])
    return float(number)


def _typed(
    spec: Mapping[str, str], raw: Mapping[str, Any], where: str, warn: Callable[[str], None]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, kind in spec.items():
        if name not in raw:
            continue
        try:
            out[name] = _parse(kind, raw[name])
        except BadValue as exc:
            warn(f"{where}: {name} {exc}; reset")
            if not kind.endswith("?"):
                out[name] = _DEFAULTS[kind]
    return out


_WARNED: set[str] = set()


def _warn(message: str) -> None:
    # Once per message: a bad stored value is read on every search until it is rewritten.
    if message in _WARNED:
        return
    if len(_WARNED) < 1000:
        _WARNED.add(message)
    log.warning("router state: %s", message)


def key_from_fields(
    raw: Mapping[str, Any], where: str = "key", warn: Callable[[str], None] = _warn
) -> KeyState:
    """A `KeyState` from flat stored fields; a bad value is reset with a warning."""
    values = _typed(KEY_FIELDS, raw, where, warn)
    figures = {n: values.pop(n, None) for n in ("key_usage", "key_limit", "search_usage")}
    usage = KeyUsage(**figures) if any(v is not None for v in figures.values()) else None
    return KeyState(last_usage=usage, **values)


def key_to_fields(ks: KeyState) -> dict[str, Any]:
    """The flat fields a store keeps for a `KeyState`."""
    out: dict[str, Any] = {}
    usage = ks.last_usage or KeyUsage()
    for name in KEY_FIELDS:
        if name in ("key_usage", "key_limit", "search_usage"):
            out[name] = getattr(usage, name)
        else:
            out[name] = getattr(ks, name)
    return out


def account_from_fields(
    raw: Mapping[str, Any], where: str = "account", warn: Callable[[str], None] = _warn
) -> AccountUsage:
    """An `AccountUsage` from stored fields; a bad value is reset with a warning."""
    return AccountUsage(**_typed(ACCOUNT_FIELDS, raw, where, warn))


def account_to_fields(acc: AccountUsage) -> dict[str, Any]:
    """The fields a store keeps for an `AccountUsage`."""
    return {name: getattr(acc, name) for name in ACCOUNT_FIELDS}


def optional_number(value: Any, where: str, warn: Callable[[str], None] = _warn) -> float | None:
    """A stored optional number, `None` (with a warning) when it is not one."""
    try:
        result: float | None = _parse("float?", value)
    except BadValue as exc:
        warn(f"{where} {exc}; reset")
        return None
    return result


def optional_text(value: Any, where: str, warn: Callable[[str], None] = _warn) -> str | None:
    """A stored optional text, `None` (with a warning) when it is not one."""
    try:
        result: str | None = _parse("str?", value)
    except BadValue as exc:
        warn(f"{where} {exc}; reset")
        return None
    return result


# -- the JSON form (the JSON file store, and quota.json imported into a database) ----------


def state_to_json(state: State) -> dict[str, Any]:
    """The state as the JSON file store writes it."""
    keys = {}
    for fp, ks in sorted(state.keys.items()):
        flat = key_to_fields(ks)
        usage = {n: flat.pop(n) for n in ("key_usage", "key_limit", "search_usage")}
        flat["last_usage"] = usage if ks.last_usage is not None else None
        keys[fp] = flat
    return {
        "format_version": STATE_VERSION,
        "month": state.month,
        "keys": keys,
        "accounts": {n: account_to_fields(a) for n, a in sorted(state.accounts.items())},
        "hold_until": state.hold_until,
        "hold_key": state.hold_key,
        "rings": {
            n: {"size": r.size, "seq": r.seq, "times": _pack_times(r.slots)}
            for n, r in sorted(state.rings.items())
        },
        "tallies": {
            n: {"period": t.period, "used": t.used} for n, t in sorted(state.tallies.items())
        },
    }


def looks_like_state(data: Any) -> bool:
    """True for a JSON object searchfuse wrote as state (`month` text, `keys` object)."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("month"), str)
        and isinstance(data.get("keys", {}), dict)
        and isinstance(data.get("accounts", {}), dict)
    )


def state_from_json(data: Any, warn: Callable[[str], None] = _warn) -> State:
    """Parse what `state_to_json` wrote (format 1 or 2).

    Raises `ValueError` when `data` is not a state object at all; a bad
    value inside one is reset with a warning.
    """
    if not looks_like_state(data):
        raise ValueError("not a searchfuse state object")
    keys: dict[str, KeyState] = {}
    for fp, raw in data.get("keys", {}).items():
        if not isinstance(raw, dict):
            warn(f"key {fp}: not an object; reset")
            continue
        flat = dict(raw)
        usage = flat.pop("last_usage", None)
        if isinstance(usage, dict):
            flat.update({n: usage.get(n) for n in ("key_usage", "key_limit", "search_usage")})
        elif usage is not None:
            warn(f"key {fp}: last_usage is not an object; reset")
        keys[str(fp)] = key_from_fields(flat, f"key {fp}", warn)
    accounts: dict[str, AccountUsage] = {}
    for name, raw in data.get("accounts", {}).items():
        if not isinstance(raw, dict):
            warn(f"account {name}: not an object; reset")
            continue
        accounts[str(name)] = account_from_fields(raw, f"account {name}", warn)
    rings: dict[str, Ring] = {}
    rings_raw = data.get("rings")
    for name, raw in rings_raw.items() if isinstance(rings_raw, dict) else ():
        ring = _ring_from_json(raw)
        if ring is None:
            warn(f"pacing log {name}: malformed; reset")
        else:
            rings[str(name)] = ring
    return State(
        month=data["month"],
        keys=keys,
        accounts=accounts,
        hold_until=optional_number(data.get("hold_until"), "hold_until", warn),
        hold_key=optional_text(data.get("hold_key"), "hold_key", warn),
        rings=rings,
        tallies=_tallies_from_json(data.get("tallies"), warn),
    )


def tally_from_fields(period: Any, used: Any, where: str, warn: Callable[[str], None]) -> Tally:
    """A stored budget tally; a bad one is reset to nothing used, with a warning."""
    number = optional_number(used, f"{where} used", warn)
    if not isinstance(period, str) or number is None or number < 0 or not math.isfinite(number):
        warn(f"{where}: malformed; reset")
        return Tally(period if isinstance(period, str) else "", 0.0)
    return Tally(period, number)


def _tallies_from_json(raw: Any, warn: Callable[[str], None]) -> dict[str, Tally]:
    out: dict[str, Tally] = {}
    for name, item in raw.items() if isinstance(raw, dict) else ():
        fields_ = item if isinstance(item, dict) else {}
        out[str(name)] = tally_from_fields(
            fields_.get("period"), fields_.get("used"), f"budget {name}", warn
        )
    return out


def _pack_times(slots: list[float | None]) -> str:
    """A pacing log's times as base64 of little-endian doubles (0.0: never used).

    A log holds up to `rpm` times; written as JSON numbers, each costs a float
    repr on every save (most of a search's cost at a thousand times), packed
    it costs one copy.
    """
    packed: array.array[float]
    try:
        packed = array.array("d", slots)  # type: ignore[arg-type]  # None is checked by C
    except TypeError:
        packed = array.array("d", (0.0 if t is None else t for t in slots))
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def _unpack_times(text: Any) -> list[float | None] | None:
    """The times `_pack_times` wrote, or `None` when `text` is not such a log."""
    if not isinstance(text, str):
        return None
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    if len(raw) % 8:
        return None
    packed = array.array("d")
    packed.frombytes(raw)
    if sys.byteorder != "little":
        packed.byteswap()
    times: list[float | None] = []
    for t in packed.tolist():
        if not math.isfinite(t) or t < 0:
            return None
        times.append(t if t > 0 else None)
    return times


def _ring_from_json(raw: Any) -> Ring | None:
    if not isinstance(raw, dict):
        return None
    if "times" in raw:
        times = _unpack_times(raw.get("times"))
        if times is None:
            return None
        raw = {**raw, "slots": times}
    seq, slots = raw.get("seq"), raw.get("slots")
    size = raw.get("size", len(slots) if isinstance(slots, list) else None)
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        return None
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 1_000_000:
        return None
    if not isinstance(slots, list) or len(slots) > size:
        return None
    try:
        parsed = [_parse("float?", t) for t in slots]
    except BadValue:
        return None
    return Ring(size, seq, parsed)


# -- the pick: one decision, inside the store's transaction -------------------------------


@dataclass(frozen=True)
class Grant:
    """What a store said to "may this key send a search now?".

    `verdict` is `"ok"` (the request is counted in the key's pacing log and
    may be sent), `"held"` (the router-wide 429 hold runs), `"blocked"`
    (the key is cooling, exhausted or disabled: see `availability`) or
    `"paced"` (the key's rate is used up). `wait` is the seconds until the
    hold ends, the cooldown ends, or the pacing log has room.
    """

    verdict: str
    wait: float = 0.0
    availability: Availability = Availability.AVAILABLE
    hold_key: str | None = None
    #: With `"ok"` and a charge: the key already looked as a success leaves it.
    clean: bool = False
    #: The store decided on records it knew to be current: nothing was
    #: written by another process (or store) since its own last write.
    fresh: bool = False
    #: With `"ok"`: the budget lines counted, each with its use including this call.
    spent: tuple[Line, ...] = ()
    #: With `"budget"`: the line this call would have taken over its limit.
    over: Line | None = None


GRANTED = Grant("ok")
#: A granted, charged search on a key that a success would not change.
GRANTED_CLEAN = Grant("ok", clean=True)


@dataclass(frozen=True)
class Charge:
    """A search counted when it is granted, so that a served search needs
    no second transaction: `credits` on key `fp` of account `account_id`."""

    fp: str
    account_id: str
    account: str | None
    credits: float


def search_log(fp: str) -> str:
    """The name of key `fp`'s pacing log of searches."""
    return f"search:{fp}"


def acquire(
    state: State,
    fp: str,
    now: float,
    *,
    rpm: int | None,
    window: float,
    honour_hold: bool,
    charge: Charge | None = None,
    spend: tuple[Line, ...] = (),
) -> Grant:
    """Check the budgets, the hold and the key, then count the search in the key's
    pacing log (and, with `spend`, on its budget tallies).

    Runs inside one transaction, so the hold another process wrote with its
    park, and the pacing every process shares, are seen before anything is sent.
    With `charge`, a granted search is also counted (and its expected credits):
    the router refunds it if the search is not served.
    """
    if spend:
        # First: a spent budget is the answer whatever the keys say (waiting
        # for a cooldown would not help the caller).
        refused = budgets.over(state, spend)
        if refused is not None:
            return Grant("budget", refused.wait(now), over=refused)
    if honour_hold:
        left = state.hold_left(now)
        if left > 0:
            return Grant("held", left, hold_key=state.hold_key)
    ks = state.key(fp)
    availability = ks.availability(now)
    if availability is not Availability.AVAILABLE:
        wait = ks.cooldown_left(now) if availability is Availability.COOLING else math.inf
        return Grant("blocked", wait, availability)
    if rpm is not None:
        wait = state.take(search_log(fp), rpm, window, now)
        if wait > 0:
            return Grant("paced", wait)
    spent = budgets.charge(state, spend) if spend else ()
    if charge is not None:
        clean = state.charge(charge.fp, charge.account_id, charge.account, charge.credits, now)
        if spent:
            return Grant("ok", clean=clean, spent=spent)
        return GRANTED_CLEAN if clean else GRANTED
    return Grant("ok", spent=spent) if spent else GRANTED
