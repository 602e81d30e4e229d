"""`POST /search` through the guard's rules: the cache, the fuse, and the turn rule per session.

A gateway has no reply ids, so with `per_turn` the guard's burst rule decides
what a turn is, one session at a time: a session's calls that overlap, or
start within `min_interval` seconds of its previous call, are one turn. Each
session gets a [`Guard`][searchfuse.Guard] of its own (its own turn count);
they all share one cache and one fuse, so a 429 stops every session at once
and an answer found for one session is free for the next.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, MutableMapping
from typing import Any, Literal

from searchfuse.guard import Call, Fuse, Guard
from searchfuse.router import Router

from ._identity import Caller

__all__ = ["CACHE_SIZE", "CACHE_TTL", "CacheMode", "Searches"]

CacheMode = Literal["shared", "memory", "off"]
#: Entries the gateway's cache keeps, and for how long (seconds).
CACHE_SIZE = 1024
CACHE_TTL = 900.0
#: Sessions whose turn counts are kept; the least recently seen is forgotten first.
SESSIONS_KEPT = 4096


def make_cache(router: Router, mode: CacheMode) -> MutableMapping[Any, Any] | None:
    """The cache the gateway's searches share: the router's store, this process, or none."""
    if mode == "shared":
        return router.shared_cache(ttl=CACHE_TTL, maxsize=CACHE_SIZE)
    if mode == "memory":
        import cachetools

        return cachetools.TTLCache(maxsize=CACHE_SIZE, ttl=CACHE_TTL, timer=router.now)
    if mode == "off":
        return None
    raise ValueError(f"cache must be 'shared', 'memory' or 'off', not {mode!r}")


class Searches:
    """Runs the searches of every caller through one guard per session."""

    def __init__(
        self,
        router: Router,
        *,
        per_turn: int | None,
        min_interval: float,
        cache: CacheMode,
    ) -> None:
        self.router = router
        self.per_turn = per_turn
        self.min_interval = min_interval
        self._cache = make_cache(router, cache)
        self._fuse = Fuse()
        self._guards: OrderedDict[Hashable, Guard] = OrderedDict()
        self._lock = threading.Lock()
        # Without a turn rule nothing is counted per session: one guard serves all.
        self._everyone = self._new_guard() if per_turn is None else None

    def _new_guard(self) -> Guard:
        return Guard(
            name="gateway",
            per_turn=self.per_turn,
            min_interval=self.min_interval,
            cache=self._cache,
            fuse=self._fuse,
            clock=self.router.now,
        )

    def guard_for(self, caller: Caller) -> Guard:
        """The guard counting `caller`'s session."""
        if self._everyone is not None:
            return self._everyone
        session = caller.session
        with self._lock:
            guard = self._guards.get(session)
            if guard is None:
                guard = self._guards[session] = self._new_guard()
                if len(self._guards) > SESSIONS_KEPT:
                    self._guards.popitem(last=False)
            else:
                self._guards.move_to_end(session)
            return guard

    async def search(self, caller: Caller, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Tavily's answer to `body`, and whether a request was sent for it (not a cache hit)."""
        sent = False

        async def backend() -> dict[str, Any]:
            nonlocal sent
            result = await self.router.arequest("/search", body)
            sent = True
            return result

        query = body.get("query")
        if not isinstance(query, str):
            return await backend(), True  # the router refuses it with its BadRequest
        params = {name: value for name, value in body.items() if name != "query"}
        result = await self.guard_for(caller).arun(Call(query, params, "gateway"), backend)
        return result, sent
