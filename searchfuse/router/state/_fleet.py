"""Which fleet a Redis store's records belong to: its namespace.

Every router that shares a Redis server would otherwise share one set of
records: a 429 hold of one team's keys would refuse another team whose keys
are not limited at all, and one team's `reset_month()` would wipe the
other's cooldowns and counters. So a router that names Redis by URL keeps its
records under a namespace of its own key set (`searchfuse:<12 hex digits>`,
the same for every process holding the same keys, in any order), unless the
URL names one (`redis://host:6379/0?namespace=team-a`): fleets that share a key
must share a namespace, and name it.

The shared cache is kept apart the same way, in every store: an entry's name
includes where its answer came from (`cache_scope`).
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from collections.abc import Iterable
from typing import Protocol

from searchfuse.errors import ConfigError

__all__ = [
    "DEFAULT_NAMESPACE",
    "cache_scope",
    "check_namespace",
    "fleet_namespace",
    "split_namespace",
]

#: The namespace of a `RedisStore` made without one (and of a router without keys).
DEFAULT_NAMESPACE = "searchfuse"
_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")


def fleet_namespace(fingerprints: Iterable[str]) -> str:
    """The namespace of the fleet holding the keys with these fingerprints."""
    found = sorted(set(fingerprints))
    if not found:
        return DEFAULT_NAMESPACE
    digest = hashlib.sha256("\n".join(found).encode("utf-8")).hexdigest()[:12]
    return f"{DEFAULT_NAMESPACE}:{digest}"


def check_namespace(namespace: object, where: str) -> str:
    """`namespace` if it can prefix Redis keys; else a ConfigError naming `where`."""
    if isinstance(namespace, str) and _NAME.fullmatch(namespace):
        return namespace
    raise ConfigError(
        where,
        None,
        f"the Redis namespace {str(namespace)[:40]!r} is not 1 to 100 letters, digits, "
        "'_', '.', ':' or '-'",
        "name the fleet with such a word, for example ?namespace=team-a",
    )


def split_namespace(url: str, shown: str) -> tuple[str, str | None]:
    """`url` without its `namespace` parameter, and that parameter (`None`: not named).

    `shown` is the URL without its password, for the error of a namespace named
    twice or badly."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    named = [value for name, value in query if name == "namespace"]
    if not named:
        return url, None
    if len(set(named)) > 1:
        raise ConfigError(
            shown,
            None,
            "names the namespace more than once",
            "keep one ?namespace= parameter",
        )
    rest = urllib.parse.urlencode([(n, v) for n, v in query if n != "namespace"])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), check_namespace(named[0], shown)


class _Keyed(Protocol):
    @property
    def fingerprint(self) -> str: ...


def cache_scope(sources: Iterable[tuple[str, str, Iterable[_Keyed]]]) -> str:
    """Where a router's answers come from, as a short digest: each provider's name,
    its address and the fingerprints of its keys. Two routers share cached
    answers only when they ask the same backends with the same keys."""
    parts = sorted(
        json.dumps([name, url, sorted(k.fingerprint for k in keys)], separators=(",", ":"))
        for name, url, keys in sources
    )
    if not parts:
        return ""
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:24]
