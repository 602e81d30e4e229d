"""The shared cache's eviction rule, written once: a store keeps at most `maxsize`
entries, the ones that expire last; the entries that expire soonest go first.

Memory and the JSON file apply `evicted`; SQLite (`ORDER BY expires DESC ...
OFFSET maxsize`) and Redis (a sorted set scored by expiry) say the same in
their own terms. Expiry is the writer's clock's (the router's), never the
server's, and an expired entry is never served.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

__all__ = ["evicted"]


def evicted(expiries: Mapping[str, float], maxsize: int) -> list[str]:
    """The keys to drop so that at most `maxsize` (at least 1) of `expiries` are kept
    before one more entry is put: those that expire soonest."""
    extra = len(expiries) - max(1, maxsize) + 1
    if extra <= 0:
        return []
    return heapq.nsmallest(extra, expiries, key=expiries.__getitem__)
