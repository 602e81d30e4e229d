"""Router: choose a key -> call Tavily -> classify the answer -> record it -> fail over.

Each operation is written once, as a generator that yields the I/O it needs
(a `/usage` request, a search, a call of the caller's function, a wait) and
receives the outcome. A small sync driver and a small async driver perform
that I/O, so `search` and `asearch` cannot drift apart.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import os
import threading
import time
from collections.abc import (
    Awaitable,
    Callable,
    Generator,
    Hashable,
    Mapping,
    MutableMapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import httpx

from searchfuse import _clock, _telemetry
from searchfuse._answers import LONE_SURROGATE, query_problem
from searchfuse._format import duration
from searchfuse._secrets import redact
from searchfuse.errors import (
    BadRequest,
    ConfigError,
    CooldownActive,
    NoKeyAvailable,
    RateLimited,
    SearchFailed,
    Throttled,
)
from searchfuse.router import policy
from searchfuse.router.config import (
    Config,
    KeyEntry,
    config_from_env,
    key_rpm,
    keys_from,
    load_config,
)
from searchfuse.router.diagnose import Diagnosis, Step, diagnose_candidates
from searchfuse.router.policy import Outcome, Park
from searchfuse.router.selection import (
    Candidate,
    Ranking,
    blocked_reason,
    candidates,
    rank,
    remaining,
)
from searchfuse.router.state import (
    AccountUsage,
    Charge,
    Grant,
    KeyUsage,
    State,
    Store,
    open_store,
)
from searchfuse.router.status import KeyStatus, ProbeResult, key_status
from searchfuse.router.tavily import (
    ENDPOINTS,
    RATE_WINDOW,
    SEARCH_CREDITS,
    USAGE_CALLS_PER_WINDOW,
    USAGE_WINDOW,
    DeadlineExceeded,
    JSONBody,
    Reply,
    TavilyHTTP,
    Usage,
    error_detail,
    figure,
    short_text,
)

__all__ = ["On429", "Router"]

#: Seconds a `/usage` call being made keeps other searches from starting one
#: for the same key (its answer, or this much time, ends the claim).
USAGE_CLAIM = 30.0

log = logging.getLogger("searchfuse.router")

T = TypeVar("T")
On429 = Literal["stop", "retry", "failover"]

#: `on_429="retry"`: how many retries on the same key, and the first wait.
RETRIES_ON_429 = 2
FIRST_RETRY_WAIT = 0.5
#: Every call (fail-over, `/usage`, retries included) ends within this many seconds.
DEFAULT_DEADLINE = 60.0
#: A call tries at most this many keys: a 5xx storm must not fan one call out to every key.
DEFAULT_MAX_KEYS_PER_CALL = 3
#: After this many upstream failures in a row (5xx, timeouts, no connection) the
#: whole router pauses for `cooldown_minutes`: Tavily is failing, not a key.
DEFAULT_BREAKER_THRESHOLD = 6
#: `/usage` is an optimisation: it may use at most this share of a call's time left.
USAGE_SHARE = 1 / 3
#: State changes of served answers kept for a retry while the store fails.
MAX_PENDING = 1000
#: No single search costs more credits than this; a larger figure is not believed.
MAX_SEARCH_CREDITS = 100.0
#: Searches starting within this many seconds of the previous pick stay on its key.
STICKY_WINDOW = 2.0
#: How long a call may wait for a key with room before [`Throttled`][searchfuse.errors.Throttled].
DEFAULT_MAX_WAIT = 10.0
#: Pacing counts a request when it is decided; Tavily counts it when it arrives,
#: a little later. A second more than Tavily's window keeps the difference in
#: network delay between two requests from ever putting `rpm + 1` in its window.
PACE_MARGIN = 1.0
PACE_WINDOW = RATE_WINDOW + PACE_MARGIN
#: Figures older than this are refreshed from `/usage` (for the key in use only).
DEFAULT_SYNC_INTERVAL = 1800.0


# -- the I/O steps a flow can ask for --------------------------------------------


@dataclass(frozen=True)
class _Usage:
    entry: KeyEntry


@dataclass(frozen=True)
class _Search:
    """A `POST` to one of Tavily's endpoints (`/search` unless told otherwise)."""

    entry: KeyEntry
    body: dict[str, Any]
    path: str = "/search"
    timeout: float | None = None


@dataclass(frozen=True)
class _Call:
    entry: KeyEntry


@dataclass(frozen=True)
class _Sleep:
    seconds: float


@dataclass(frozen=True)
class _Fallback:
    body: dict[str, Any]


_Step = _Usage | _Search | _Call | _Sleep | _Fallback


@dataclass(frozen=True)
class _Charged:
    """A search counted when it was granted: its expected `credits`, and
    whether the key already looked as a success leaves it (`clean`)."""

    credits: float
    clean: bool


@dataclass(frozen=True)
class _Returned:
    """What the caller's function returned in a `call` flow."""

    value: Any


class _Breaker:
    """Router-wide: after `threshold` upstream failures in a row, refuse for a while.

    Per-key cooldowns stop one call from asking a failing key twice; the breaker
    stops the next calls from walking through the remaining keys of a Tavily
    that is failing for everyone. A success closes it; after a pause, one
    failure opens it again.
    """

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.failures = 0
        self.open_until: float | None = None
        self._lock = threading.Lock()

    def left(self, now: float) -> float:
        with self._lock:
            return 0.0 if self.open_until is None else max(0.0, self.open_until - now)

    def failed(self, now: float, pause: float) -> bool:
        """Count one upstream failure; True when it opens the breaker."""
        with self._lock:
            self.failures += 1
            if self.failures < self.threshold or pause <= 0:
                return False
            self.open_until = now + pause
            self.failures = self.threshold - 1
            return True

    def succeeded(self) -> None:
        with self._lock:
            self.failures = 0
            self.open_until = None


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None:
        _seconds("timeout", timeout, "a finite number of seconds > 0", zero=False)


