"""The guard's cache: query normalisation, the key function, the default TTL cache.

A cache hit is free: it spends no turn budget and is served even while the
fuse is tripped, so an agent that asks the same thing twice never pays twice.
The key is the *normalised* query plus the other arguments in canonical form,
because models rephrase only the whitespace and the capitals surprisingly
often. [`search_key`][searchfuse.guard.search_key] is a plain, replaceable function in the manner of
`cachetools.keys.hashkey`: pass your own as `guard(cache_key=...)`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping, MutableMapping
from enum import Enum
from typing import Any, Literal

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_CACHE_TTL",
    "MAX_KEY_DEPTH",
    "MAX_KEY_PARTS",
    "CacheKey",
    "CacheMatch",
    "canonical",
    "key_for_match",
    "make_cache",
    "normalize_query",
    "search_key",
    "search_key_of",
]

#: Entries kept by the default cache.
DEFAULT_CACHE_SIZE = 256
#: Seconds an entry of the default cache lives (15 minutes).
DEFAULT_CACHE_TTL = 900.0

#: A cache key function: `(query, **params) -> hashable key`.
CacheKey = Callable[..., Hashable]
#: How alike a query must be to an answered one to be a cache hit (`guard(cache_match=...)`).
CacheMatch = Literal["exact", "near"]

# cachetools caches are not thread-safe, and one cache instance may be shared
# by several guards; one lock for every guard's cache and in-flight table is
# simplest and costs nothing measurable (it is held for dict operations only).
CACHE_LOCK = threading.Lock()

# Scalars that stand for themselves, tagged with their type: `True == 1 == 1.0`
# in Python, but a tool may answer `flag=True` and `flag=1` differently.
_SCALARS = frozenset((int, float, bool, bytes, complex))
# Values whose reading the decorator may remember (immutable, canonical at once).
_PLAIN_TYPES = frozenset((str, int, float, bool, bytes, type(None)))

#: Containers nested deeper than this, or arguments with more parts than
#: `MAX_KEY_PARTS`, make a call uncacheable (canonicalising them would cost
#: more than the search, or never end).
MAX_KEY_DEPTH = 32
MAX_KEY_PARTS = 10_000


def canonical(value: Any) -> Hashable:
    """`value` as a hashable key part that equals another's only for the same argument.

    Strings and `None` stand for themselves; other values are tagged with
    their exact type, so `True`, `1` and `1.0` (equal in Python) stay
    apart, as do a list and a tuple of the same items. Mappings become
    order-independent sets of pairs, lists and tuples tuples, sets frozensets,
    recursively. Other hashable objects stand for themselves when their type
    defines value equality (dates, decimals, enums, frozen dataclasses...).

    Raises `TypeError` for an argument with no faithful canonical form: an
    unhashable object, an object compared by identity alone (its `repr`
    holds a memory address that a later object may reuse), a container that
    contains itself, or one nested deeper than `MAX_KEY_DEPTH`. The guard
    then runs the call uncached.
    """
    return _canonical(value, set(), [MAX_KEY_PARTS])


def _canonical(value: Any, path: set[int], budget: list[int]) -> Hashable:
    kind = type(value)
    if kind is str or value is None:
        return value  # type: ignore[no-any-return]
    if kind in _SCALARS:
        return (kind, value)
    budget[0] -= 1
    if budget[0] < 0 or len(path) >= MAX_KEY_DEPTH:
        raise TypeError("argument too large or nested too deeply to key the cache by")
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        if id(value) in path:
            raise TypeError("argument contains itself: it cannot key the cache")
        path.add(id(value))
        try:
            if isinstance(value, Mapping):
                return (
                    kind,
                    frozenset(
                        (_canonical(k, path, budget), _canonical(v, path, budget))
                        for k, v in value.items()
                    ),
                )
            if isinstance(value, list | tuple):
                return (kind, tuple(_canonical(item, path, budget) for item in value))
            return (kind, frozenset(_canonical(item, path, budget) for item in value))
        finally:
            path.discard(id(value))
    if isinstance(value, bytearray):
        return (bytearray, bytes(value))  # its value at call time, like a list's items
    if isinstance(value, type | Enum):
        return (kind, value)  # a class or an enum member: itself, for as long as the key lives
    if kind.__hash__ is None or kind.__eq__ is object.__eq__:  # type: ignore[comparison-overlap]
        raise TypeError(
            f"a {kind.__qualname__} argument has no value to key the cache by "
            "(unhashable, or compared by identity only)"
        )
    hash(value)  # a hashable type may still hold an unhashable part
    return (kind, value)


def normalize_query(query: str) -> str:
    """`"  Tavily   RATE limits "` -> `"tavily rate limits"`.

    Case-folded, runs of whitespace collapsed to one space, trimmed.
    """
    return " ".join(query.split()).casefold()


def search_key(query: str, /, **params: Any) -> Hashable:
    """The default cache key: the normalised query plus the canonical other arguments.

    `search_key("Tavily  limits", max_results=5)` equals
    `search_key("tavily limits", max_results=5)`; a different
    `max_results` is a different key. To leave an argument out of the key,
    wrap it:

    ```python
    guard(cache_key=lambda query, task_id=None, **params: search_key(query, **params))
    ```
    """
    return search_key_of(query, params)


def search_key_of(query: str, params: Mapping[str, Any]) -> Hashable:
    """[`search_key`][searchfuse.guard.search_key] with the arguments as a mapping (what the guard
    calls: no `**`)."""
    query = " ".join(query.split()).casefold()  # normalize_query, inlined: the hot path
    if not params:
        return (query,)
    parts = []
    for name, value in sorted(params.items()):  # names are unique: values are never compared
        kind = type(value)
        if kind is str or value is None:
            parts.append((name, value))
        elif kind in _SCALARS:
            parts.append((name, (kind, value)))
        else:
            parts.append((name, canonical(value)))
    return (query, tuple(parts))


def key_for_match(cache_match: object, cache_key: CacheKey) -> CacheKey:
    """The key function `guard(cache_match=..., cache_key=...)` means."""
    if cache_match == "exact":
        return cache_key
    if cache_match != "near":
        raise ValueError(f'cache_match must be "exact" or "near", got {cache_match!r}')
    if cache_key is not search_key:
        raise ValueError(
            'give cache_key= or cache_match="near", not both: cache_match="near" is '
            "cache_key=searchfuse.guard.near_key"
        )
    from searchfuse.guard.near import near_key

    return near_key


def make_cache(
    cache: bool | str | MutableMapping[Any, Any] | None,
    *,
    timer: Callable[[], float],
    router: Any = None,
) -> MutableMapping[Any, Any] | None:
    """The cache a guard uses for its `cache=` argument.

    `True`: a `cachetools.TTLCache` of `DEFAULT_CACHE_SIZE`
    entries living `DEFAULT_CACHE_TTL` seconds, timed by `timer` (the
    guard's clock); `"shared"`: the same sizes kept in `router`'s store
    ([`Router.shared_cache`][searchfuse.Router.shared_cache]), shared by every process using that
    store; `False` or `None`: no cache; a mapping (any `cachetools` cache, or
    a plain `dict`): used as it is.
    """
    if cache == "shared":
        if router is None or not hasattr(router, "shared_cache"):
            raise ValueError(
                'cache="shared" keeps results in a router\'s store: pass router=Router(...)'
            )
        shared: MutableMapping[Any, Any] = router.shared_cache(
            ttl=DEFAULT_CACHE_TTL, maxsize=DEFAULT_CACHE_SIZE
        )
        return shared
    if cache is True:
        import cachetools  # imported by the first guard with a cache, not by `import searchfuse`

        return cachetools.TTLCache(maxsize=DEFAULT_CACHE_SIZE, ttl=DEFAULT_CACHE_TTL, timer=timer)
    if cache is False or cache is None:
        return None
    if isinstance(cache, MutableMapping):
        return cache
    raise TypeError(
        f'cache must be True, "shared", False or a cache instance (a MutableMapping), got {cache!r}'
    )


def cache_size(cache: MutableMapping[Any, Any]) -> int:
    """Live entries in `cache`, expired TTL entries dropped first (hold `CACHE_LOCK`)."""
    expire = getattr(cache, "expire", None)  # cachetools' TTLCache and TLRUCache
    if callable(expire):
        expire()
    return len(cache)
