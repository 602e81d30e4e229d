"""How well ``guard(cache_match="near")`` tells near-duplicate queries from look-alikes.

On the labelled set in ``tests/guard/near_pairs.py`` (pairs that ask the same thing
worded differently, and look-alikes whose numbers, versions, years, names, negations,
quoted phrases or direction differ), for the near key and, as the baseline measured
in the same run, the default exact key:

- false hits: look-alikes given one key (a wrong answer served from the cache);
- recall: duplicates given one key (a search saved);
- the cost of making a key, in ns per query and as a multiple of the exact key's
  (interleaved rounds, the best round of each counts).

Goal: no false hit. The recall printed here is the figure ``tests/guard/test_near.py``
holds the key to.

Run::

    python benchmarks/bench_near.py [--rounds 9] [--misses]
"""

from __future__ import annotations

import argparse
import platform
import sys
import timeit
from collections.abc import Callable, Hashable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from searchfuse.guard import near_key, search_key
from tests.guard.near_pairs import DISTINCT, DUPLICATES

Key = Callable[..., Hashable]


def score(key: Key) -> tuple[int, int]:
    """(false hits among the look-alikes, duplicates found)."""
    false_hits = sum(key(a) == key(b) for a, b in DISTINCT)
    found = sum(key(a) == key(b) for a, b in DUPLICATES)
    return false_hits, found


def cost(keys: dict[str, Key], rounds: int) -> dict[str, float]:
    """Best ns per query of each key over `rounds` interleaved rounds."""
    queries = [q for pair in DUPLICATES + DISTINCT for q in pair]
    best = dict.fromkeys(keys, float("inf"))
    for _ in range(rounds):
        for name, key in keys.items():
            seconds = timeit.timeit(
                lambda key=key: [key(q, max_results=5) for q in queries], number=5
            )
            best[name] = min(best[name], seconds / (5 * len(queries)) * 1e9)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--misses", action="store_true", help="list the duplicates missed")
    args = parser.parse_args()
    keys: dict[str, Key] = {"exact (search_key)": search_key, "near (near_key)": near_key}
    print(
        f"Python {platform.python_version()} ({platform.python_implementation()}) on "
        f"{platform.system()} {platform.machine()}; {len(DUPLICATES)} duplicates, "
        f"{len(DISTINCT)} look-alikes; best of {args.rounds} rounds"
    )
    costs = cost(keys, args.rounds)
    base = costs["exact (search_key)"]
    print(f"{'key':<20} {'false hits':>10} {'recall':>14} {'ns/query':>9} {'x exact':>8}")
    for name, key in keys.items():
        false_hits, found = score(key)
        recall = f"{found}/{len(DUPLICATES)} {found / len(DUPLICATES):.1%}"
        print(
            f"{name:<20} {false_hits:>10} {recall:>14} {costs[name]:>9.0f} "
            f"{costs[name] / base:>8.1f}"
        )
    if args.misses:
        for a, b in DUPLICATES:
            if near_key(a) != near_key(b):
                print(f"missed: {a!r} / {b!r}")
    return 0 if score(near_key)[0] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
