"""The store interface: a transactional read-modify-write over `State`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from searchfuse.router.state._budgets import Line, Tally
from searchfuse.router.state._events import MAX_EVENTS, Event, changed_events, event_to_fields
from searchfuse.router.state._grant import FRESH, FRESH_CLEAN, Charge, Grant, acquire
from searchfuse.router.state._pacing import RingLog, take_slot
from searchfuse.router.state._records import AccountUsage, KeyState, State, copied
from searchfuse.router.state._ring import Ring

__all__ = ["Changes", "Store", "TxState"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Changes:
    """What changed in a store since a reader's last look (see
    [`Store.changes`][searchfuse.router.Store.changes]).

    `complete` means `keys` and `accounts` hold every record (a first
    read, a new month, a cleared store): the reader drops what it had.
    """

    token: Any
    complete: bool
    month: str
    hold_until: float | None = None
    hold_key: str | None = None
    keys: dict[str, KeyState] = field(default_factory=dict)
    accounts: dict[str, AccountUsage] = field(default_factory=dict)

    def as_state(self) -> State:
        """These records as a `State` (the whole state when `complete`)."""
        return State(
            month=self.month,
            keys=self.keys,
            accounts=self.accounts,
            hold_until=self.hold_until,
            hold_key=self.hold_key,
        )


@runtime_checkable
class Store(Protocol):
    """Where router state lives, shared by every router that names it.

    `update` is one transaction: `change` sees the current state and its
    edits are written atomically (SQLite `BEGIN IMMEDIATE`, Redis
    `WATCH`/`MULTI`, a lock for the others). A store may load records on
    demand, so `change` reaches them through `state.key()`,
    `state.account()` and `state.take()`. The shared cache keeps JSON text
    under string keys with an expiry time on the router's clock.

    What the state means is written once above the backends: the month
    (`_month`), the pacing decision (`_pacing`), the grant (`_grant`), cache
    eviction (`_eviction`); a backend gives them primitives (see
    docs/architecture.md, "Where a new store goes").

    Four members have defaults, inherited by a store that subclasses `Store`:
    `grant` (the pacing decision as one `update`; a store may make it more
    cheaply, as `SqliteStore` does), `blocking` (whether a transaction may
    wait on another process, so async callers run it in a worker thread),
    `events` (none kept) and `tallies` (none listed). A store that keeps the
    event log writes the events of a transaction (`TxState.made_events`) in
    that transaction.

    `events` (none kept) and `pacing_log` (`None`: cannot tell). A store that
    keeps the event log writes the events of a transaction
    (`TxState.made_events`) in that transaction.
    """

    @property
    def blocking(self) -> bool:
        """Whether a transaction may wait on a lock another process holds (a file,
        SQLite, Redis): async callers then run the store's work in a worker thread."""
        return True

    def read(self, now: float) -> State:
        """A snapshot of the state for the month of `now` (a new month reads empty)."""
        ...

    def update(self, now: float, change: Callable[[State], T]) -> T:
        """Apply `change` to the current state atomically and return its result."""
        ...

    def changes(self, now: float, since: Any) -> Changes:
        """The records changed since token `since` (`None`: everything)."""
        ...

    def clear(self, now: float) -> None:
        """Forget all key state (a fresh month). The shared cache stays."""
        ...

    def cache_get(self, key: str, now: float) -> str | None:
        """The cached text under `key`, or `None` when missing or expired."""
        ...

    def cache_set(
        self, key: str, value: str, expires_at: float, maxsize: int, *, now: float | None = None
    ) -> None:
        """Keep `value` until `expires_at`; at most `maxsize` entries are kept.

        `now` is the writer's clock (the router's): a store whose own expiry
        counts on another clock (Redis's TTL) keeps the entry `expires_at - now`
        seconds, whatever the two clocks say."""
        ...

    def cache_delete(self, key: str) -> None:
        """Forget `key` (no error when missing)."""
        ...

    def cache_keys(self, now: float) -> list[str]:
        """The keys of the live (unexpired) cache entries."""
        ...

    def close(self) -> None:
        """Release connections and files."""
        ...

    def cache_claim(self, key: str, owner: str, until: float) -> bool:
        """Claim the search for cache entry `key` for `owner` until `until` (wall-clock
        seconds: processes race in real time, whatever their routers' clocks say);
        True when `owner` holds the claim now (it was free, expired, or its own).
        The others wait for the entry instead of paying for the same search. A store
        without claims says True: every process searches (no single flight)."""
        return True

    def cache_release(self, key: str, owner: str) -> None:
        """End `owner`'s claim on `key` (its entry is written, or will not be)."""
        return None

    def events(self, limit: int = 50) -> list[Event]:
        """The newest `limit` events of the log (429s, cooldowns, holds, moves down
        the chain, budget refusals), newest first; keys by fingerprint only."""
        return []

    def tallies(self, now: float, prefix: str = "") -> dict[str, Tally]:
        """The budget tallies whose names start with `prefix` and that have not
        expired at `now`, read without a write transaction (none kept: `{}`)."""
        return {}

    def pacing_log(self, name: str) -> list[float] | None:
        """The times pacing log `name` keeps (`"search:<fp>"`), oldest first, read
        without a transaction or a write lock; `None`: this store cannot tell.
        `status` counts a key's requests in its current window from it."""
        return None

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
        """The hold, the key's state and a slot in its pacing log, decided in one
        transaction (see `acquire`); with `charge`, the search counted in advance;
        with `spend`, the budgets checked and charged in the same transaction."""
        grant, fresh = self._update_fresh(
            now,
            lambda state: acquire(
                state,
                fp,
                now,
                rpm=rpm,
                window=window,
                honour_hold=honour_hold,
                charge=charge,
                spend=spend,
            ),
        )
        if not fresh or grant.verdict != "ok" or charge is None or spend:
            return grant
        return FRESH_CLEAN if grant.clean else FRESH

    def _update_fresh(self, now: float, change: Callable[[State], T]) -> tuple[T, bool]:
        """`update`, and whether it decided on records known to be current (nothing
        written by anyone else since this store's own last write: `Grant.fresh`).
        Only `grant` asks, with `acquire`, whose answer refers to no record: a
        store may keep the state it changed without copying it."""
        return self.update(now, change), False


