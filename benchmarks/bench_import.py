"""What ``import searchfuse`` costs, next to ``import httpx``, in fresh interpreters.

Each round starts one interpreter per module (alternating, so both see the
same machine load) and measures the import alone, not interpreter start-up;
the best round of each counts. Target: searchfuse <= 1.4x httpx.

Run::

    python benchmarks/bench_import.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys

TARGET = 1.4

_PROBE = (
    "import time\n"
    "start = time.perf_counter()\n"
    "import {module}\n"
    "print(time.perf_counter() - start)\n"
)


def import_seconds(module: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(module=module)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return float(out.stdout.strip())


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds; the best one counts")
    options = parser.parse_args(argv)

    best = {"httpx": float("inf"), "searchfuse": float("inf")}
    for _ in range(options.rounds):
        for module in best:
            best[module] = min(best[module], import_seconds(module))
    ratio = best["searchfuse"] / best["httpx"]
    print(
        f"Python {platform.python_version()} ({platform.python_implementation()}) "
        f"on {platform.system()} {platform.machine()}; best of {options.rounds} rounds"
    )
    for module, seconds in best.items():
        print(f"import {module:<12}{seconds * 1000:>8.1f} ms")
    print(f"import searchfuse / import httpx: {ratio:.2f}x (target <= {TARGET}x)")
    return ratio


if __name__ == "__main__":
    main()
