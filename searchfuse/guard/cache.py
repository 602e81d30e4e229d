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
from typing import Any

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_CACHE_TTL",
    "CacheKey",
    "canonical",
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

_PLAIN = (str, int, float, bool, bytes, type(None))
_PLAIN_TYPES = frozenset(_PLAIN)

# cachetools caches are not thread-safe, and one cache instance may be shared
# by several guards; one lock for every guard's cache and in-flight table is
# simplest and costs nothing measurable (it is held for dict operations only).
CACHE_LOCK = threading.Lock()


def normalize_query(query: str) -> str:
    """`"  Tavily   RATE limits "` -> `"tavily rate limits"`.

    Case-folded, runs of whitespace collapsed to one space, trimmed.
    """
    return " ".join(query.split()).casefold()


def canonical(value: Any) -> Hashable:
    """`value` as a hashable, order-independent key part.

    Mappings become sorted tuples of pairs, lists and tuples become tuples,
    sets become frozensets, recursively; other hashable objects stand for
    themselves and unhashable ones for their `repr`.
    """
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, Mapping):
        pairs = ((canonical(k), canonical(v)) for k, v in value.items())
        return (Mapping, tuple(sorted(pairs, key=repr)))
    if isinstance(value, list | tuple):
        return tuple(canonical(item) for item in value)
    if isinstance(value, set | frozenset):
        return frozenset(canonical(item) for item in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value  # type: ignore[no-any-return]


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
    items = sorted(params.items())  # keys are unique: values are never compared
    for item in items:
        if type(item[1]) not in _PLAIN_TYPES:
            return (query, tuple(sorted([(k, canonical(v)) for k, v in items])))
    return (query, tuple(items))


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
