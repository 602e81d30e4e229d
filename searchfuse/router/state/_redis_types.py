"""The Redis keys a `RedisStore` keeps, the type each must have, and their repair.

Someone's `RPUSH searchfuse:month x`, or a hash left where a string belongs,
makes every command on that key answer `WRONGTYPE`. State is a cache: such a
key is deleted with a warning naming it, and the store goes on, instead of
failing every search with an error that names neither the key nor a fix.
"""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = ["RedisNames", "expected_types", "glob_escape", "reset_wrong_types", "wrong_type"]

log = logging.getLogger("searchfuse.state")

#: Fixed keys (after the namespace and a colon) and their Redis types.
FIXED = {
    "born": "string",
    "month": "string",
    "seq": "string",
    "epoch": "string",
    "hold": "hash",
    "revs": "zset",
    "cache": "zset",
    "events": "list",
}
#: Families of keys by prefix (after the namespace and a colon).
FAMILIES = {
    "k:": "hash",
    "a:": "hash",
    "ring:": "hash",
    "t:": "hash",
    "c:": "string",
    "claim:": "string",
}
_GLOB = re.compile(r"([\\*?\[\]])")


def glob_escape(text: str) -> str:
    """`text` as a Redis glob pattern matching only itself."""
    return _GLOB.sub(r"\\\1", text)


def wrong_type(exc: BaseException) -> bool:
    """Whether a Redis error says a key holds another type (`WRONGTYPE`)."""
    return "WRONGTYPE" in str(exc)


def expected_types(ns: str, name: str) -> str | None:
    """The type key `name` must have in namespace `ns` (`None`: not searchfuse's)."""
    if not name.startswith(ns + ":"):
        return None
    rest = name[len(ns) + 1 :]
    if rest in FIXED:
        return FIXED[rest]
    for prefix, kind in FAMILIES.items():
        if rest.startswith(prefix):
            return kind
    return None


def reset_wrong_types(client: Any, ns: str) -> list[str]:
    """Delete every key of namespace `ns` whose type is not the one searchfuse
    keeps there, each named in one warning; returns the names deleted.

    Scans the namespace (only after a `WRONGTYPE` answer, never per search).
    When the change log (`revs`) was one of them, it is rebuilt from the key and
    account records, and the epoch moves, so every reader reads everything again.
    """
    names = [f"{ns}:{rest}" for rest in FIXED]
    names += client.scan_iter(match=_GLOB.sub(r"\\\1", ns) + ":*", count=1000)
    names = list(dict.fromkeys(names))
    bad: list[tuple[str, str, str]] = []
    for start in range(0, len(names), 500):
        batch = names[start : start + 500]
        with client.pipeline(transaction=False) as pipe:
            for name in batch:
                pipe.type(name)
            found = pipe.execute()
        for name, kind in zip(batch, found, strict=True):
            want = expected_types(ns, name)
            if want is not None and kind not in ("none", want):
                bad.append((name, kind, want))
    for name, kind, want in bad:
        client.delete(name)
        log.warning(
            "router state: Redis key %r held a %s where searchfuse keeps a %s "
            "(written by something else); reset",
            name,
            kind,
            want,
        )
    if any(name == f"{ns}:revs" for name, _, _ in bad):
        gone = {name for name, _, _ in bad}
        records = [n for n in names if n.startswith((f"{ns}:k:", f"{ns}:a:")) and n not in gone]
        with client.pipeline() as pipe:
            for name in records:
                pipe.zadd(f"{ns}:revs", {name[len(ns) + 1 :]: 0})
            pipe.incr(f"{ns}:epoch")
            pipe.execute()
    return [name for name, _, _ in bad]


class RedisNames:
    """The names of a namespace's Redis keys (`ns`: the namespace)."""

    ns: str

    def k(self, fp: str) -> str:
        return f"{self.ns}:k:{fp}"

    def a(self, name: str) -> str:
        return f"{self.ns}:a:{name}"

    def ring_key(self, name: str) -> str:
        return f"{self.ns}:ring:{name}"

    def tally_key(self, name: str) -> str:
        return f"{self.ns}:t:{name}"

    @property
    def month_key(self) -> str:
        return f"{self.ns}:month"

    @property
    def hold_key(self) -> str:
        return f"{self.ns}:hold"

    @property
    def seq_key(self) -> str:
        return f"{self.ns}:seq"

    @property
    def epoch_key(self) -> str:
        return f"{self.ns}:epoch"

    @property
    def events_key(self) -> str:
        return f"{self.ns}:events"

    @property
    def revs_key(self) -> str:
        return f"{self.ns}:revs"

    def _cache(self, key: str) -> str:
        return f"{self.ns}:c:{key}"

    @property
    def _cache_index(self) -> str:
        return f"{self.ns}:cache"
