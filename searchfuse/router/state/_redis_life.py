"""Noticing that Redis forgot: a store's lifetime key, and the server settings a fleet needs.

State is a cache, but a hold or a cooldown that Redis drops without a word is a
429 that searchfuse could have prevented: the server was emptied (`FLUSHDB`),
restarted without persistence, or evicted keys under a `maxmemory-policy`.
The first process to use a namespace writes a random token under
`<namespace>:born` (no expiry); every process remembers the one it saw, and
reads it with every look at the change log (in the same round trip). A token
gone or changed means the records it knew are gone: said once per loss, in a
warning naming the server and the settings to check. At open, a
`maxmemory-policy` that evicts is named in a warning too.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

__all__ = ["EVICTING_OK", "Lifetime"]

log = logging.getLogger("searchfuse.state")

#: The only `maxmemory-policy` that never drops searchfuse's keys (they all expire
#: some day, so the `volatile-*` policies may drop them too).
EVICTING_OK = "noeviction"
_SETTINGS = (
    "a fleet needs maxmemory-policy noeviction and persistence (appendonly yes, or "
    "RDB snapshots): see the Redis section of the fleets guide"
)


class Lifetime:
    """One store handle's token for namespace `ns` (see the module docstring)."""

    def __init__(self, client: Any, ns: str, shown: str) -> None:
        self.client = client
        self.key = f"{ns}:born"
        self.shown = shown
        self.ns = ns
        self.token: str | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Write a token if none is there, remember the one there; name an evicting policy."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.set(self.key, uuid.uuid4().hex, nx=True).get(self.key)
            self.token = pipe.execute()[1]
        self._check_policy()

    def seen(self, found: Any) -> None:
        """`found` is the token read just now: a missing or another one is a loss."""
        if found == self.token and found is not None:
            return
        with self._lock:
            if found == self.token and found is not None:
                return
            log.warning(
                "Redis %s forgot searchfuse's state (namespace %r) since this process last "
                "looked: it was emptied, restarted without persistence, or evicted keys; "
                "holds, cooldowns and pacing written before are gone. %s",
                self.shown,
                self.ns,
                _SETTINGS,
            )
            if found is None:
                with self.client.pipeline(transaction=False) as pipe:
                    pipe.set(self.key, uuid.uuid4().hex, nx=True).get(self.key)
                    found = pipe.execute()[1]
            self.token = found

    def _check_policy(self) -> None:
        from redis import RedisError

        try:
            policy = self.client.config_get("maxmemory-policy").get("maxmemory-policy")
        except RedisError:
            return  # CONFIG is often disabled on managed servers
        if policy and policy != EVICTING_OK:
            log.warning(
                "Redis %s has maxmemory-policy %s: under memory pressure it may drop "
                "searchfuse's holds and cooldowns. %s",
                self.shown,
                policy,
                _SETTINGS,
            )