class TxState(State):
    """The state a transaction works on: records are loaded on first use, and
    the store writes back only those that changed."""

    def __init__(
        self,
        month: str,
        hold_until: float | None = None,
        hold_key: str | None = None,
        keys: dict[str, KeyState] | None = None,
        accounts: dict[str, AccountUsage] | None = None,
        rings: dict[str, Ring] | None = None,
        tallies: dict[str, Tally] | None = None,
    ) -> None:
        super().__init__(
            month=month,
            keys={} if keys is None else keys,
            accounts={} if accounts is None else accounts,
            hold_until=hold_until,
            hold_key=hold_key,
            rings={} if rings is None else rings,
            tallies={} if tallies is None else tallies,
        )
        self.seen_tallies: dict[str, Tally | None] = {}
        self.seen_keys: dict[str, KeyState | None] = {}
        self.seen_accounts: dict[str, AccountUsage | None] = {}
        self.hold_before = (hold_until, hold_key)
        self.rings_changed = False
        #: Each pacing log as it was before this transaction took a slot in it.
        self.seen_rings: dict[str, Ring | None] = {}

    @classmethod
    def over(cls, state: State) -> TxState:
        """A transaction working directly on the records of `state` (held in memory)."""
        return cls(
            state.month,
            state.hold_until,
            state.hold_key,
            state.keys,
            state.accounts,
            state.rings,
            state.tallies,
        )

    def load_key(self, fp: str) -> KeyState | None:
        """The stored record for `fp` (stores that load lazily override this)."""
        return None

    def load_account(self, name: str) -> AccountUsage | None:
        """The stored record for account `name`."""
        return None

    def load_tally(self, name: str) -> Tally | None:
        """The stored budget tally `name`."""
        return None

    def tally(self, name: str) -> Tally | None:
        if name not in self.seen_tallies:
            record = self.tallies.get(name)
            if record is None:
                record = self.load_tally(name)
                if record is not None:
                    self.tallies[name] = record
            self.seen_tallies[name] = record
        return self.tallies.get(name)

    def set_tally(self, name: str, tally: Tally) -> None:
        self.tally(name)  # remembered as it was, so `changed_tallies` sees the change
        super().set_tally(name, tally)

    def changed_tallies(self) -> dict[str, Tally]:
        """Budget tallies this transaction changed."""
        return {
            name: t
            for name in self.seen_tallies
            if (t := self.tallies.get(name)) is not None and t != self.seen_tallies[name]
        }

    def key(self, fp: str) -> KeyState:
        if fp not in self.seen_keys:
            record = self.keys.get(fp)
            if record is None:
                record = self.load_key(fp)
                if record is not None:
                    self.keys[fp] = record
            self.seen_keys[fp] = None if record is None else copied(record)
        return super().key(fp)

    def account(self, account_id: str) -> AccountUsage:
        if account_id not in self.seen_accounts:
            record = self.accounts.get(account_id)
            if record is None:
                record = self.load_account(account_id)
                if record is not None:
                    self.accounts[account_id] = record
            self.seen_accounts[account_id] = None if record is None else copied(record)
        return super().account(account_id)

    def take(self, name: str, limit: int, window: float, now: float) -> float:
        if name not in self.seen_rings:
            ring = self.rings.get(name)  # a copy shares the times until one changes
            self.seen_rings[name] = None if ring is None else ring.copy()
        log = RingLog(self.rings)
        wait = take_slot(log, name, limit, window, now)
        self.rings_changed = self.rings_changed or log.changed
        return wait

    def roll_back(self) -> None:
        """Put back every record and pacing log this transaction changed, as they
        were before it: for a store whose transaction works on its records in
        place (`over`) and did not finish. The hold and events are applied only
        by a transaction that finished."""
        _put_back(self.keys, self.seen_keys)
        _put_back(self.accounts, self.seen_accounts)
        _put_back(self.tallies, self.seen_tallies)
        _put_back(self.rings, self.seen_rings)

    def changed(self) -> bool:
        """Whether this transaction changed anything at all."""
        return bool(
            self.rings_changed
            or self.noted
            or self.hold_changed()
            or self.changed_keys()
            or self.changed_accounts()
            or self.changed_tallies()
        )

    def changed_keys(self) -> dict[str, KeyState]:
        """Key records this transaction changed."""
        out = {}
        for fp, before in self.seen_keys.items():
            now = self.keys.get(fp)
            if now is not None and now != (before if before is not None else KeyState()):
                out[fp] = now
        return out

    def changed_accounts(self) -> dict[str, AccountUsage]:
        """Account records this transaction changed."""
        out = {}
        for name, before in self.seen_accounts.items():
            now = self.accounts.get(name)
            if now is not None and now != (before if before is not None else AccountUsage()):
                out[name] = now
        return out

    def hold_changed(self) -> bool:
        """Whether this transaction set or moved the router-wide hold."""
        return (self.hold_until, self.hold_key) != self.hold_before

    def made_events(self, now: float, keys: dict[str, KeyState] | None = None) -> list[Event]:
        """The events this transaction makes: what its changes to keys (`keys`, else
        `changed_keys()`) and to the hold tell, and what it noted (see `_events`)."""
        out: list[Event] = []
        for fp, ks in (self.changed_keys() if keys is None else keys).items():
            out += changed_events(fp, self.seen_keys.get(fp), ks, now)
        until = self.hold_until
        if self.hold_changed() and until is not None and until > now:
            out.append(Event(now, "hold", None, self.hold_key, "", until - now, until))
        out += self.noted
        return out


def logged(log: list[dict[str, Any]], events: list[Event]) -> list[dict[str, Any]]:
    """`log` (stored events, oldest first) with `events` added, the oldest dropped."""
    return (log + [event_to_fields(e) for e in events])[-MAX_EVENTS:]


def _put_back(records: dict[str, R], seen: dict[str, R | None]) -> None:
    """Make `records` hold what `seen` remembers (`None`: no record)."""
    for name, before in seen.items():
        if before is None:
            records.pop(name, None)
        else:
            records[name] = before
