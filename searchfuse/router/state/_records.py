"""The router's state as typed records, and the changes an answer makes to them.

State is a cache, not ground truth (incident 2): an expired cooldown is simply
available, and a `/usage` answer always wins over local counts. It is keyed by
key fingerprint, never by list position and never by the raw key.

Every store (memory, JSON file, SQLite, Redis) keeps these same records; the
changes below are written once and run inside the store's transaction.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, TypeVar

from searchfuse.router.state._budgets import Tally
from searchfuse.router.state._pacing import RingLog, take_slot
from searchfuse.router.state._ring import Ring

if TYPE_CHECKING:
    from searchfuse.router.state._events import Event

__all__ = [
    "CHARGED_ACCOUNT_FIELDS",
    "CHARGED_KEY_FIELDS",
    "AccountUsage",
    "Availability",
    "KeyState",
    "KeyUsage",
    "State",
    "copied",
    "unshown",
]

Rec = TypeVar("Rec", "KeyState", "AccountUsage")


def copied(record: Rec) -> Rec:
    """A shallow copy of a key or account record (`dataclasses.replace` without
    changes, minus its field-by-field `__init__` call: a search makes several)."""
    new = object.__new__(type(record))
    new.__dict__.update(record.__dict__)
    return new


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
        disabled wins over cooling, cooling over exhausted. A key parked as "exhausted"
        (out of quota until its provider's reset) is exhausted until then."""
        if self.disabled:
            return Availability.DISABLED
        if self.cooling(now):
            if self.cooldown_reason == Availability.EXHAUSTED:
                return Availability.EXHAUSTED
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
    #: The event log in its stored form, oldest first, for stores that keep it with
    #: the state (memory, the JSON file; see `state/_events.py`).
    events: list[dict[str, Any]] = field(default_factory=list, repr=False)
    #: Events a transaction noted (`note`), written with its change.
    noted: list[Event] = field(default_factory=list, repr=False, compare=False)

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
        `window` seconds; returns 0.0 when counted, else the seconds until it would fit
        (the decision is `_pacing.take_slot`, the same in every store)."""
        return take_slot(RingLog(self.rings), name, limit, window, now)

    def tally(self, name: str) -> Tally | None:
        """Budget tally `name` (`None`: never counted)."""
        return self.tallies.get(name)

    def set_tally(self, name: str, tally: Tally) -> None:
        """Replace budget tally `name` (a store may write it at once)."""
        self.tallies[name] = tally

    def forget_tallies(self, now: float) -> None:
        """Drop the budget tallies expired at `now` (they count as nothing already).
        A store that expires them itself (Redis's TTL) does nothing here."""
        gone = [n for n, t in self.tallies.items() if t.expires is not None and t.expires <= now]
        for name in gone:
            del self.tallies[name]

    # -- changes ---------------------------------------------------------------------

    def note(self, event: Event) -> None:
        """Keep `event` in the store's event log, written with this transaction."""
        self.noted.append(event)

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
