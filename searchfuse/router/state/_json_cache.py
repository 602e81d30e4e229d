"""The JSON store's shared cache: entries in the state file (`cache`), and the
claims that let one process search for an entry while the others wait for it
(`<file>.claims`, under the same lock)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from searchfuse.router.state._codec import state_from_json
from searchfuse.router.state._eviction import evicted
from searchfuse.router.state._json_claims import Claims
from searchfuse.router.state._json_lock import Locked
from searchfuse.router.state._records import State

__all__ = ["JsonCache"]


class JsonCache:
    """The shared cache's entries and claims (a part of `JsonFileStore`)."""

    _cache_raw: dict[str, Any]
    _claims: Claims

    if TYPE_CHECKING:  # the store's own, which these methods use

        def _load(self, now: float) -> State: ...
        def _mkdir(self) -> None: ...
        def _locked(self) -> Locked: ...
        def _raw(self) -> dict[str, Any] | None: ...
        def _save(self, state: State, cache: dict[str, Any], owned: bool = False) -> None: ...

    def cache_get(self, key: str, now: float) -> str | None:
        self._load(now)
        entry = self._cache_raw.get(key)
        if not isinstance(entry, list) or len(entry) != 2:
            return None
        value, expires = entry
        if not isinstance(value, str) or not isinstance(expires, int | float) or expires <= now:
            return None
        return value

    def _edit_cache(self, edit: Callable[[dict[str, Any]], None]) -> None:
        self._mkdir()
        with self._locked():
            data = self._raw()
            state = state_from_json(data) if data is not None else State(month="")
            raw = data.get("cache") if data is not None else None
            cache: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
            edit(cache)
            self._save(state, cache)

    def cache_set(
        self, key: str, value: str, expires_at: float, maxsize: int, *, now: float | None = None
    ) -> None:
        def edit(cache: dict[str, Any]) -> None:
            cache.pop(key, None)
            expiries = {
                k: v[1] if isinstance(v, list) and len(v) == 2 else 0 for k, v in cache.items()
            }
            for gone in evicted(expiries, maxsize):
                del cache[gone]
            cache[key] = [value, expires_at]

        self._edit_cache(edit)

    def cache_delete(self, key: str) -> None:
        self._edit_cache(lambda cache: cache.pop(key, None) and None)

    def cache_keys(self, now: float) -> list[str]:
        self._load(now)
        return [
            k
            for k, v in self._cache_raw.items()
            if isinstance(v, list) and len(v) == 2 and isinstance(v[1], int | float) and v[1] > now
        ]

    def cache_claim(self, key: str, owner: str, until: float) -> bool:
        self._mkdir()
        with self._locked():
            return self._claims.claim(key, owner, until, time.time())

    def cache_release(self, key: str, owner: str) -> None:
        with self._locked():
            self._claims.release(key, owner, time.time())
