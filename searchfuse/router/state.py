"""Per-key router state and where it is kept.

State is a cache, not ground truth (incident 2): an expired cooldown is simply
available, and a ``/usage`` answer always wins over local counts. It is keyed by
key fingerprint, never by list position and never by the raw key.

Stores:

- :class:`MemoryStore`: one process, nothing on disk.
- :class:`JsonFileStore`: ``state/quota.json``, mode 0600, atomic replace, a
  file lock around every read-modify-write so several processes can share it.
  A corrupt file is moved aside (``quota.json.corrupt.<timestamp>``) and
  replaced by fresh state; the search goes on.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol, TypeVar

from filelock import FileLock

from searchfuse._files import atomic_write, move_aside

__all__ = [
    "STATE_VERSION",
    "AccountUsage",
    "JsonFileStore",
    "KeyState",
    "MemoryStore",
    "State",
    "Store",
    "month_of",
    "open_store",
]

log = logging.getLogger("searchfuse.state")

STATE_VERSION = 1
T = TypeVar("T")


def month_of(epoch: float) -> str:
    """``"2026-11"``: the billing month (UTC) an instant belongs to; Tavily resets monthly."""
    return time.strftime("%Y-%m", time.gmtime(epoch))


@dataclass
class AccountUsage:
    """An account's plan figures, shared by every key of that account."""

    current_plan: str | None = None
    plan_usage: float | None = None
    plan_limit: float | None = None
    paygo_usage: float | None = None
    paygo_limit: float | None = None
    synced_at: float | None = None
    #: Credits spent through this router since ``synced_at`` (not yet in ``plan_usage``).
    local_credits: float = 0.0


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
    #: Key figures from the last ``/usage``: usage, limit, search_usage (plus the
    #: account part, repeated here for the status table).
    last_usage: dict[str, Any] | None = None
    last_sync_at: float | None = None
    #: Credits spent through this router since ``last_sync_at``.
    local_credits: float = 0.0
    #: Searches served this month (all processes sharing the store).
    searches: int = 0
    last_used_at: float | None = None
    #: When this key's recent ``/usage`` calls were made (Tavily allows 10 per 10 min).
    usage_calls: list[float] = field(default_factory=list)
    usage_blocked_until: float | None = None

    def cooling(self, now: float) -> bool:
        """True while a cooldown runs. An expired cooldown is simply over."""
        return self.cooldown_until is not None and self.cooldown_until > now

    def cooldown_left(self, now: float) -> float:
        """Seconds of cooldown left (0.0 when none runs)."""
        if self.cooldown_until is None:
            return 0.0
        return max(0.0, self.cooldown_until - now)


@dataclass
class State:
    """The whole state: the month it belongs to, per-key and per-account records."""

    month: str
    keys: dict[str, KeyState] = field(default_factory=dict)
    accounts: dict[str, AccountUsage] = field(default_factory=dict)
    #: Under ``on_429="stop"``, a 429 on any key holds the whole router until
    #: this time: a burst that 429s one key 429s them all (incident 1).
    hold_until: float | None = None
    #: Fingerprint of the key whose 429 set the hold.
    hold_key: str | None = None

    def hold_left(self, now: float) -> float:
        """Seconds the router-wide rate-limit hold still runs (0.0 when none)."""
        if self.hold_until is None:
            return 0.0
        return max(0.0, self.hold_until - now)

    def key(self, fp: str) -> KeyState:
        """The record for key fingerprint ``fp``, created empty when missing."""
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

    def to_json(self) -> dict[str, Any]:
        """The state as it is written to disk."""
        return {
            "format_version": STATE_VERSION,
            "month": self.month,
            "keys": {fp: asdict(ks) for fp, ks in sorted(self.keys.items())},
            "accounts": {name: asdict(acc) for name, acc in sorted(self.accounts.items())},
            "hold_until": self.hold_until,
            "hold_key": self.hold_key,
        }

    @classmethod
    def from_json(cls, data: Any) -> State:
        """Parse what :meth:`to_json` wrote; raises ``ValueError`` on anything else."""
        if not isinstance(data, dict) or not isinstance(data.get("month"), str):
            raise ValueError("not a searchfuse state object")
        keys_raw = data.get("keys", {})
        accounts_raw = data.get("accounts", {})
        if not isinstance(keys_raw, dict) or not isinstance(accounts_raw, dict):
            raise ValueError("keys and accounts must be objects")
        return cls(
            month=data["month"],
            keys={fp: _build(KeyState, v) for fp, v in keys_raw.items()},
            accounts={name: _build(AccountUsage, v) for name, v in accounts_raw.items()},
            hold_until=_optional_number(data.get("hold_until")),
            hold_key=data.get("hold_key") if isinstance(data.get("hold_key"), str) else None,
        )


