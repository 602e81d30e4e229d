"""What a call through ``searchfuse.guard`` costs, next to a bare call and a tenacity retry.

All four are measured in one run on a no-op backend, so the ratios compare
like with like on whatever machine runs it:

- a bare call of the no-op;
- the no-op under ``tenacity.retry`` (a decorator agents already put on tools);
- the guard passing the call through (``per_turn=None, cache=False``: every
  call runs the fuse check and the turn reservation, then reaches the backend);
- a guard cache hit (the query is read, normalised and found in the cache).

Run::

    python benchmarks/bench_guard.py [--number N] [--repeat 7]
"""

from __future__ import annotations

import argparse
import platform
import sys
import timeit
from collections.abc import Callable
from typing import Any

import tenacity

from searchfuse.guard import guard

RESULT: dict[str, Any] = {"query": "python 3.13 release date", "results": []}


def noop(query: str, max_results: int = 5) -> dict[str, Any]:
    """The backend: answers at once, so only the wrapping is measured."""
    return RESULT


@tenacity.retry(stop=tenacity.stop_after_attempt(3), reraise=True)
def tenacity_noop(query: str, max_results: int = 5) -> dict[str, Any]:
    """The same no-op under a plain tenacity retry."""
    return RESULT


guard_passthrough = guard(noop, per_turn=None, cache=False)
guard_cached = guard(noop, per_turn=None)


def per_call_ns(fn: Callable[..., Any], *, number: int | None, repeat: int) -> float:
    """Nanoseconds per call: the best of ``repeat`` runs of ``number`` calls.

    Without ``number``, each run is made long enough (at least 0.2 s) by
    :meth:`timeit.Timer.autorange`.
    """
    timer = timeit.Timer(lambda: fn("python 3.13 release date"))
    if number is None:
        number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e9


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=None, help="calls per run (default: auto)")
    parser.add_argument("--repeat", type=int, default=7, help="runs; the best one counts")
    options = parser.parse_args(argv)

    guard_cached("python 3.13 release date")  # fill the cache once
    rows = [
        ("bare no-op", noop),
        ("tenacity.retry no-op", tenacity_noop),
        ("guard pass-through", guard_passthrough),
        ("guard cache hit", guard_cached),
    ]
    timings = {
        name: per_call_ns(fn, number=options.number, repeat=options.repeat) for name, fn in rows
    }
    bare = timings["bare no-op"]
    retry = timings["tenacity.retry no-op"]

    print(
        f"Python {platform.python_version()} ({platform.python_implementation()}) "
        f"on {platform.system()} {platform.machine()}; "
        f"best of {options.repeat} runs"
    )
    print(f"{'call':<24}{'ns/call':>10}{'x bare':>10}{'x tenacity':>12}")
    for name, _ in rows:
        ns = timings[name]
        print(f"{name:<24}{ns:>10.0f}{ns / bare:>10.1f}{ns / retry:>12.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
