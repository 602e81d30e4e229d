"""What a call through ``searchfuse.guard`` costs, next to tenacity and cachetools.

All rows are measured in one run on a no-op backend, interleaved round by
round (the best round of each counts), so the ratios compare like with like
on whatever machine runs it, even a busy one:

- a bare call of the no-op;
- the no-op under ``tenacity.retry`` (a decorator agents already put on tools);
- the guard passing the call through inside one long ``with turn():``
  (``per_turn=None, cache=False``: every call runs the fuse check and the turn
  reservation, then reaches the backend);
- the same guard with a fresh ``with turn():`` around each call (one search
  per reply, the pattern agents have: the scope, a new turn id, the first
  reservation of a turn and the scope's exit are all timed);
- a ``cachetools.cached`` hit on a ``TTLCache`` (the cache the guard uses);
- a guard cache hit (the query is read, normalised and found in the cache).

Targets: pass-through <= 0.25x tenacity, with a turn per call too; cache hit
<= 2.5x cachetools.

Run::

    python benchmarks/bench_guard.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import platform
import sys
import timeit
from collections.abc import Callable
from typing import Any

import cachetools
import tenacity

from searchfuse.guard import guard, turn

QUERY = "python 3.13 release date"
RESULT: dict[str, Any] = {"query": QUERY, "results": []}

PASS_THROUGH_TARGET = 0.25
CACHE_HIT_TARGET = 2.5


def noop(query: str, max_results: int = 5) -> dict[str, Any]:
    """The backend: answers at once, so only the wrapping is measured."""
    return RESULT


@tenacity.retry(stop=tenacity.stop_after_attempt(3), reraise=True)
def tenacity_noop(query: str, max_results: int = 5) -> dict[str, Any]:
    """The same no-op under a plain tenacity retry."""
    return RESULT


cachetools_noop = cachetools.cached(cachetools.TTLCache(maxsize=256, ttl=900))(noop)
guard_passthrough = guard(noop, per_turn=None, cache=False)
guard_cached = guard(noop, per_turn=None)


def turn_per_call(query: str) -> dict[str, Any]:
    """One reply, one search: a fresh turn around the guarded call."""
    with turn():
        return guard_passthrough(query)  # type: ignore[no-any-return]


def timer_for(fn: Callable[..., Any]) -> tuple[timeit.Timer, int]:
    timer = timeit.Timer(lambda: fn(QUERY))
    number, _ = timer.autorange()  # at least 0.2 s per round
    return timer, max(1, number // 2)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds; the best one counts")
    options = parser.parse_args(argv)

    guard_cached(QUERY)  # fill both caches once
    cachetools_noop(QUERY)
    rows = [
        ("bare no-op", noop),
        ("tenacity.retry no-op", tenacity_noop),
        ("guard pass-through", guard_passthrough),
        ("guard, a turn per call", turn_per_call),
        ("cachetools.cached hit", cachetools_noop),
        ("guard cache hit", guard_cached),
    ]
    best = {name: float("inf") for name, _ in rows}
    with turn():  # one long turn: the pass-through's reservations land in it
        timers = [(name, *timer_for(fn)) for name, fn in rows]
        for _ in range(options.rounds):
            for name, timer, number in timers:
                ns = timer.timeit(number) / number * 1e9
                best[name] = min(best[name], ns)

    bare = best["bare no-op"]
    passthrough = best["guard pass-through"] / best["tenacity.retry no-op"]
    per_turn = best["guard, a turn per call"] / best["tenacity.retry no-op"]
    hit = best["guard cache hit"] / best["cachetools.cached hit"]
    print(
        f"Python {platform.python_version()} ({platform.python_implementation()}) "
        f"on {platform.system()} {platform.machine()}; best of {options.rounds} rounds"
    )
    print(f"{'call':<24}{'ns/call':>10}{'x bare':>10}")
    for name, _ in rows:
        print(f"{name:<24}{best[name]:>10.0f}{best[name] / bare:>10.1f}")
    print(
        f"guard pass-through / tenacity no-op: {passthrough:.2f}x "
        f"(target <= {PASS_THROUGH_TARGET}x)"
    )
    print(
        f"guard, a turn per call / tenacity:   {per_turn:.2f}x (target <= {PASS_THROUGH_TARGET}x)"
    )
    print(f"guard cache hit / cachetools hit:    {hit:.2f}x (target <= {CACHE_HIT_TARGET}x)")
    sys.stdout.flush()
    return {"passthrough": passthrough, "turn_per_call": per_turn, "cache_hit": hit}


if __name__ == "__main__":
    main()