def _optional_number(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def _build(cls: type[T], raw: Any) -> T:
    if not isinstance(raw, dict):
        raise ValueError(f"expected an object for {cls.__name__}")
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    # Unknown fields come from a newer version: ignore them rather than fail.
    return cls(**{k: v for k, v in raw.items() if k in known})


class Store(Protocol):
    """Where router state lives. ``update`` is an atomic read-modify-write."""

    def read(self, now: float) -> State:
        """A snapshot of the state for the month of ``now`` (a new month reads empty)."""
        ...

    def update(self, now: float, change: Callable[[State], T]) -> T:
        """Apply ``change`` to the current state atomically and return its result."""
        ...

    def clear(self, now: float) -> None:
        """Forget everything (a fresh month)."""
        ...


def _current(state: State | None, now: float) -> State:
    month = month_of(now)
    if state is None or state.month != month:
        # A new month resets everything: Tavily's quotas roll over, and
        # cooldowns from last month mean nothing now.
        return State(month=month)
    return state


class MemoryStore:
    """State in this process only."""

    def __init__(self) -> None:
        self._state: State | None = None
        self._lock = threading.RLock()

    def read(self, now: float) -> State:
        with self._lock:
            self._state = _current(self._state, now)
            return State.from_json(json.loads(json.dumps(self._state.to_json())))

    def update(self, now: float, change: Callable[[State], T]) -> T:
        with self._lock:
            self._state = _current(self._state, now)
            return change(self._state)

    def clear(self, now: float) -> None:
        with self._lock:
            self._state = State(month=month_of(now))

    def __repr__(self) -> str:
        return "MemoryStore()"


class JsonFileStore:
    """State in a JSON file shared by every process that points at it.

    Every read-modify-write holds ``<file>.lock`` (a ``filelock.FileLock``),
    so counters from several processes add up. Writes are atomic and the file
    is mode 0600.
    """

    def __init__(self, path: str | os.PathLike[str], *, lock_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self._lock = FileLock(str(self.path) + ".lock", timeout=lock_timeout)
        self._thread_lock = threading.RLock()

    def __repr__(self) -> str:
        return f"JsonFileStore({self.path.name!r})"

    def _load(self, now: float) -> State:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return State(month=month_of(now))
        except OSError as exc:
            return self._quarantine(now, f"unreadable ({exc.strerror})")
        try:
            state = State.from_json(json.loads(raw.decode("utf-8")))
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            return self._quarantine(now, f"corrupt ({exc})")
        return _current(state, now)

    def _quarantine(self, now: float, why: str) -> State:
        try:
            moved = move_aside(self.path, "corrupt", now)
        except OSError as exc:
            log.warning("state file %s is %s and could not be moved aside: %s", self.path, why, exc)
        else:
            log.warning(
                "state file %s was %s; moved aside as %s, starting with fresh state",
                self.path,
                why,
                moved.name,
            )
        return State(month=month_of(now))

    def _save(self, state: State) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n"
        # State is a cache: atomic, but no fsync on every search.
        atomic_write(self.path, text.encode("utf-8"), durable=False)

    def read(self, now: float) -> State:
        # Writers replace the file atomically, so a reader sees a whole file
        # without taking the lock. Only a corrupt file needs the lock (to move
        # it aside exactly once).
        try:
            raw = self.path.read_bytes()
            return _current(State.from_json(json.loads(raw.decode("utf-8"))), now)
        except FileNotFoundError:
            return State(month=month_of(now))
        except (OSError, ValueError, TypeError, UnicodeDecodeError):
            with self._thread_lock, self._lock:
                return self._load(now)

    def update(self, now: float, change: Callable[[State], T]) -> T:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._thread_lock, self._lock:
            state = self._load(now)
            result = change(state)
            self._save(state)
            return result

    def clear(self, now: float) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._thread_lock, self._lock:
            self._save(State(month=month_of(now)))


def open_store(state: Store | str | os.PathLike[str] | None) -> Store:
    """The store for a ``state=`` argument: a path means a :class:`JsonFileStore`."""
    if state is None:
        return MemoryStore()
    if isinstance(state, str | os.PathLike):
        return JsonFileStore(state)
    return state