def _seconds(
    name: str, value: object, accepts: str, *, zero: bool = True, scale: float = 1.0
) -> float:
    """`value` as a float; TypeError unless it is a real number (not a bool, not
    text), ValueError unless finite (also times `scale`) and >= 0 (> 0 unless `zero`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be {accepts}, not {value!r}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number * scale) or number < 0 or (number == 0 and not zero):
        shown = f"{value!r}" if len(repr(value)) <= 40 else f"a {len(str(value))}-digit number"
        raise ValueError(f"{name} must be {accepts}, not {shown}")
    return number


#: The latest time a clock may report (the year 9999): a later one cannot be a date.
_LAST_TIME = 253402300799.0


def _past(deadline: float | None, ahead: float = 0.0) -> bool:
    """Whether `deadline` (a `time.monotonic()` instant) has passed, `ahead` seconds on."""
    return deadline is not None and time.monotonic() + ahead >= deadline


@dataclass(frozen=True)
class _Answer:
    """An upstream answer reduced to what the reaction table needs."""

    outcome: Outcome
    status: int | None
    detail: str
    retry_after: float | None


def _expected_credits(path: str, body: Mapping[str, Any]) -> float:
    """What a request costs when Tavily does not say (or is not believed): a
    search's price by depth, known in advance; the other endpoints' cost
    depends on the pages, count one."""
    if path != "/search":
        return 1.0
    return float(SEARCH_CREDITS.get(str(body.get("search_depth", "basic")), 1))


def _maybe_served(result: object) -> bool:
    """True for a failure after the request reached Tavily: the answer timed out or
    broke off while it was read (Tavily may have served and charged it)."""
    return isinstance(
        result, httpx.ReadTimeout | httpx.ReadError | httpx.RemoteProtocolError | DeadlineExceeded
    )


def _advance(flow: Generator[_Step, Any, Any], value: Any) -> tuple[bool, Any]:
    """Send `value` into `flow`: `(False, next step)` or `(True, its return value)`."""
    try:
        return False, flow.send(value)
    except StopIteration as stop:
        return True, stop.value


class Router:
    """A quota-aware client for several Tavily keys.

    ```python
    router = Router(["tvly-dev-test0001", "tvly-dev-test0002"], state="state/quota.json")
    result = router.search("python 3.13 release date", max_results=3)
    ```

    Keys are chosen by real remaining quota; invalid, rate-limited, exhausted
    and cooling keys are skipped; every answer updates the key's state
    according to one reaction table (`searchfuse.router.policy.REACTIONS`).

    Args:
        keys: API keys (strings or [`KeyEntry`][searchfuse.router.KeyEntry]), or a
            [`Config`][searchfuse.router.Config].
        state: a path (JSON file shared by processes), a [`Store`][searchfuse.router.Store], or
            `None` for in-memory state.
        base_url: Tavily's address; `TAVILY_BASE_URL` overrides the default.
        clock: zero-argument callable returning epoch seconds.
        sleep: how to wait between retries (default: real sleep, or the
            testing clock under [`searchfuse.testing.set_testing`][searchfuse.testing.set_testing]).
        on_429: `"stop"` (raise [`RateLimited`][searchfuse.errors.RateLimited], try no other key),
            `"retry"` (two retries on the same key, then stop) or
            `"failover"` (try the next key).
        cooldown_minutes: fallback cooldown (float); defaults to the config's
            value, else 1.0.
        timeout: httpx timeout for each request.
        sync_interval: seconds after which a key's `/usage` figures are stale.
        transport: the httpx transport for `search` and friends (the test seam).
        async_transport: the httpx transport for `asearch` and friends.
        fallback: `fallback(query, max_results=..., **params) -> dict` (sync or
            async), used only when no key can serve for a reason other than a
            rate limit (auth failure, exhausted quota, Tavily failing).
        pace: keep every key within its request rate (`keys[].rpm`, else
            `SEARCHFUSE_RPM`, else Tavily's published limit), across every
            process sharing the store; `False` turns pacing off.
        max_wait: the longest a call waits for a key to have room (through
            `clock` and `sleep`) before raising [`Throttled`][searchfuse.errors.Throttled].
        deadline: seconds within which every call ends, whatever the server
            does (drip, silence): fail-over, `/usage` and retries included
            (default 60; `None` for none).
        max_keys_per_call: the most keys one call tries before it gives up
            (default 3).
        breaker_threshold: upstream failures in a row (5xx, timeouts, no
            connection) after which the whole router pauses for
            `cooldown_minutes` (default 6).
    """

    def __init__(
        self,
        keys: Sequence[str | KeyEntry] | Config,
        *,
        state: Store | str | os.PathLike[str] | None = None,
        base_url: str | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
        on_429: On429 = "stop",
        cooldown_minutes: float | None = None,
        timeout: httpx.Timeout | float | None = None,
        sync_interval: float = DEFAULT_SYNC_INTERVAL,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        fallback: Callable[..., Any] | None = None,
        pace: bool = True,
        max_wait: float = DEFAULT_MAX_WAIT,
        deadline: float | None = DEFAULT_DEADLINE,
        max_keys_per_call: int = DEFAULT_MAX_KEYS_PER_CALL,
        breaker_threshold: int = DEFAULT_BREAKER_THRESHOLD,
        _missing: str | None = None,
        _environ: Mapping[str, str] | None = None,
    ) -> None:
        if on_429 not in ("stop", "retry", "failover"):
            raise ValueError(f"on_429 must be 'stop', 'retry' or 'failover', not {on_429!r}")
        if deadline is not None:
            _seconds("deadline", deadline, "a finite number of seconds > 0, or None", zero=False)
        if timeout is not None and not isinstance(timeout, httpx.Timeout):
            _seconds(
                "timeout",
                timeout,
                "a finite number of seconds > 0, an httpx.Timeout, or None",
                zero=False,
            )
        _seconds("sync_interval", sync_interval, "a finite number of seconds >= 0")
        if clock is not None and not callable(clock):
            raise TypeError(
                f"clock must be a function returning time.time()-like seconds, not {clock!r}"
            )
        if sleep is not None and not callable(sleep):
            raise TypeError(f"sleep must be a function taking seconds, not {sleep!r}")
        self._environ = os.environ if _environ is None else _environ
        for name, count in (
            ("max_keys_per_call", max_keys_per_call),
            ("breaker_threshold", breaker_threshold),
        ):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"{name} must be a whole number >= 1, not {count!r}")
        self.deadline = None if deadline is None else float(deadline)
        self.max_keys_per_call = max_keys_per_call
        self._breaker = _Breaker(breaker_threshold)
        self.fallback = fallback
        if fallback is not None and not keys:
            self.config = Config((), source=_missing or "Router(keys=[])")
        else:
            self.config = keys_from(keys)
        minutes = self.config.cooldown_minutes if cooldown_minutes is None else cooldown_minutes
        _seconds("cooldown_minutes", minutes, "a finite number of minutes >= 0", scale=60.0)
        # A float all the way: int(0.5) once turned a 30 s cooldown into none (incident 4).
        self.cooldown_seconds = float(minutes) * 60.0
        self.on_429: On429 = on_429
        self.sync_interval = float(sync_interval)
        _seconds("max_wait", max_wait, "a finite number of seconds >= 0")
        self.pace = bool(pace)
        self.max_wait = float(max_wait)
        self._rpm = {entry.fingerprint: key_rpm(entry, self._environ) for entry in self.config.keys}
        self.store = open_store(state)
        self.http = TavilyHTTP(
            base_url,
            timeout=timeout,
            transport=transport,
            async_transport=async_transport,
            environ=self._environ,
        )
        self._clock = clock
        self._sleep = sleep
        self._secrets = tuple(entry.key for entry in self.config.keys)
        self._sticky: tuple[str, float] | None = None
        self._sticky_lock = threading.Lock()
        self._view_lock = threading.RLock()
        self._ranking = Ranking(self.config.keys)
        self._view_state: State | None = None
        self._view_token: Any = None
        #: The last grant found the store unchanged by others (see `_pick_with_state`).
        self._trusted = False
        self._pending: list[Callable[[State], None]] = []
        self._pending_lock = threading.Lock()
        self._warn_if_degraded(_missing)

    # -- construction ---------------------------------------------------------------

    @classmethod
    def from_config(
        cls, path: str | os.PathLike[str] = "config/keys.json", **options: Any
    ) -> Router:
        """A router for the keys in `path`; state defaults to `state/searchfuse.db`
        beside the `config/` folder (a `state/quota.json` there is imported
        once). Legacy files are migrated (backup first)."""
        try:
            config = load_config(path, clock=options.get("clock"))
        except ConfigError as exc:
            if options.get("fallback") is None:
                raise
            return cls([], _missing=f"{exc.source} ({exc.problem})", **options)
        if "state" not in options:
            base = config.path.parent.parent if config.path else None
            options["state"] = (base / "state" / "searchfuse.db") if base else None
        return cls(config, **options)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> Router:
        """A router for the keys in `TAVILY_API_KEYS` or `TAVILY_API_KEY`,
        `TAVILY_API_KEY_2`, ... State goes to `SEARCHFUSE_STATE` if set,
        else stays in memory."""
        env = os.environ if environ is None else environ
        if not isinstance(env, Mapping):
            raise TypeError(
                f"environ must be a mapping of names to values (like os.environ), not {env!r}"
            )
        try:
            config = config_from_env(env)
        except ConfigError as exc:
            if options.get("fallback") is None:
                raise
            return cls([], _missing=f"{exc.field} ({exc.problem})", _environ=env, **options)
        if "state" not in options and env.get("SEARCHFUSE_STATE"):
            options["state"] = env["SEARCHFUSE_STATE"]
        return cls(config, _environ=env, **options)

    def __repr__(self) -> str:
        keys = ", ".join(entry.masked for entry in self.config.keys)
        return f"Router([{keys}], state={self.store!r}, base_url={self.http.base_url!r})"

    def _fallback_name(self) -> str:
        fb = self.fallback
        return str(getattr(fb, "__qualname__", None) or getattr(fb, "__name__", None) or repr(fb))

    def _warn_if_degraded(self, missing: str | None) -> None:
        """Say once, at construction, when this router will not serve as configured."""
        serving = (
            f"searches will be served by the fallback {self._fallback_name()}"
            if self.fallback is not None
            else "searches will fail with NoKeyAvailable"
        )
        if not self.config.keys:
            log.warning("no Tavily keys: %s is missing; %s", missing or "the key list", serving)
            return
        now, cands = self._snapshot()
        blocked = {c.entry.masked: blocked_reason(c, now) for c in cands}
        if any(why is None for why in blocked.values()):
            return
        lasting = [c for c in cands if c.state.disabled or c.state.exhausted]
        if len(lasting) == len(cands):
            log.warning(
                "all %d Tavily key(s) from %s are disabled or exhausted according to %r; %s",
                len(cands),
                self.config.source,
                self.store,
                serving,
            )

    # -- small helpers -------------------------------------------------------------

    @property
    def keys(self) -> tuple[KeyEntry, ...]:
        """The configured keys (`repr` masks them)."""
        return self.config.keys

    def now(self) -> float:
        """The router's clock (ValueError if it reports no usable time)."""
        if self._clock is None:
            return _clock.now()
        now = self._clock()
        if (
            isinstance(now, bool)
            or not isinstance(now, int | float)
            or not 0 <= now <= _LAST_TIME  # also NaN
        ):
            raise ValueError(
                f"the router's clock returned {now!r}: it must return seconds since "
                "the epoch like time.time() (a finite number, before the year 10000)"
            )
        return float(now)

    def _scrub(self, text: str) -> str:
        return redact(text, self._secrets)

    def _view(self, now: float) -> State:
        """The store's state as of `now`, kept up to date from what changed."""
        with self._view_lock:
            return self._refresh(now)

    def _refresh(self, now: float) -> State:
        """Bring the view and the ranking up to date (hold `_view_lock`).

        Each look asks the store only for the records changed since the last
        one (for SQLite one indexed query, none when nothing changed), so a
        search does not reread every key, and the ranking re-scores only those.
        The view is never modified in place: a change makes a new one, so
        readers in other threads always see a whole state.
        """
        changes = self.store.changes(now, self._view_token)
        old = self._view_state
        if changes.complete or old is None or old.month != changes.month:
            state = changes.as_state()
            self._ranking.update(state, None, ())
        elif (
            changes.keys
            or changes.accounts
            or (changes.hold_until, changes.hold_key) != (old.hold_until, old.hold_key)
        ):
            state = State(
                month=changes.month,
                keys={**old.keys, **changes.keys} if changes.keys else old.keys,
                accounts=(
                    {**old.accounts, **changes.accounts} if changes.accounts else old.accounts
                ),
                hold_until=changes.hold_until,
                hold_key=changes.hold_key,
            )
            self._ranking.update(state, changes.keys, changes.accounts)
        else:
            state = old
        self._view_state, self._view_token = state, changes.token
        return state

    def _snapshot(self) -> tuple[float, list[Candidate]]:
        now = self.now()
        return now, candidates(self.config.keys, self._view(now))

    def _pick_with_state(self, tried: set[str]) -> tuple[KeyEntry | None, State, float]:
        """The key to use next, with the state snapshot it was chosen from."""
        now = self.now()
        with self._view_lock:
            trusted, self._trusted = self._trusted, False
            sticky = self._sticky
            if (
                trusted
                and self._view_state is not None
                and sticky is not None
                and now - sticky[1] < STICKY_WINDOW
                and sticky[0] not in tried
            ):
                # The store's last grant to this router found nothing written by
                # anyone else since its own writes: a burst staying on its key
                # need not ask the store again. The next grant decides under the
                # store's lock anyway (hold, cooldown, pacing), on fresh rows.
                state = self._view_state
            else:
                state = self._refresh(now)
            # The hold and the parked key are written in one update, so a thread
            # that sees the key parked also sees the hold (no walk to the next key).
            self._refuse_if_held(state, now)
            with self._sticky_lock:
                # Searches that come in a burst stay on one key: if the burst draws a
                # 429, only that key is touched (incident 1). Across bursts the most
                # remaining quota wins again.
                choice = None
                if self._sticky is not None and now - self._sticky[1] < STICKY_WINDOW:
                    fp = self._sticky[0]
                    if fp not in tried and self._ranking.usable(fp, now) is not None:
                        choice = self._ranking.entries[fp]
                if choice is None:
                    ranked = self._ranking.best(now, exclude=tried)
                    if not ranked:
                        return None, state, now
                    choice = ranked[0].entry
                self._sticky = (choice.fingerprint, now)
        return choice, state, now

    def _no_key(
        self,
        failures: dict[str, str],
        failed: Sequence[Outcome] = (),
        cut: str | None = None,
        outage: tuple[str, str, float | None] | None = None,
        *,
        timed_out: bool = False,
    ) -> NoKeyAvailable:
        """The refusal when this call cannot be served, with its diagnosis.

        `failed` are the outcomes of the keys this call tried; `cut` says
        why it stopped trying (deadline, key bound). Keys the state still
        calls available are then not "healthy": this call just saw them fail.
        `timed_out`: every key tried went unanswered in time, or the deadline passed.
        """
        now, cands = self._snapshot()
        reasons: dict[str, str] = {}
        for c in cands:
            why = failures.get(c.entry.masked) or blocked_reason(c, now) or "available"
            reasons[c.entry.masked] = why
        if outage is None and failed:
            kinds = set(failed)
            verdict = (
                "auth"
                if kinds <= {Outcome.AUTH}
                else "exhausted"
                if kinds <= {Outcome.EXHAUSTED}
                else "upstream"
            )
            summary = "; ".join(f"{key}: {why}" for key, why in failures.items())
            advice = f"this call tried {len(failures)} key(s) and each failed ({summary})"
            advice += f"; {cut}." if cut else "."
            outage = (verdict, advice, None)
        elif outage is None and cut:
            outage = ("upstream", f"this call stopped: {cut}.", None)
        diagnosis = diagnose_candidates(
            cands, cands, now, None, self._hold(), outage, secrets=self._secrets
        )
        return NoKeyAvailable(
            reasons, retry_after=diagnosis.retry_after, diagnosis=diagnosis, timed_out=timed_out
        )

    def _masked(self, fp: str | None) -> str:
        return next((e.masked for e in self.config.keys if e.fingerprint == fp), "a key")

    def _refuse_if_broken(self) -> None:
        """Refuse without a request while the router-wide breaker is open."""
        left = self._breaker.left(self.now())
        if left > 0:
            advice = (
                f"Tavily failed {self._breaker.threshold} times in a row (5xx, timeouts or no "
                f"connection); the router pauses every request for {duration(left)}."
            )
            raise self._no_key({}, outage=("upstream", advice, left))

    def _hold_of(self, state: State, now: float) -> tuple[float, str | None]:
        """Seconds left on the router-wide rate-limit hold, and the masked key that set it."""
        if self.on_429 == "failover":
            return 0.0, None
        masked = next((e.masked for e in self.config.keys if e.fingerprint == state.hold_key), None)
        return state.hold_left(now), masked

    def _hold(self) -> tuple[float, str | None]:
        now = self.now()
        return self._hold_of(self._view(now), now)

    def _refuse_if_held(self, state: State, now: float) -> None:
        left, masked = self._hold_of(state, now)
        if left > 0:
            raise CooldownActive(left, cause=f"rate limit (429 on {masked or 'a key'})")

    # -- state changes ---------------------------------------------------------------

    def _acquire(
        self, entry: KeyEntry, credits: float | None = None, *, honour_hold: bool = True
    ) -> Grant:
        """One transaction: the hold, the key's state, a slot in its pacing log and,
        with `credits`, the search counted in advance (see `_settle`)."""
        now = self.now()
        fp = entry.fingerprint
        rpm = self._rpm[fp] if self.pace else None
        honour = honour_hold and self.on_429 != "failover"
        charge = None if credits is None else Charge(fp, entry.account_id, entry.account, credits)
        # One transaction; a store may have a cheaper way to the same decision (SQLite has).
        result = self.store.grant(
            now, fp, rpm=rpm, window=PACE_WINDOW, honour_hold=honour, charge=charge
        )
        self._trusted = result.verdict == "ok" and result.fresh
        return result

    def _settle(self, entry: KeyEntry, charged: _Charged | None, credits: float) -> None:
        """Record a served answer that cost `credits`.

        A search is counted when it is granted (with its expected price), so
        the usual success -- the price as expected, on a key whose last answer
        was already a 200 -- needs no second transaction. Anything else is
        corrected here; a search that was not served is refunded by `_react`.
        """
        if charged is None:
            self._record_success(entry, credits)
            return
        if charged.clean and credits == charged.credits:
            return
        self._record_served(
            self.now(),
            entry,
            lambda state: state.settle(
                entry.fingerprint, entry.account_id, entry.account, charged.credits, credits
            ),
        )

    def _sync_due(self, entry: KeyEntry, state: State, now: float) -> bool:
        """True if the key's figures are missing or stale (`/usage`'s own limit is
        checked when the call is reserved)."""
        ks = state.keys.get(entry.fingerprint)
        if ks is None:
            return True
        if ks.last_sync_at is not None and now - ks.last_sync_at < self.sync_interval:
            return False
        return ks.usage_blocked_until is None or ks.usage_blocked_until <= now

    def _reserve_usage_call(self, entry: KeyEntry) -> bool:
        """Count a `/usage` call against Tavily's limit before making it; False if over.

        The call is claimed for `USAGE_CLAIM` seconds: the other searches of a burst
        (threads, tasks, processes) do not start a sync of the same key meanwhile.
        """
        now = self.now()

        def change(state: State) -> bool:
            ks = state.key(entry.fingerprint)
            if ks.usage_blocked_until is not None and ks.usage_blocked_until > now:
                return False
            name = f"usage:{entry.fingerprint}"
            if state.take(name, USAGE_CALLS_PER_WINDOW, USAGE_WINDOW, now) > 0:
                return False
            ks.usage_blocked_until = now + USAGE_CLAIM
            return True

        return self.store.update(now, change)

    def _record_usage(self, entry: KeyEntry, result: Reply | BaseException) -> int | None:
        """Store a `/usage` answer. Returns its HTTP status (`None` for a transport error)."""
        now = self.now()
        if isinstance(result, BaseException):
            log.info("usage sync for %s failed: %s", entry.masked, type(result).__name__)
            return None
        status = result.status_code
        if status == 200:
            try:
                usage = Usage.from_json(result.json())
            except ValueError:
                return None
            same_account = [
                e.fingerprint for e in self.config.keys if e.account_id == entry.account_id
            ]
            key_figures = KeyUsage(usage.key_usage, usage.key_limit, usage.search_usage)
            plan = AccountUsage(
                current_plan=usage.current_plan,
                plan_usage=usage.plan_usage,
                plan_limit=usage.plan_limit,
                paygo_usage=usage.paygo_usage,
                paygo_limit=usage.paygo_limit,
            )

            def store_usage(state: State) -> None:
                state.apply_usage(
                    entry.fingerprint,
                    entry.account_id,
                    entry.account,
                    key_figures,
                    plan,
                    same_account,
                    now,
                    auth_reason=Outcome.AUTH,
                )

            self.store.update(now, store_usage)
            return status
        detail = self._scrub(error_detail(result))
        outcome = policy.classify_status(status)
        if outcome is Outcome.RATE_LIMITED:
            # /usage has its own limit; its 429 says nothing about searches (incident 3).
            wait = policy.parse_retry_after(result.headers.get("retry-after"), now)
            until = now + policy.clamp_park(wait if wait is not None else USAGE_WINDOW)

            def block(state: State) -> None:
                state.key(entry.fingerprint).usage_blocked_until = until

            self.store.update(now, block)
        elif outcome in (Outcome.AUTH, Outcome.EXHAUSTED):
            self._react(entry, _Answer(outcome, status, detail, None))
        else:
            # 5xx, 404, a redirect: /usage failing says nothing about the key.
            log.info("usage sync for %s answered %s; searching without it", entry.masked, status)
        return status

    def _record_success(self, entry: KeyEntry, credits: float) -> None:
        now = self.now()
        self._record_served(
            now,
            entry,
            lambda state: state.apply_success(
                entry.fingerprint, entry.account_id, entry.account, credits, now
            ),
        )

    def _record_served(self, now: float, entry: KeyEntry, change: Callable[[State], None]) -> None:
        """Record what a served answer changed. Tavily has served (and charged): a store
        that fails now must not lose the result, so the change waits for the next write."""
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

    def _record_refund(self, entry: KeyEntry, charged: _Charged) -> None:
        """Take back what was counted for a search that was not served."""
        self.store.update(
            self.now(),
            lambda state: state.refund(entry.fingerprint, entry.account_id, charged.credits),
        )

    def _react(
        self,
        entry: KeyEntry,
        answer: _Answer,
        *,
        park: bool = True,
        refund: _Charged | None = None,
        retry_hold: float = 0.0,
    ) -> float:
        """Apply the reaction table row for `answer` to `entry`; returns the cooldown set.

        `refund`: the search was counted when granted, and was not served.
        `retry_hold` (with `park=False`, for `on_429="retry"`): hold the router for
        that long unless a hold already runs; returns `retry_hold` if this call
        took the hold (it retries for the burst), else 0.0.
        """
        self._trusted = False  # the view does not show what this writes
        now = self.now()
        reaction = policy.REACTIONS[answer.outcome]
        hold = reaction.holds_router and self.on_429 != "failover"
        seconds = reaction.park_seconds(answer.retry_after, self.cooldown_seconds)
        label = f"{answer.status}" if answer.status is not None else "no answer"
        error = self._scrub(f"{label}: {answer.detail}" if answer.detail else label)

        def change(state: State) -> float:
            # The park and the hold are one transaction: a process that sees the
            # key parked also sees the hold, and refuses without a request.
            if refund is not None:
                state.refund(entry.fingerprint, entry.account_id, refund.credits)
            ks = state.key(entry.fingerprint)
            ks.account = entry.account
            ks.last_status = answer.status
            if not reaction.penalises_key:
                return 0.0
            ks.note_error(now, answer.status, error)
            if reaction.park is Park.EXHAUSTED:
                ks.exhausted = True
            elif park and seconds > 0:
                ks.park(now, seconds, str(answer.outcome))
                if hold:
                    state.hold(entry.fingerprint, now + seconds)
            elif retry_hold > 0 and state.hold_left(now) <= 0:
                state.hold(entry.fingerprint, now + retry_hold)
                return retry_hold
            return 0.0

        took = self.store.update(now, change)
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

    # -- classification --------------------------------------------------------------

    def _classify(self, result: Reply | BaseException) -> _Answer:
        now = self.now()
        if isinstance(result, BaseException):
            outcome = policy.classify_exception(result)
            if outcome is None:
                raise result
            status = policy.status_of(result)
            detail = self._scrub(short_text(str(result) or type(result).__name__))
            return _Answer(outcome, status, detail, policy.retry_after_of(result, now))
        status = result.status_code
        outcome = policy.classify_status(status)
        if outcome is Outcome.OK:
            return _Answer(outcome, status, "", None)  # a Retry-After says nothing here
        detail = self._scrub(error_detail(result))
        retry_after = policy.parse_retry_after(result.headers.get("retry-after"), now)
        return _Answer(outcome, status, detail, retry_after)

    # -- the flows ---------------------------------------------------------------------

    def _key_flow(
        self,
        make_step: Callable[[KeyEntry], _Search | _Call],
        deadline: float | None = None,
        credits: float = 0.0,
    ) -> Generator[_Step, Any, tuple[KeyEntry, Any, _Charged | None]]:
        """Pick a key, sync it if due, run one step on it, react, fail over as the table says.

        Returns `(entry, outcome, charged)`: the key that served, the successful
        answer (a response, or a `_Returned`), and what was counted when the
        key was granted (`credits` expected; `None` without pacing). Bounded:
        at most `max_keys_per_call` keys, nothing after `deadline`, at most
        `MAX_WAIT` seconds of retry waits.
        """
        tried: set[str] = set()
        failures: dict[str, str] = {}
        #: Keys whose pacing log is full, and when each has room again.
        paced: dict[str, float] = {}
        # Pacing waits go through the router's clock; the call's deadline is real time.
        wait_until = self.now() + self.max_wait
        failed: list[Outcome] = []
        #: The keys of `failures` that did not answer in time.
        slow: set[str] = set()
        synced = False
        waited = 0.0
        while True:
            if len(tried) >= self.max_keys_per_call:
                raise self._no_key(
                    failures,
                    failed,
                    f"a call tries at most {self.max_keys_per_call} key(s)",
                    timed_out=bool(failures) and slow >= failures.keys(),
                )
            self._refuse_if_broken()
            entry, state, now = self._pick_with_state(tried | paced.keys())
            if entry is None:
                if not paced:
                    raise self._no_key(
                        failures, failed, timed_out=bool(failures) and slow >= failures.keys()
                    )
                # Every key that could serve is at its rate: wait for the first
                # to have room, within max_wait; never send what would be a 429.
                wait = max(0.0, min(paced.values()) - now)
                # A wait that would outlast max_wait or the call's deadline is
                # refused now, not slept through and then refused.
                if now + wait > wait_until or _past(deadline, wait):
                    raise Throttled(retry_after=wait)
                _telemetry.paced_wait(wait)
                yield _Sleep(wait)
                paced.clear()
                continue
            if not synced and self._sync_due(entry, state, now):
                state = self._view(now)  # the figures may be newer than the pick's view
            if not synced and self._sync_due(entry, state, now) and self._reserve_usage_call(entry):
                synced = True
                status = self._record_usage(entry, (yield _Usage(entry)))
                usage_outcome = policy.classify_status(status) if status is not None else None
                if usage_outcome is Outcome.AUTH or usage_outcome is Outcome.EXHAUSTED:
                    tried.add(entry.fingerprint)
                    failures[entry.masked] = f"/usage answered {status}"
                    failed.append(usage_outcome)
                    continue
                # Any other failure of /usage (5xx, 404, a redirect, no answer): usage
                # sync is an optimisation, the search goes ahead on this key.
                now, cands = self._snapshot()
                fresh = next(c for c in cands if c.entry == entry)
                if blocked_reason(fresh, now) is not None:
                    # The fresh figures say this key is spent; the next one is not synced
                    # in the same search (one /usage per search at most, incident 3).
                    tried.add(entry.fingerprint)
                    failures[entry.masked] = blocked_reason(fresh, now) or "exhausted"
                    failed.append(Outcome.EXHAUSTED)
                    continue
            if _past(deadline):
                raise self._no_key(
                    failures, failed, f"the deadline of {self.deadline:g} s passed", timed_out=True
                )
            charged: _Charged | None = None
            if self.pace:
                grant = self._acquire(entry, credits)
                if grant.verdict == "held":
                    masked = self._masked(grant.hold_key)
                    raise CooldownActive(grant.wait, cause=f"rate limit (429 on {masked})")
                if grant.verdict == "paced":
                    paced[entry.fingerprint] = now + grant.wait
                    continue
                if grant.verdict == "blocked":
                    # Another process parked it since our snapshot.
                    tried.add(entry.fingerprint)
                    failures[entry.masked] = str(grant.availability)
                    continue
                charged = _Charged(credits, grant.clean)
            attempt = 0
            while True:
                result = yield make_step(entry)
                if isinstance(result, _Returned):
                    self._breaker.succeeded()
                    return entry, result, charged
                try:
                    answer = self._classify(result)
                except BaseException:
                    if charged is not None:
                        # The caller's own function failed: nothing was served.
                        self._record_refund(entry, charged)
                    raise
                reaction = policy.REACTIONS[answer.outcome]
                if answer.outcome is Outcome.OK:
                    self._breaker.succeeded()
                    return entry, result, charged
                if (
                    reaction.failover is None
                    and self.on_429 == "retry"
                    and attempt < RETRIES_ON_429
                ):
                    # A server's Retry-After wins over our doubling: a retry it would
                    # refuse is not sent; all waits of one call together stay within
                    # MAX_WAIT, and within the deadline.
                    left = policy.MAX_WAIT - waited
                    retry_wait = answer.retry_after
                    if retry_wait is None:
                        retry_wait = min(FIRST_RETRY_WAIT * 2**attempt, left)
                    retry_wait = max(retry_wait, 0.0)
                    if 0 < retry_wait <= left and not _past(deadline, retry_wait):
                        # The router is held meanwhile, as for "stop": the rest of the
                        # burst is refused without a request. Only the call whose 429
                        # came first retries; one that finds a hold already running stops.
                        owns = self._react(
                            entry, answer, park=False, refund=charged, retry_hold=retry_wait
                        )
                        charged = None
                        if not owns:
                            raise RateLimited(retry_after=self._hold()[0], key=entry.masked)
                        attempt += 1
                        waited += retry_wait
                        yield _Sleep(retry_wait)
                        if self.pace:
                            # The hold it set is this retry's own: not honoured.
                            grant = self._acquire(entry, credits, honour_hold=False)
                            if grant.verdict != "ok":
                                break  # no room for the retry: stop as after the last retry
                            charged = _Charged(credits, grant.clean)
                        continue
                break
            # An answer that stopped coming may have been served, and charged: it
            # stays counted (counters err on the side of quota spent).
            cooldown = self._react(entry, answer, refund=None if _maybe_served(result) else charged)
            if reaction.trips_breaker and self._breaker.failed(self.now(), self.cooldown_seconds):
                log.warning(
                    "Tavily failed %d times in a row; every request pauses for %s",
                    self._breaker.threshold,
                    duration(self.cooldown_seconds),
                )
            if reaction.failover is False:
                raise self._stopped(answer, result)
            if reaction.failover is None and self.on_429 != "failover":
                # A burst that 429s one key 429s them all (incident 1): stop here,
                # and hold the whole router so the rest of the burst cannot walk
                # through the other keys.
                raise RateLimited(retry_after=cooldown, key=entry.masked)
            tried.add(entry.fingerprint)
            failed.append(answer.outcome)
            failures[entry.masked] = f"{answer.status or 'no answer'} {answer.outcome}" + (
                f" ({answer.detail})" if answer.detail else ""
            )
            if isinstance(result, httpx.TimeoutException | TimeoutError):
                slow.add(entry.masked)

    def _stopped(self, answer: _Answer, result: Any) -> BaseException:
        """The error for an answer after which no other key is tried (the table says so)."""
        if isinstance(result, BaseException) and (
            answer.outcome is Outcome.MISCONFIGURED or not isinstance(result, httpx.HTTPError)
        ):
            # The caller's own function failed (our client never raises for a status):
            # its exception, unchanged.
            return result
        if answer.outcome is Outcome.MISCONFIGURED:
            source = "TAVILY_BASE_URL" if self._environ.get("TAVILY_BASE_URL") else "base_url"
            return ConfigError(
                "environment" if source.isupper() else "Router",
                source,
                f"{self.http.base_url} answered {answer.status} to a search: it is not "
                "Tavily's API (Tavily never redirects and always has /search)",
                f"set {source} to https://api.tavily.com, or to the address of your proxy",
            )
        return BadRequest(answer.detail, status=answer.status or 400)

    def _request_flow(
        self,
        path: str,
        body: dict[str, Any],
        timeout: float | None = None,
        deadline: float | None = None,
    ) -> Generator[_Step, Any, dict[str, Any]]:
        try:
            entry, response, charged = yield from self._key_flow(
                lambda e: _Search(e, body, path, timeout), deadline, _expected_credits(path, body)
            )
        except NoKeyAvailable as exc:
            verdict = exc.diagnosis.verdict if exc.diagnosis is not None else None
            # The fallback is a search function: it can stand in for /search only.
            if self.fallback is None or path != "/search" or self._rate_limited():
                raise
            log.info(
                "no key can serve (%s); the fallback %s serves", verdict, self._fallback_name()
            )
            served = yield _Fallback(body)
            result = dict(served) if isinstance(served, dict) else {"results": served}
            result["searchfuse"] = {
                "served_by": "fallback",
                "fallback": self._fallback_name(),
                "reason": verdict,
            }
            return result
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            self._react(
                entry,
                _Answer(Outcome.UPSTREAM, 200, "answer was not a JSON object", None),
                refund=charged,
            )
            raise SearchFailed(
                f"Tavily answered {response.status_code} with a body that is not a JSON object"
            )
        usage = data.get("usage")
        credits = figure(usage.get("credits")) if isinstance(usage, dict) else None
        if path == "/search" and credits is not None and credits > MAX_SEARCH_CREDITS:
            credits = None
        if credits is None:
            credits = _expected_credits(path, body)
        self._settle(entry, charged, credits)
        data["searchfuse"] = {"served_by": "tavily", "key": entry.masked}
        return data

    def _rate_limited(self) -> bool:
        """Whether any key is cooling after a 429 (then the fallback must not serve)."""
        now, cands = self._snapshot()
        return any(
            c.state.cooling(now) and c.state.cooldown_reason == Outcome.RATE_LIMITED for c in cands
        )

    def _fallback_args(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        params = {k: v for k, v in body.items() if k not in ("query", "include_usage")}
        return str(body["query"]), params

    def _call_flow(self, deadline: float | None = None) -> Generator[_Step, Any, Any]:
        entry, returned, charged = yield from self._key_flow(_Call, deadline)
        self._settle(entry, charged, 0.0)
        return returned.value

    @staticmethod
    def _body(query: str, max_results: int, params: dict[str, Any]) -> dict[str, Any]:
        return Router._request_body(
            "/search", {"query": query, "max_results": max_results, **params}
        )

    @staticmethod
    def _request_body(endpoint: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {', '.join(ENDPOINTS)}, not {endpoint!r}")
        if not isinstance(body, Mapping):
            raise TypeError(f"body must be a mapping, not {type(body).__name__}")
        if "api_key" in body:
            raise TypeError(
                "pass keys to the Router, not in the request: api_key is not a parameter"
            )
        if endpoint == "/search":
            problem = query_problem(body.get("query"))
            if problem is not None:
                raise BadRequest(problem, sent=False)
        sent = {k: v for k, v in body.items() if v is not None}
        # Count credits locally instead of asking /usage before every request (incident 3).
        sent.setdefault("include_usage", True)
        try:
            # Encoded once, here, before any key is granted; the request sends this text.
            return JSONBody(sent)
        except UnicodeEncodeError:
            # A lone surrogate: half an emoji, cut off in a model's JSON tool call.
            raise BadRequest(LONE_SURROGATE, sent=False) from None
        except RecursionError:
            raise BadRequest(
                "the parameters are nested too deeply to be sent as JSON", sent=False
            ) from None
        except (TypeError, ValueError) as exc:
            raise BadRequest(f"the parameters cannot be sent as JSON ({exc})", sent=False) from None

    # -- drivers ---------------------------------------------------------------------

    def _deadline_at(self, at_least: float | None = None) -> float | None:
        """The `time.monotonic()` instant by which a call starting now must end.

        `at_least`: a request timeout the caller chose (a crawl may take
        minutes); the call's deadline never cuts it short.
        """
        if self.deadline is None:
            return None
        seconds = self.deadline if at_least is None else max(self.deadline, at_least)
        return time.monotonic() + seconds

    def _usage_deadline(self, deadline: float | None) -> float | None:
        """`/usage` may use a share of the time left: the search must still fit."""
        if deadline is None:
            deadline = self._deadline_at()
            if deadline is None:
                return None
        now = time.monotonic()
        return now + max(deadline - now, 0.0) * USAGE_SHARE

    def _drive(
        self,
        flow: Generator[_Step, Any, T],
        fn: Callable[[str], Any] | None = None,
        deadline: float | None = None,
    ) -> T:
        try:
            step = next(flow)
            while True:
                result: Any
                if isinstance(step, _Sleep):
                    (self._sleep or _clock.sleep)(step.seconds)
                    result = None
                elif isinstance(step, _Usage):
                    try:
                        result = self.http.usage(step.entry.key, self._usage_deadline(deadline))
                    except httpx.HTTPError as exc:
                        result = exc
                elif isinstance(step, _Search):
                    try:
                        result = self.http.post(
                            step.entry.key, step.path, step.body, deadline, timeout=step.timeout
                        )
                    except httpx.HTTPError as exc:
                        result = exc
                elif isinstance(step, _Fallback):
                    assert self.fallback is not None
                    query, params = self._fallback_args(step.body)
                    result = self.fallback(query, **params)
                    if inspect.isawaitable(result):
                        raise TypeError("an async fallback needs asearch(), not search()")
                else:
                    assert fn is not None
                    try:
                        result = _Returned(fn(step.entry.key))
                    except Exception as exc:
                        result = exc
                step = flow.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def _adrive(
        self,
        flow: Generator[_Step, Any, T],
        fn: Callable[[str], Awaitable[Any]] | None = None,
        deadline: float | None = None,
    ) -> T:
        # The flow does its store work between steps. A store that may wait for a
        # lock (SQLite, a file, Redis) is driven from a worker thread, so the event
        # loop never blocks on another process's transaction.
        offload = self.store.blocking
        result: Any = None
        while True:
            if offload:
                done, step = await asyncio.to_thread(_advance, flow, result)
            else:
                done, step = _advance(flow, result)
            if done:
                return step  # type: ignore[no-any-return]
            if isinstance(step, _Sleep):
                if self._sleep is not None:
                    self._sleep(step.seconds)
                else:
                    await _clock.asleep(step.seconds)
                result = None
            elif isinstance(step, _Usage):
                try:
                    result = await self.http.ausage(step.entry.key, self._usage_deadline(deadline))
                except httpx.HTTPError as exc:
                    result = exc
            elif isinstance(step, _Search):
                try:
                    result = await self.http.apost(
                        step.entry.key, step.path, step.body, deadline, timeout=step.timeout
                    )
                except httpx.HTTPError as exc:
                    result = exc
            elif isinstance(step, _Fallback):
                assert self.fallback is not None
                query, params = self._fallback_args(step.body)
                result = self.fallback(query, **params)
                if inspect.isawaitable(result):
                    result = await result
            else:
                assert fn is not None
                try:
                    result = _Returned(await fn(step.entry.key))
                except Exception as exc:
                    result = exc

    # -- public API ----------------------------------------------------------------------

    def search(self, query: str, *, max_results: int = 5, **params: Any) -> dict[str, Any]:
        """Search Tavily with the best available key and return Tavily's JSON as a dict.

        `params` are Tavily's search parameters (`search_depth`, `topic`,
        `include_domains`...). The result has an extra `"searchfuse"` entry
        saying who served it (`{"served_by": "tavily", "key": "tvly-dev-…0001"}`).

        Raises [`RateLimited`][searchfuse.errors.RateLimited] on a 429 (default policy),
        [`BadRequest`][searchfuse.errors.BadRequest] on a 400,
        [`NoKeyAvailable`][searchfuse.errors.NoKeyAvailable] when no key can serve.
        """
        body = self._body(query, max_results, params)
        deadline = self._deadline_at()
        with _telemetry.search_span() as span:
            result = self._drive(
                self._request_flow("/search", body, deadline=deadline), None, deadline
            )
            span.served(result)
        return result

    async def asearch(self, query: str, *, max_results: int = 5, **params: Any) -> dict[str, Any]:
        """Async twin of [`search`][searchfuse.Router.search]."""
        body = self._body(query, max_results, params)
        deadline = self._deadline_at()
        flow = self._request_flow("/search", body, deadline=deadline)
        with _telemetry.search_span() as span:
            result = await self._adrive(flow, None, deadline)
            span.served(result)
        return result

    def request(
        self, endpoint: str, body: Mapping[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """`POST` `body` to one of Tavily's `ENDPOINTS`
        (`"/search"`, `"/extract"`, `"/crawl"`, `"/map"`) and return its JSON.

        The same key selection, reactions and fail-over as [`search`][searchfuse.Router.search];
        `None` values are left out of the body and `include_usage` is asked
        for so credits are counted locally. `timeout` (seconds) is the time
        this request may take: it replaces the router's HTTP timeouts and, when
        longer, the call's `deadline` (a crawl may take minutes). The
        fallback, a search function, stands in for `/search` only.
        """
        _check_timeout(timeout)
        sent = self._request_body(endpoint, body)
        deadline = self._deadline_at(timeout)
        with _telemetry.search_span(endpoint.strip("/")) as span:
            result = self._drive(
                self._request_flow(endpoint, sent, timeout, deadline), None, deadline
            )
            span.served(result)
        return result

    async def arequest(
        self, endpoint: str, body: Mapping[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Async twin of [`request`][searchfuse.Router.request]."""
        _check_timeout(timeout)
        sent = self._request_body(endpoint, body)
        deadline = self._deadline_at(timeout)
        flow = self._request_flow(endpoint, sent, timeout, deadline)
        with _telemetry.search_span(endpoint.strip("/")) as span:
            result = await self._adrive(flow, None, deadline)
            span.served(result)
        return result

    def call(self, fn: Callable[[str], T]) -> T:
        """Run `fn(key)` with the key the router chooses, and learn from its outcome.

        A return is a success. An exception is classified like an HTTP answer
        (`httpx.HTTPStatusError`, tavily-python's errors, anything with a
        `status_code`): 401/403, 432/433 and 5xx move on to the next key,
        429 follows `on_429`, 400 and unknown exceptions are re-raised.
        """
        deadline = self._deadline_at()
        return self._drive(self._call_flow(deadline), fn, deadline)  # type: ignore[no-any-return]

    async def acall(self, fn: Callable[[str], Awaitable[T]]) -> T:
        """Async twin of [`call`][searchfuse.Router.call]."""
        deadline = self._deadline_at()
        return await self._adrive(self._call_flow(deadline), fn, deadline)

    def ensure_available(self) -> None:
        """Raise if no key can serve right now; no request is sent.

        Raises [`CooldownActive`][searchfuse.errors.CooldownActive] while the router-wide rate-limit
        hold runs (`on_429` "stop" or "retry"),
        [`NoKeyAvailable`][searchfuse.errors.NoKeyAvailable] when every key is cooling, exhausted or
        disabled.
        """
        now = self.now()
        state = self._view(now)
        self._refuse_if_held(state, now)
        if not rank(candidates(self.config.keys, state), now):
            raise self._no_key({})

    def status(self) -> list[KeyStatus]:
        """One record per key: masked key, account, usage, remaining, cooldown, last error."""
        now, cands = self._snapshot()
        return [
            key_status(c, now, remaining(c), blocked_reason(c, now), self._secrets) for c in cands
        ]

    def _probe_flow(self) -> Generator[_Step, Any, list[ProbeResult]]:
        results = []
        for entry in self.config.keys:
            if not self._reserve_usage_call(entry):
                results.append(
                    ProbeResult(
                        entry.masked,
                        entry.fingerprint,
                        None,
                        "skipped: Tavily allows 10 /usage requests per 10 minutes per key",
                    )
                )
                continue
            response = yield _Usage(entry)
            status = self._record_usage(entry, response)
            if status == 200:
                note = "ok"
            elif status is None:
                note = f"no answer ({type(response).__name__})"
            else:
                note = f"{status}: {self._scrub(error_detail(response))}"
            results.append(ProbeResult(entry.masked, entry.fingerprint, status, note))
        return results

    def test_keys(self) -> list[ProbeResult]:
        """Ask `/usage` for every key, one at a time, and refresh the state with the answers.

        Never runs a search (no search credits are spent). Keys whose `/usage`
        budget (10 per 10 minutes) is used up are skipped, not asked.
        """
        return self._drive(self._probe_flow())

    async def atest_keys(self) -> list[ProbeResult]:
        """Async twin of [`test_keys`][searchfuse.Router.test_keys] (still one key at a time)."""
        return await self._adrive(self._probe_flow())

    def _diagnose_flow(self, probe: bool) -> Generator[_Step, Any, Diagnosis]:
        now, before = self._snapshot()
        probe_step: Step | None = None
        if probe:
            evidence: list[dict[str, Any]] = []
            said = {c.entry.fingerprint: blocked_reason(c, now) for c in before}
            # One key at a time, /usage only: a probe must never spend search credits.
            results = yield from self._probe_flow()
            now, probed = self._snapshot()
            still = {c.entry.fingerprint: blocked_reason(c, now) for c in probed}
            for result in results:
                ev: dict[str, Any] = result.to_dict()
                was, left = said.get(result.fingerprint), still.get(result.fingerprint)
                if not result.ok:
                    ev["note"] = result.note
                elif was and not left:
                    ev["note"] = f"/usage 200; the state said {was!r}: stale, refreshed"
                elif left:
                    # /usage proves the key valid and shows its quota; it says nothing
                    # about the search rate limit or Tavily's health, so such a
                    # cooldown is not stale.
                    ev["note"] = f"/usage 200: the key is valid, and still {left}"
                else:
                    ev["note"] = "/usage 200: the key is valid"
                evidence.append(ev)
            ok = sum(1 for ev in evidence if ev.get("ok"))
            probe_step = Step(
                "probe", f"/usage answered 200 for {ok} of {len(evidence)} key(s)", evidence
            )
        now, after = self._snapshot()
        return diagnose_candidates(
            before, after, now, probe_step, self._hold(), secrets=self._secrets
        )

    def diagnose(self, probe: bool = False) -> Diagnosis:
        """Explain, in verification order, whether and why the keys can serve.

        Steps: state, cooldown, quota, probe, verdict. Without `probe` no
        request is sent. With `probe=True` each key's `/usage` is asked
        directly, one key at a time (never a search), and the state is
        refreshed from the answers.
        """
        return self._drive(self._diagnose_flow(probe))

    async def adiagnose(self, probe: bool = False) -> Diagnosis:
        """Async twin of [`diagnose`][searchfuse.Router.diagnose] (still one key at a time)."""
        return await self._adrive(self._diagnose_flow(probe))

    def shared_cache(
        self, *, ttl: float = 900.0, maxsize: int = 256
    ) -> MutableMapping[Hashable, Any]:
        """A TTL cache kept in this router's store: every process sharing the store
        (and this one after a restart) sees its entries, which expire on the
        router's clock. `guard(router=router, cache="shared")` uses it."""
        from searchfuse.router.shared_cache import SharedCache

        return SharedCache(self.store, ttl=ttl, maxsize=maxsize, timer=self.now)

    def reset_month(self) -> None:
        """Forget all local state: cooldowns, usage figures, counters."""
        self.store.clear(self.now())

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self.http.close()

    async def aclose(self) -> None:
        """Close both HTTP connection pools."""
        await self.http.aclose()

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Router:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
