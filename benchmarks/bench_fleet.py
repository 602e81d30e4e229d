"""A fleet: several processes searching as fast as they can, sharing keys through one store.

Run: ``python benchmarks/bench_fleet.py [--processes 4] [--keys 4] [--rpm 30]
[--minutes 2] [--scale 10] [--busy 2] [--redis redis://127.0.0.1:6379/0]``

The simulated Tavily enforces each key's rate the way Tavily does (at most
``rpm`` searches in any sliding 60-second window, else 429). Every process
runs a router with pacing on, over one SQLite file, then over one Redis (a
``redis-server`` from PATH on a free loopback port unless ``--redis`` is
given). Time runs ``--scale`` times faster than the wall clock for the
simulator and every router alike (one shared epoch), so a two-minute run
takes 24 seconds once every process is ready. Scaling time scales network
delay too: at 5x, pacing's one-second margin over Tavily's window is 200 ms
of real delay between the pacing decision and the simulator's clock. Printed: the 429s the
simulator answered (the target is 0) and the searches served against the
keys' aggregate rate over the run (the target is at least 95%). "late ms" is the
longest a request of the last 256 left after its grant in any process, in real
milliseconds (the margin is twice it in simulated time, at most 3 s a minute).

Each store runs twice: on the machine as it is, then with ``--busy`` CPU-bound
processes beside the fleet (a loaded machine: requests leave later after
their grant, and the pacing margin has to cover it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from contextlib import AbstractContextManager
from pathlib import Path

from searchfuse.testing import FakeTavily

WORKER = textwrap.dedent(
    """
    import json, sys, time
    from searchfuse import Router, SearchRefused, Throttled
    from searchfuse.router.config import KeyEntry
    from searchfuse.router.state import RedisStore, SqliteStore

    url, kind, where, ns, keys, rpm, real0, start, scale = sys.argv[1:10]
    real0, start, scale = float(real0), float(start), float(scale)
    clock = lambda: start + (time.time() - real0) * scale
    sleep = lambda seconds: time.sleep(seconds / scale)
    store = SqliteStore(where) if kind == "sqlite" else RedisStore(where, namespace=ns)
    entries = [KeyEntry(k, rpm=int(rpm)) for k in json.loads(keys)]
    router = Router(entries, state=store, base_url=url, clock=clock, sleep=sleep,
                    max_wait=5.0, sync_interval=1e9)
    served = throttled = refused = 0
    print("ready", flush=True)
    begin, end = (float(x) for x in sys.stdin.readline().split())
    sleep(max(0.0, begin - clock()))  # every process starts at the same instant
    while clock() < end:
        try:
            router.search("fleet query")
            served += 1
        except Throttled:
            throttled += 1
        except SearchRefused:  # a 429 (or the hold after one): the run has failed its target
            refused += 1
            sleep(1.0)
    late = router._core.ledger.lateness.seen  # how late requests left after their grant, lately
    print(json.dumps({"served": served, "throttled": throttled, "refused": refused, "late": late}))
    """
)


def redis_server(folder: Path) -> AbstractContextManager[str]:
    """The test suite's redis-server on a free loopback port in `folder` (yields its URL)."""
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not on PATH; pass --redis URL")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.stores.redis_server import redis_server as start

    return start(folder)


BUSY = "while True:\n    pass\n"


def run(kind: str, where: str, args: argparse.Namespace, busy: int = 0) -> dict[str, float]:
    """One fleet run; `busy` CPU-bound processes spin beside it meanwhile."""
    spinners = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(busy)]
    try:
        return _run(kind, where, args)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def _run(kind: str, where: str, args: argparse.Namespace) -> dict[str, float]:
    keys = [f"tvly-dev-fleet{i:04d}" for i in range(args.keys)]
    real0 = time.time()
    start = real0  # the simulated epoch starts now

    def clock() -> float:
        return start + (time.time() - real0) * args.scale

    fake = FakeTavily(clock=clock)
    for key in keys:
        fake.add_key(key, rpm=args.rpm)
    duration = args.minutes * 60.0
    with fake.serve() as url:
        common = [url, kind, where, f"fleet{time.time_ns()}", json.dumps(keys), str(args.rpm)]
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, *common, str(real0), str(start), str(args.scale)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(args.processes)
        ]
        for w in workers:  # started and connected to the store
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        begin = clock() + 0.5 * args.scale
        end = begin + duration
        for w in workers:
            assert w.stdin is not None
            w.stdin.write(f"{begin!r} {end!r}\n")
            w.stdin.flush()
        results = [json.loads(w.communicate(timeout=600)[0]) for w in workers]
    searches = [r for r in fake.searches if begin <= r.time < end]
    if args.debug:
        buckets: dict[int, int] = {}
        for r in fake.searches:
            b = int((r.time - begin) // 5) * 5
            buckets[b] = buckets.get(b, 0) + 1
        print(kind, sorted(buckets.items()))
    capacity = args.keys * args.rpm * duration / 60.0
    served = sum(1 for r in searches if r.status == 200)
    return {
        "429": sum(1 for r in searches if r.status == 429),
        "served": served,
        "capacity": capacity,
        "used": served / capacity,
        "throttled": sum(r["throttled"] for r in results),
        "late": max(r["late"] for r in results) / args.scale,
        "outside": len(fake.searches) - len(searches),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--keys", type=int, default=4)
    parser.add_argument("--rpm", type=int, default=30)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--scale", type=float, default=5.0)
    parser.add_argument("--busy", type=int, default=2, help="CPU-bound processes, loaded runs")
    parser.add_argument("--redis", default=None)
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args()
    print(
        f"{args.processes} processes, {args.keys} keys x {args.rpm} rpm, "
        f"{args.minutes:g} simulated minutes at {args.scale:g}x"
    )
    print(
        f"{'store':8} {'busy':>4} {'429s':>5} {'served':>7} {'capacity':>9} {'used':>7} "
        f"{'paced':>6} {'late ms':>8}"
    )
    rows: dict[tuple[str, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for busy in (0, args.busy):
            name = f"fleet{busy}.db"
            rows["sqlite", busy] = run("sqlite", str(Path(tmp) / name), args, busy)
        if args.redis:
            for busy in (0, args.busy):
                rows["redis", busy] = run("redis", args.redis, args, busy)
        else:
            with redis_server(Path(tmp)) as url:
                for busy in (0, args.busy):
                    rows["redis", busy] = run("redis", url, args, busy)
    for (kind, busy), row in rows.items():
        print(
            f"{kind:8} {busy:4d} {row['429']:5.0f} {row['served']:7.0f} "
            f"{row['capacity']:9.0f} {row['used']:7.1%} {row['throttled']:6.0f} "
            f"{row['late'] * 1000:8.0f}"
        )


if __name__ == "__main__":
    main()
