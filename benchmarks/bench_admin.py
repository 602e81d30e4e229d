"""Admin calls against the number of keys: `status()`, `diagnose()` and `searchfuse status`.

Run: ``python benchmarks/bench_admin.py [--counts 100,1000,2000,10000] [--rounds 3] [--cpu]``

``--cpu`` times each call by this process's CPU clock instead of the wall
clock: on a machine busy with other work, the figure then says what the call
costs rather than how long it waited for a core.

Each key count gets a router over that many keys whose state looks lived-in:
a third of the keys cooling after a 429 (their cooldowns begun over a few
minutes, so the burst detection has work to do), a third with a last error
and usage figures, the rest fresh. The figure per call is the best of the
rounds; the ratio is the time per key against the time per key of the
smallest count measured in the same run (1.0x is linear).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from searchfuse import Router
from searchfuse.cli import main as cli_main
from searchfuse.router.state import KeyUsage, State


def keys(count: int) -> list[str]:
    return [f"tvly-dev-bench{i:08d}" for i in range(count)]


def lived_in(router: Router) -> None:
    """Cooldowns, errors and figures on the keys, written in one transaction."""
    now = router.now()
    fingerprints = [entry.fingerprint for entry in router.keys]

    def change(state: State) -> None:
        for i, fp in enumerate(fingerprints):
            ks = state.key(fp)
            if i % 3 == 0:
                ks.park(now - (i % 300), 3600.0, "rate_limited")
                ks.note_error(now, 429, "429: too many requests")
            elif i % 3 == 1:
                ks.note_error(now - 60, 503, "503: upstream failed")
                ks.last_usage = KeyUsage(float(i % 900), 1000.0, float(i % 900))
                ks.last_sync_at = now - 120

    router.store.update(now, change)


CLOCK = time.perf_counter


def best(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = CLOCK()
        fn()
        times.append(CLOCK() - start)
    return min(times)


def cli_status(folder: Path) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        cli_main(["status", "--config", str(folder / "config" / "keys.json")])


def measure(count: int, rounds: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "config").mkdir()
        (folder / "state").mkdir()
        path = folder / "config" / "keys.json"
        entries = [{"key": key} for key in keys(count)]
        path.write_text(json.dumps({"format_version": 2, "keys": entries}))
        os.chmod(path, 0o600)
        # The real clock: `searchfuse status` reads the same state at the same time.
        router = Router.from_config(path, pace=False)
        lived_in(router)
        status = best(router.status, rounds)
        diagnose = best(router.diagnose, rounds)
        cli = best(lambda: cli_status(folder), rounds)
        router.close()
        return status, diagnose, cli


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="100,1000,2000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="time by the process's CPU clock")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.cpu else time.perf_counter
    counts = [int(c) for c in args.counts.split(",")]
    results = {count: measure(count, args.rounds) for count in counts}
    base = counts[0]
    clock = "CPU" if args.cpu else "wall"
    print(
        f"{args.rounds} rounds, best of each, {clock} time; "
        f"ratio = time per key / time per key at {base}"
    )
    print(
        f"{'keys':>6}  {'status()':>10} {'ratio':>6}  {'diagnose()':>10} {'ratio':>6}  "
        f"{'CLI status':>10} {'ratio':>6}"
    )
    for count, figures in results.items():
        cells = []
        for i, seconds in enumerate(figures):
            ratio = (seconds / count) / (results[base][i] / base)
            cells.append(f"{seconds:>9.3f}s {ratio:>5.2f}x")
        print(f"{count:>6}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
