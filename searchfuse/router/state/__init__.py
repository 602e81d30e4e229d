"""Per-key router state and where it is kept.

`state=` (Router, `from_config`, `from_env`, the CLI's `--state`,
`SEARCHFUSE_STATE`) chooses the store, see `open_store`:

- `None`: [`MemoryStore`][searchfuse.router.MemoryStore], this process only;
- a [`Store`][searchfuse.router.Store] object: that store;
- `redis://`, `rediss://`, `unix://` URLs (scheme in any case): `RedisStore`,
  shared by every process on every host that names it with the same keys
  (or the same `?namespace=`); any other URL-like
  value (`reddis://`, `http://`, `sqlite:///`, `:memory:`) or a blank one is a
  ConfigError, never a local file;
- a path ending in `.json`: [`JsonFileStore`][searchfuse.router.JsonFileStore];
- any other path: `SqliteStore`, the embedded default.

A path must name a regular file, or nothing yet in a folder that exists (a
FIFO, a device or a missing folder is a ConfigError; nothing is created).

`SqliteStore` and `RedisStore` are imported on first use, so
`import searchfuse` loads neither `sqlite3` nor `redis`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from searchfuse.router.state._base import Changes, Store, TxState
from searchfuse.router.state._codec import STATE_VERSION
from searchfuse.router.state._events import MAX_EVENTS, Event, EventKind
from searchfuse.router.state._fleet import cache_scope, fleet_namespace, split_namespace
from searchfuse.router.state._grant import Charge, Grant, acquire
from searchfuse.router.state._json import JsonFileStore
from searchfuse.router.state._memory import MemoryStore
from searchfuse.router.state._month import month_of
from searchfuse.router.state._paths import redis_url
from searchfuse.router.state._records import AccountUsage, Availability, KeyState, KeyUsage, State
from searchfuse.router.state._ring import Ring
from searchfuse.router.state._skill import KeySlot, key_slots

if TYPE_CHECKING:
    from searchfuse.router.state._redis import RedisStore
    from searchfuse.router.state._sqlite import SqliteStore

__all__ = [
    "MAX_EVENTS",
    "STATE_VERSION",
    "AccountUsage",
    "Availability",
    "Changes",
    "Charge",
    "Event",
    "EventKind",
    "Grant",
    "JsonFileStore",
    "KeyState",
    "KeyUsage",
    "MemoryStore",
    "RedisStore",
    "Ring",
    "SqliteStore",
    "State",
    "Store",
    "TxState",
    "acquire",
    "cache_scope",
    "month_of",
    "open_owned",
    "open_store",
]


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from searchfuse.router.state._redis import RedisStore

        return RedisStore
    if name == "SqliteStore":
        from searchfuse.router.state._sqlite import SqliteStore

        return SqliteStore
    raise AttributeError(name)


def open_store(
    state: Store | str | os.PathLike[str] | None,
    *,
    fleet: Iterable[str] = (),
    key_order: Sequence[KeySlot] | None = None,
) -> Store:
    """The store a `state=` value names (see the module docstring).

    `fleet`: the fingerprints of the router's keys. A Redis URL without a
    `?namespace=` keeps the records under this key set's own namespace, so
    fleets with other keys on the same server never hold or reset each other
    (see `state/_fleet.py`). `key_order`: the configured keys in the keys file's
    order, which a file store matches the original skill's records by position
    against."""
    if state is None:
        return MemoryStore()
    url = redis_url(state) if isinstance(state, str) else None
    if url is not None:
        from searchfuse.router.state._redis import RedisStore, redacted_url

        named = split_namespace(url, redacted_url(url))[1]
        return RedisStore(url, namespace=named or fleet_namespace(fleet))
    if isinstance(state, str | os.PathLike):
        if os.fspath(state).endswith(".json"):
            return JsonFileStore(state, key_order=key_order)
        from searchfuse.router.state._sqlite import SqliteStore

        return SqliteStore(state, key_order=key_order)
    if not isinstance(state, Store):
        raise TypeError(
            f"state must be a path, a Redis URL, a Store or None, not {state!r} "
            "(a store of your own subclasses searchfuse.router.Store, which gives it "
            "`grant` and `blocking`)"
        )
    return state


class Closer:
    """How a router closes its store: the store it opened, never one it was given.
    Closing waits for the shared cache's writes still under way (they would open
    the store again, and their entries would be lost); closing twice is harmless."""

    def __init__(self, store: Store | None) -> None:
        self.store = store

    def close(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            from searchfuse.router.state._cache import finish_writes

            finish_writes()
            store.close()

    async def aclose(self) -> None:
        """`close`, in a thread: the writes it waits for may wait for another process's lock."""
        import asyncio

        await asyncio.to_thread(self.close)


def open_owned(
    state: Store | str | os.PathLike[str] | None, keys: Sequence[Any] = ()
) -> tuple[Store, Closer]:
    """The store `state` names for a router holding `keys` (its fleet, and the order
    the original skill's records are matched by), and how to close it."""
    fleet = [k.fingerprint for k in keys]
    store = open_store(state, fleet=fleet, key_order=key_slots(keys))
    return store, Closer(None if store is state else store)
