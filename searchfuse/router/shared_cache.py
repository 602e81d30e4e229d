"""The guard's cache kept in the router's store: shared by processes, kept across restarts.

`guard(router=router, cache="shared")` uses it: the same query from another
process, or from this one after a restart, within the TTL costs no request.
Entries live in the store (an SQLite table, Redis keys, the JSON file, or
memory), expire on the router's clock, and are JSON text, so only results
that are JSON (what Tavily answers) are shared; anything else is served
uncached.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, MutableMapping
from typing import Any

from searchfuse.errors import StoreUnavailable
from searchfuse.router.state import Store

__all__ = ["SharedCache", "stable_key"]

log = logging.getLogger("searchfuse.cache")


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return [type(value).__name__, value]
    if isinstance(value, bytes):
        return ["bytes", value.hex()]
    if isinstance(value, list | tuple):
        return ["seq", [_encode(v) for v in value]]
    if isinstance(value, set | frozenset):
        # Set order differs between processes (string hashing is randomised): sort.
        return ["set", sorted(json.dumps(_encode(v), sort_keys=True) for v in value)]
    if isinstance(value, Mapping):
        items = sorted(
            json.dumps([_encode(k), _encode(v)], sort_keys=True) for k, v in value.items()
        )
        return ["map", items]
    if isinstance(value, type):
        return ["type", f"{value.__module__}.{value.__qualname__}"]
    return ["repr", repr(value)]


def stable_key(key: Hashable) -> str:
    """`key` (a guard cache key: tuples of plain values) as text that is the same
    in every process. Not `hash()`: that is randomised per process for strings."""
    text = json.dumps(_encode(key), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


_WRITER: concurrent.futures.ThreadPoolExecutor | None = None
_WRITER_LOCK = threading.Lock()


def _writer() -> concurrent.futures.ThreadPoolExecutor:
    """One background thread for cache writes made from an event loop."""
    global _WRITER
    with _WRITER_LOCK:
        if _WRITER is None:
            _WRITER = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="searchfuse-cache"
            )
        return _WRITER


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class SharedCache(MutableMapping[Hashable, Any]):
    """A TTL cache in a router's [`Store`][searchfuse.router.Store]; `maxsize` entries, `ttl`
    seconds.

    Iterating yields the stored (hashed) keys; `del` and `in` take either
    form. A store that cannot be reached reads as a miss and skips the write
    (with a warning): a served result always reaches the caller. Reads never
    wait for a writer (WAL, Redis); a write made on an event loop goes to a
    background thread, so the loop never waits on another process's lock.
    """

    def __init__(
        self, store: Store, *, ttl: float, maxsize: int, timer: Callable[[], float]
    ) -> None:
        if ttl <= 0 or maxsize < 1:
            raise ValueError("a shared cache needs ttl > 0 and maxsize >= 1")
        self.store = store
        self.ttl = float(ttl)
        self.maxsize = int(maxsize)
        self.timer = timer

    def __repr__(self) -> str:
        return f"SharedCache({self.store!r}, ttl={self.ttl:g}, maxsize={self.maxsize})"

    @staticmethod
    def _name(key: Hashable) -> str:
        if isinstance(key, str) and len(key) == 40 and all(c in "0123456789abcdef" for c in key):
            return key  # already a stored key (from iteration)
        return stable_key(key)

    def __getitem__(self, key: Hashable) -> Any:
        try:
            raw = self.store.cache_get(self._name(key), self.timer())
        except StoreUnavailable as exc:
            log.warning("shared cache unavailable, reading as a miss: %s", exc)
            raise KeyError(key) from None
        if raw is None:
            raise KeyError(key)
        return json.loads(raw)

    def __setitem__(self, key: Hashable, value: Any) -> None:
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            # The guard serves a value it cannot cache uncached (cachetools does the same
            # for a value too large for the cache).
            raise ValueError(f"not JSON, cannot be shared: {exc}") from None
        name, expires = self._name(key), self.timer() + self.ttl

        def write() -> None:
            try:
                self.store.cache_set(name, text, expires, self.maxsize)
            except StoreUnavailable as exc:
                log.warning("shared cache unavailable, result not cached: %s", exc)

        if _on_event_loop():
            # A write may wait for another process's lock: never on the event loop.
            _writer().submit(write)
        else:
            write()

    def __delitem__(self, key: Hashable) -> None:
        self.store.cache_delete(self._name(key))

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.store.cache_keys(self.timer()))

    def __len__(self) -> int:
        return len(self.store.cache_keys(self.timer()))

    def clear(self) -> None:
        for name in self.store.cache_keys(self.timer()):
            self.store.cache_delete(name)
