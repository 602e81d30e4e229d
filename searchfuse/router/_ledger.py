"""The ledger: the only code that reads or writes the router's store.

Every decision that must hold across threads, processes and hosts is one store transaction here:
the grant (hold, key state, a pacing slot, the search counted in advance), the settlement of an
answer, the refund of one not served, a failure's park and hold, `/usage` claims.

The view and its shortcut. Searches pick keys from a *view*: the store's state as of the last look,
kept up to date from what changed since (one indexed query for SQLite, none when nothing changed).
The invariant: the view may be stale, but nothing is ever sent on it alone, because every send is
granted by a transaction that reads the rows it decides on. So a burst staying on its key may skip
even the look when the last grant found the store unchanged by anyone else since this router's own
writes (`Grant.fresh`); every write of this router's own clears that trust."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Hashable, MutableMapping, Sequence
from typing import Any

from searchfuse import _telemetry
from searchfuse._wire import short_text
from searchfuse.providers._base import Classified, Figures, Rate
from searchfuse.providers._registry import lookup
from searchfuse.router import _parking, policy
from searchfuse.router._options import MAX_PENDING, STICKY_WINDOW, USAGE_CLAIM, RouterOptions
from searchfuse.router._parking import park as park_key
from searchfuse.router._rates import Lateness, pace_window
from searchfuse.router._spend import Charged, Line, settlement
from searchfuse.router._view import Chooser, Pick
from searchfuse.router.config import KeyEntry
from searchfuse.router.policy import Outcome
from searchfuse.router.selection import Candidate, candidate, candidates
from searchfuse.router.state import AccountUsage, Charge, Event, Grant, KeyUsage, State, Store
from searchfuse.router.state._grant import search_log

__all__ = ["Charged", "Ledger"]

log = logging.getLogger("searchfuse.router")


class Ledger:
    """Reads and writes of one router's state (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        keys: Sequence[KeyEntry],
        rates: MutableMapping[str, Rate],
        options: RouterOptions,
        scrub: Callable[[str], str],
        *,
        own_holds_only: bool = False,
    ) -> None:
        self.store = store
        self.keys = tuple(keys)
        self.rates = rates  # each key's request rate, by fingerprint
        #: In a chain under "retry", another provider's hold does not hold this one.
        self.own_holds_only = own_holds_only
        self.options = options
        self.now = options.now
        self._scrub = scrub
        self._masked = {e.fingerprint: e.masked for e in self.keys}
        self._view_lock = threading.RLock()
        self._chooser = Chooser(self.keys)
        self._view_state: State | None = None
        self._view_token: Any = None
        #: The last grant found the store unchanged by others (see the module docstring).
        self._trusted = False
        self._pending: list[Callable[[State], object]] = []
        self._pending_lock = threading.Lock()
        self.lateness = Lateness()  # how late requests leave after their grant (drivers note it)

    @property
    def blocking(self) -> bool:
        """Whether the store may wait on another process (see `Store`)."""
        return self.store.blocking

    def masked(self, fp: str | None) -> str:
        """The masked key of fingerprint `fp` ("a key" when unknown)."""
        return self._masked.get(fp or "", "a key")

    # -- the view ---------------------------------------------------------------------

    def view(self, now: float) -> State:
        """The store's state as of `now`, kept up to date from what changed."""
        with self._view_lock:
            return self._refresh(now)

    def _refresh(self, now: float) -> State:
        """Bring the view and the ranking up to date (hold `_view_lock`)."""
        changes = self.store.changes(now, self._view_token)
        state = self._chooser.merge(self._view_state, changes)
        self._view_state, self._view_token = state, changes.token
        return state

    def snapshot(self) -> tuple[float, list[Candidate]]:
        """Now, and every configured key with its records as of now."""
        now = self.now()
        return now, candidates(self.keys, self.view(now))

    def hold(
        self, state: State | None = None, now: float | None = None
    ) -> tuple[float, str | None]:
        """Seconds left on the router-wide rate-limit hold, and the masked key that set it."""
        if self.options.on_429 == "failover":
            return 0.0, None
        now = self.now() if now is None else now
        state = self.view(now) if state is None else state
        if self.own_holds_only and state.hold_key not in self._masked:
            return 0.0, None
        masked = self._masked.get(state.hold_key or "") if state.hold_key else None
        return state.hold_left(now), masked

    def pick(self, tried: Collection[str]) -> Pick:
        """The key to use next: the burst's key while it lasts, else the best one."""
        now = self.now()
        with self._view_lock:
            trusted, self._trusted = self._trusted, False
            sticky = self._chooser.sticky
            if (
                trusted
                and self._view_state is not None
                and sticky is not None
                and now - sticky[1] < STICKY_WINDOW
                and sticky[0] not in tried
            ):
                state = self._view_state  # the shortcut: see the module docstring
            else:
                state = self._refresh(now)
            # The hold and the parked key are written in one update, so a thread
            # that sees the key parked also sees the hold (no walk to the next key).
            left, masked = self.hold(state, now)
            if left > 0:
                return Pick(None, state, now, (left, masked))
            return Pick(self._chooser.choose(now, tried), state, now)

    def fresh(self, entry: KeyEntry, now: float) -> Candidate:
        """`entry` with its records as of now."""
        return candidate(entry, self.view(now))

    # -- granting, settling, refunding ------------------------------------------------

    def _foreign_hold(self, now: float) -> bool:
        """A hold runs that another provider's key set (see `own_holds_only`)."""
        state = self._view_state if self.own_holds_only else None
        return state is not None and state.hold_left(now) > 0 and state.hold_key not in self._masked

    def grant(
        self, entry: KeyEntry, credits: float | None, *, honour_hold: bool = True, spend: Any = ()
    ) -> Grant:
        """One transaction: the hold, the key's state, a slot in its pacing window and,
        with `credits`, the search counted in advance (see `settle`); with `spend`
        (budget lines), the budgets checked and counted too."""
        now = self.now()
        fp = entry.fingerprint
        rate = self.rates[fp]
        rpm = rate.requests if self.options.pace else None
        honour = honour_hold and self.options.on_429 != "failover" and not self._foreign_hold(now)
        charge = None if credits is None else Charge(fp, entry.account_id, entry.account, credits)
        result = self.store.grant(
            now,
            fp,
            rpm=rpm,
            window=pace_window(rate, self.lateness.seen),
            honour_hold=honour,
            charge=charge,
            spend=spend,
        )
        self._trusted = result.verdict == "ok" and result.fresh
        return result

    def settle(
        self, entry: KeyEntry, charged: Charged | None, credits: float, data: Any = None
    ) -> tuple[Line, ...]:
        """Record a served answer that cost `credits` (`data`: its body); returns the
        budget lines with their settled use. A search is counted when granted (with
        its expected price), so the usual success -- the price as expected, on a key
        whose last answer was already a 200 -- needs no second transaction. Anything
        else is corrected here; a search that was not served is refunded (`refund`)."""
        fp, account_id, account = entry.fingerprint, entry.account_id, entry.account
        now = self.now()
        change: Callable[[State], object] | None = None
        if charged is None:
            change = lambda s: s.apply_success(fp, account_id, account, credits, now)  # noqa: E731
        elif not (charged.clean and credits == charged.credits):
            expected = charged.credits
            change = lambda s: s.settle(fp, account_id, account, expected, credits)  # noqa: E731
        change, lines = settlement(charged.spent if charged else None, credits, data, change)
        if change is not None:
            self._record_served(now, entry, change)
        return lines

    def _record_served(
        self, now: float, entry: KeyEntry, change: Callable[[State], object]
    ) -> None:
        """Record what a served answer changed. The provider has served (and charged): a
        store that fails now must not lose the result, so the change waits for the next write."""
        self._trusted = False  # the view does not show what this writes
        with self._pending_lock:
            pending, self._pending = self._pending, []
        pending.append(change)
        for i, item in enumerate(pending):
            try:
                self.store.update(now, item)
            except Exception as exc:
                with self._pending_lock:
                    # Oldest first; a store that stays down must not grow this without end.
                    self._pending = (pending[i:] + self._pending)[-MAX_PENDING:]
                log.warning(
                    "could not record the answer of key %s in %r (%s); the result is "
                    "returned and the record is retried with the next answer",
                    entry.masked,
                    self.store,
                    self._scrub(short_text(f"{type(exc).__name__}: {exc}")),
                )
                return

    def refund(self, entry: KeyEntry, charged: Charged) -> None:
        """Take back what was counted for a search that was not served."""
        self.store.update(self.now(), lambda state: charged.take_back(state, entry))

    # -- reacting to a failure ----------------------------------------------------------

    def react(
        self,
        entry: KeyEntry,
        answer: Classified,
        *,
        park: bool = True,
        refund: Charged | None = None,
        retry_hold: float = 0.0,
        probe: bool = False,
    ) -> float:
        """Apply the reaction table row for `answer` to `entry`; returns the cooldown set.

        `refund`: the search was counted when granted, and was not served.
        `retry_hold` (with `park=False`, for `on_429="retry"`): hold the router for
        that long unless a hold already runs; returns `retry_hold` if this call
        took the hold (it retries for the burst), else 0.0. `probe`: the answer is a
        probe's, which ends its claim (see `claim_probe`)."""
        self._trusted = False  # the view does not show what this writes
        now = self.now()
        reaction = policy.reaction(answer.outcome, lookup(entry.provider).key_is_url)
        seconds = reaction.park_seconds(answer.retry_after, self.options.cooldown_seconds)
        label = f"{answer.status}" if answer.status is not None else "no answer"
        error = self._scrub(f"{label}: {answer.detail}" if answer.detail else label)
        hold = reaction.holds_router and self.options.on_429 != "failover"

        def change(state: State) -> float:
            # The park and the hold are one transaction: a process that sees the
            # key parked also sees the hold, and refuses without a request.
            if refund is not None:
                refund.take_back(state, entry)
            ks = state.key(entry.fingerprint)
            ks.account = entry.account
            ks.last_status = answer.status
            if probe:
                ks.usage_blocked_until = None
            if not reaction.penalises_key:
                return 0.0
            ks.note_error(now, answer.status, error)
            parked = seconds if park else 0.0
            return park_key(state, ks, entry, reaction.park, answer, now, parked, hold, retry_hold)

        took = self.store.update(now, change)
        seconds = seconds if retry_hold > 0 else max(took, seconds)
        if answer.status == 429:
            _telemetry.rate_limited(entry.masked)
        if reaction.penalises_key:
            log.warning(
                "key %s: %s (%s)%s",
                entry.masked,
                answer.outcome,
                error,
                f"; cooling down {seconds:g} s" if park and seconds else "",
            )
        return took if retry_hold > 0 else seconds

    # -- usage figures -----------------------------------------------------------------

    def sync_due(self, entry: KeyEntry, state: State, now: float) -> bool:
        """True if the key's figures are missing or stale (the probe's own limit is
        checked when the call is claimed)."""
        ks = state.keys.get(entry.fingerprint)
        if ks is None:
            return True
        if ks.last_sync_at is not None and now - ks.last_sync_at < self.options.sync_interval:
            return False
        return ks.usage_blocked_until is None or ks.usage_blocked_until <= now

    def claim_probe(
        self, entry: KeyEntry, limit: int, window: float, *, stale_only: bool = False
    ) -> tuple[str, float] | None:
        """Count a probe against its limit (`limit` per `window` seconds) before making
        it. `None` when claimed; else why not and for how long: `("paused", s)` (a probe
        still out, or the probe's own 429) or `("limit", s)` (the window is full).

        The probe is claimed for `USAGE_CLAIM` seconds, or until an answer about the
        key (figures, 401/403, out of credits) is recorded: the other searches of a
        burst (threads, tasks, processes) do not start a sync of the same key meanwhile.
        `stale_only` (a search's sync): `("fresh", 0.0)` if the figures, read in this
        transaction, were synced within `sync_interval` (or a moment after `now`).
        """
        now, interval = self.now(), self.options.sync_interval

        def change(state: State) -> tuple[str, float] | None:
            ks = state.key(entry.fingerprint)
            synced = ks.last_sync_at
            if stale_only and synced is not None and abs(now - synced) < interval:
                return "fresh", 0.0
            if ks.usage_blocked_until is not None and ks.usage_blocked_until > now:
                return "paused", ks.usage_blocked_until - now
            wait = state.take(f"usage:{entry.fingerprint}", limit, window, now)
            if wait > 0:
                return "limit", wait
            ks.usage_blocked_until = now + USAGE_CLAIM
            return None

        return self.store.update(now, change)

    def record_figures(self, entry: KeyEntry, usage: Figures, until: float | None = None) -> None:
        """Store a probe's (or an answer's headers') figures; `until`: out of quota till then."""
        now = self.now()
        same_account = [e.fingerprint for e in self.keys if e.account_id == entry.account_id]
        key_figures = KeyUsage(usage.key_usage, usage.key_limit, usage.search_usage)
        plan = AccountUsage(
            current_plan=usage.current_plan,
            plan_usage=usage.plan_usage,
            plan_limit=usage.plan_limit,
            paygo_usage=usage.paygo_usage,
            paygo_limit=usage.paygo_limit,
        )
        who = (entry.fingerprint, entry.account_id, entry.account)

        def store_usage(state: State) -> None:
            state.apply_usage(*who, key_figures, plan, same_account, now, auth_reason=Outcome.AUTH)
            if until is not None:
                _parking.exhaust(state.key(entry.fingerprint), now, until)

        self.store.update(now, store_usage)

    def take_slot(self, entry: KeyEntry) -> float:
        """A pacing slot for `entry` outside a search: 0.0 when taken, else seconds to wait."""
        now, rate, fp = self.now(), self.rates[entry.fingerprint], entry.fingerprint
        window = pace_window(rate, self.lateness.seen)
        return self.store.update(now, lambda s: s.take(search_log(fp), rate.requests, window, now))

    def block_probe(self, entry: KeyEntry, until: float) -> None:
        """No probe of `entry` before `until` (the probe itself was rate-limited)."""
        fp = entry.fingerprint
        self.store.update(self.now(), lambda s: setattr(s.key(fp), "usage_blocked_until", until))

    # -- the rest ------------------------------------------------------------------------

    def rate_limited(self) -> bool:
        """Whether any key is cooling after a 429 (then a fallback must not serve)."""
        now, cands = self.snapshot()
        return any(
            c.state.cooling(now) and c.state.cooldown_reason == Outcome.RATE_LIMITED for c in cands
        )

    def events(self, limit: int = 50, keys: Sequence[KeyEntry] | None = None) -> list[Event]:
        """The store's newest events, newest first, `keys` (default: this ledger's) masked."""
        known = self.keys if keys is None else keys
        shown = {e.fingerprint: e.masked for e in known}, {e.fingerprint: e.provider for e in known}
        return [e.shown(*shown) for e in self.store.events(limit)]

    def tallies(self, prefix: str) -> dict[str, Any]:
        """Budget tallies named `prefix...`, live now (read only: `Store.tallies`)."""
        return self.store.tallies(self.now(), prefix)

    def pacing_log(self, fp: str) -> list[float] | None:
        """When key `fp`'s latest searches were granted (read only; `None`: unknown)."""
        return self.store.pacing_log(search_log(fp))

    def note(self, kind: str, provider: str, detail: str) -> None:
        """Log an event of `provider` (a move down the chain) in a transaction of its own."""
        now = self.now()
        self.store.update(now, lambda state: state.note(Event(now, kind, provider, None, detail)))

    def clear(self) -> None:
        """Forget all key state: cooldowns, usage figures, counters."""
        self.store.clear(self.now())

    def shared_cache(self, **options: Any) -> MutableMapping[Hashable, Any]:
        """A TTL cache in the store, on the router's clock (`options`: see `SharedCache`)."""
        from searchfuse.router.state._cache import FLIGHT_WAIT, SharedCache

        options.setdefault("wait", min(FLIGHT_WAIT, self.options.deadline or FLIGHT_WAIT))
        return SharedCache(self.store, timer=self.now, scrub=self._scrub, **options)
