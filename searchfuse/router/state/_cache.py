"""The guard's cache kept in the router's store: shared by processes, kept across restarts.

`guard(router=router, cache="shared")` uses it: the same query from another
process, or from this one after a restart, within the TTL costs no request.
Entries live in the store (an SQLite table, Redis keys, the JSON file, or
memory), expire on the router's clock, and are JSON text, so only results
that come back from JSON unchanged (what Tavily answers) are shared; anything
else (a tuple, a non-string dict key, a set) is served uncached.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterator, Mapping, MutableMapping
from enum import Enum
from typing import Any

from searchfuse.errors import StoreUnavailable
from searchfuse.router.state import Store
from searchfuse.router.state._fleet import cache_scope

__all__ = ["SharedCache", "cache_scope", "finish_writes", "stable_key"]

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
    if isinstance(value, Enum):
        return ["enum", _encode(type(value)), value.name]
    text = repr(value)
    if text.startswith("<") or _ADDRESS.search(text):
        # A default repr names the memory address, which another object (here
        # or in another process) may have: it would key another call's result.
        raise TypeError(f"a {type(value).__qualname__} has no stable text to key a shared entry")
    return ["repr", type(value).__module__, type(value).__qualname__, text]


_ADDRESS = re.compile(r"\bat 0x[0-9a-fA-F]+")


def stable_key(key: Hashable, scope: str = "") -> str:
    """`key` (a guard cache key: tuples of plain values) as text that is the same
    in every process. Not `hash()`: that is randomised per process for strings.
    `scope` (see `cache_scope`) is part of it: where the answers come from.

    Raises `TypeError` for a key part with no stable text (an object whose
    `repr` shows its address): such a call is not shared.
    """
    text = json.dumps(_encode(key), sort_keys=True, separators=(",", ":"))
    if scope:
        text = f"{scope}\n{text}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def _same(served: Any, decoded: Any) -> bool:
    """Whether `decoded` (from JSON) is `served` exactly: equal, and of the same types."""
    if type(served) is not type(decoded):
        return False
    if type(served) is dict:
        return served.keys() == decoded.keys() and all(
            _same(value, decoded[name]) for name, value in served.items()
        )
    if type(served) is list:
        return len(served) == len(decoded) and all(map(_same, served, decoded))
    return bool(served == decoded)


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


#: The longest closing a store waits for the cache writes still under way.
FINISH_WAIT = 30.0


def finish_writes(timeout: float = FINISH_WAIT) -> None:
    """Wait for the cache writes made from an event loop so far: a store closed
    under one would be opened again by it, and the entry lost."""
    with _WRITER_LOCK:
        writer = _WRITER
    if writer is None:
        return
    try:
        # One thread, in order: this runs once every earlier write is done.
        writer.submit(lambda: None).result(timeout)
    except concurrent.futures.TimeoutError:
        log.warning("shared cache writes still under way after %g s; closing anyway", timeout)


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


#: The longest a miss waits for another process searching for the same entry, and
#: how long a claim on that search lasts (real seconds; a router passes the
#: smaller of this and its call deadline).
FLIGHT_WAIT = 10.0

#: The longest `ttl` a shared cache takes (ten years, in seconds).
MAX_TTL = 10 * 365 * 86400.0
#: The most entries a shared cache takes.
MAX_SIZE = 10**9


class SharedCache(MutableMapping[Hashable, Any]):
    """A TTL cache in a router's [`Store`][searchfuse.router.Store]; `maxsize` entries, `ttl`
    seconds.

    Iterating yields the stored (hashed) keys; `del` and `in` take either
    form. Single flight across processes: a miss claims the entry's search in
    the store; another process missing the same entry meanwhile waits for it
    (at most `wait` seconds, never on an event loop) instead of paying for the
    same search, and searches itself if the claimer gave up. A store that
    cannot be reached reads as a miss and skips the write (with a warning): a
    served result always reaches the caller. Reads never wait for a writer
    (WAL, Redis); a write made on an event loop goes to a background thread,
    so the loop never waits on another process's lock.
    """

    def __init__(
        self,
        store: Store,
        *,
        ttl: float,
        maxsize: int,
        timer: Callable[[], float],
        scrub: Callable[[str], str] | None = None,
        scope: str = "",
        wait: float = FLIGHT_WAIT,
    ) -> None:
        if (
            isinstance(ttl, bool)
            or not isinstance(ttl, int | float)
            or not 0 < ttl <= MAX_TTL  # also NaN
        ):
            raise ValueError(
                f"a shared cache's ttl must be a number of seconds > 0 and at most "
                f"{MAX_TTL:g} (ten years), not {ttl!r}"
            )
        if (
            isinstance(maxsize, bool)
            or not isinstance(maxsize, int)
            or not 1 <= maxsize <= MAX_SIZE
        ):
            raise ValueError(
                f"a shared cache's maxsize must be a whole number from 1 to {MAX_SIZE}, "
                f"not {maxsize!r}"
            )
        self.store = store
        self.ttl = float(ttl)
        self.maxsize = int(maxsize)
        self.timer = timer
        #: Where the answers come from (`cache_scope`): part of every entry's name.
        self.scope = scope
        self.wait = max(0.0, float(wait))
        #: This cache's name on its claims, and the entries it claimed and owes.
        self._owner = uuid.uuid4().hex
        self._claimed: set[str] = set()
        # A page that echoes a key is stored (and served to the next caller)
        # with the key masked: the store is shared, and it is not a keys file.
        self.scrub = scrub
        # Writes made on an event loop land in the store later, from a thread;
        # until then this process reads them here, so an identical call right
        # after is a hit, not a second search (stored name -> text, expiry).
        self._pending: dict[str, tuple[str, float]] = {}
        self._pending_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SharedCache({self.store!r}, ttl={self.ttl:g}, maxsize={self.maxsize})"

    def _name(self, key: Hashable) -> str:
        if isinstance(key, str) and len(key) == 40 and all(c in "0123456789abcdef" for c in key):
            return key  # already a stored key (from iteration)
        return stable_key(key, self.scope)

    def __getitem__(self, key: Hashable) -> Any:
        try:
            name = self._name(key)
        except TypeError:
            raise KeyError(key) from None  # no stable name: never shared
        with self._pending_lock:
            pending = self._pending.get(name)
        if pending is not None and pending[1] > self.timer():
            return json.loads(pending[0])
        try:
            raw = self.store.cache_get(name, self.timer())
        except StoreUnavailable as exc:
            log.warning("shared cache unavailable, reading as a miss: %s", exc)
            raise KeyError(key) from None
        if raw is None and self.wait > 0 and not _on_event_loop():
            # (On an event loop nothing waits, nor writes a claim: the call searches.)
            raw = self._single_flight(name)
        if raw is None:
            raise KeyError(key)
        return json.loads(raw)

    def __contains__(self, key: object) -> bool:
        # A look, not a lookup before a search: no claim, no waiting.
        try:
            name = self._name(key)  # type: ignore[arg-type,unused-ignore]
            with self._pending_lock:
                pending = self._pending.get(name)
            if pending is not None and pending[1] > self.timer():
                return True
            return self.store.cache_get(name, self.timer()) is not None
        except (TypeError, StoreUnavailable):
            return False

    def _single_flight(self, name: str) -> str | None:
        """After a miss: claim the search for `name` (`None`: the caller searches), or
        wait for the entry of the process that claimed it."""
        try:
            if self._claim(name):
                return None
            end = time.monotonic() + self.wait
            pause = 0.005
            while (left := end - time.monotonic()) > 0:
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.1)
                raw = self.store.cache_get(name, self.timer())
                if raw is not None:
                    return raw
                if self._claim(name):
                    return None  # the claimer gave up (failed, or its claim ran out)
        except StoreUnavailable as exc:
            log.warning("shared cache unavailable, searching: %s", exc)
        return None

    def _claim(self, name: str) -> bool:
        if not self.store.cache_claim(name, self._owner, time.time() + self.wait):
            return False
        with self._pending_lock:
            self._claimed.add(name)
        return True

    def _release(self, name: str) -> None:
        """The claimed entry is written (or will not be): others stop waiting."""
        with self._pending_lock:
            if name not in self._claimed:
                return
            self._claimed.discard(name)
        try:
            self.store.cache_release(name, self._owner)
        except StoreUnavailable as exc:
            log.warning("shared cache unavailable, claim left to run out: %s", exc)

    def __setitem__(self, key: Hashable, value: Any) -> None:
        # The guard serves a value it cannot cache uncached (cachetools does the same
        # for a value too large for the cache): a ValueError says so.
        try:
            name = self._name(key)
        except TypeError as exc:
            raise ValueError(f"cannot be shared: {exc}") from None
        try:
            text = json.dumps(value, allow_nan=False)
            faithful = _same(value, json.loads(text))
        except (TypeError, ValueError, RecursionError) as exc:
            self._release(name)
            raise ValueError(f"not JSON, cannot be shared: {exc}") from None
        if not faithful:
            # {1: ("a", "b")} would come back as {"1": ["a", "b"]}: another value.
            self._release(name)
            raise ValueError("does not come back from JSON unchanged, cannot be shared")
        if self.scrub is not None:
            # A key is letters, digits, `-` and `_`: masking it in the JSON text
            # leaves valid JSON.
            text = self.scrub(text)
        now = self.timer()
        expires = now + self.ttl
        if not _on_event_loop():
            self._write(name, text, now, expires)
            return
        # A write may wait for another process's lock: never on the event loop.
        entry = (text, expires)
        with self._pending_lock:
            self._pending[name] = entry
        _writer().submit(self._write, name, text, now, expires, entry)

    def _write(
        self,
        name: str,
        text: str,
        now: float,
        expires: float,
        entry: tuple[str, float] | None = None,
    ) -> None:
        try:
            if entry is not None:
                with self._pending_lock:
                    if self._pending.get(name) is not entry:
                        return  # deleted, cleared or written again since
            self.store.cache_set(name, text, expires, self.maxsize, now=now)
        except StoreUnavailable as exc:
            log.warning("shared cache unavailable, result not cached: %s", exc)
        except Exception as exc:
            if entry is None:
                raise  # the caller logs it and serves the result uncached
            log.warning("shared cache write failed, result not cached: %r", exc)
        finally:
            self._release(name)
            if entry is not None:
                with self._pending_lock:
                    if self._pending.get(name) is entry:
                        del self._pending[name]

    def __delitem__(self, key: Hashable) -> None:
        try:
            name = self._name(key)
        except TypeError:
            raise KeyError(key) from None
        with self._pending_lock:
            self._pending.pop(name, None)
        self.store.cache_delete(name)

    def _names(self) -> list[str]:
        now = self.timer()
        names = self.store.cache_keys(now)
        with self._pending_lock:
            waiting = [n for n, (_, expires) in self._pending.items() if expires > now]
        stored = set(names)
        return names + [name for name in waiting if name not in stored]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def clear(self) -> None:
        with self._pending_lock:
            self._pending.clear()
        for name in self.store.cache_keys(self.timer()):
            self.store.cache_delete(name)
