"""The state stores under load: p99 of an update with 8 processes, and the router's
own overhead with 1,000 keys against one key.

Run: ``python benchmarks/bench_store.py [--processes 8] [--updates 300]``

1. Each of ``--processes`` processes applies a search's success to one shared
   store as fast as it can (the update every search makes); printed are the
   median and p99 latency of one update, per store (JSON file, SQLite, Redis
   from a ``redis-server`` on PATH), and the p99 ratio to SQLite.
2. ``Router.search`` against an in-process transport that answers at once, so
   what is measured is the router (selection, pacing, state) and not HTTP:
   1,000 keys against one key, default store (SQLite), ratio in the same run.
3. The grant on Redis (hold, cooldown, pacing window and the search counted,
   in one script: one round trip) against a bare ``INCR`` on
   the same server in the same run, and the optimistic ``WATCH``/``MULTI``
   transaction it replaced. A lone writer: one process per round in which the
   variants take turns, ``--batch`` calls at a time (noise from the rest of
   the machine hits every variant alike); then ``--processes`` writers at
   once, each variant in its own processes. ``--grant-only`` runs just this part.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

from searchfuse import Router
from searchfuse.router.config import KeyEntry

WORKER = textwrap.dedent(
    """
    import json, sys, time
    from searchfuse.router.state import JsonFileStore, RedisStore, SqliteStore
    kind, where, n, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    store = {"json": JsonFileStore, "sqlite": SqliteStore}.get(kind, RedisStore)(where)
    while time.time() < start:
        time.sleep(0.001)
    out = []
    for i in range(n):
        t = time.perf_counter()
        store.update(time.time(), lambda s: s.apply_success(f"fp{i % 4}", "acct", None, 1.0,
                                                             time.time()))
        out.append(time.perf_counter() - t)
    print(json.dumps(out))
    """
)


def timed(script: str, args: list[str], processes: int, lead: float) -> list[float]:
    """Run `script` in `processes` processes that start together `lead` seconds
    from now (the last argument); their latencies in seconds, sorted."""
    start = str(time.time() + lead)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, *args, start], stdout=subprocess.PIPE, text=True
        )
        for _ in range(processes)
    ]
    samples: list[float] = []
    for proc in procs:
        samples += json.loads(proc.communicate(timeout=600)[0])
    return sorted(samples)


def contention(kind: str, where: str, processes: int, updates: int) -> list[float]:
    return timed(WORKER, [kind, where, str(updates)], processes, 3.0)


CALLER = """
import json, statistics, sys, time
from searchfuse.router.state import Charge, RedisStore, Store
from searchfuse.router.state._budgets import Line, period_of
def caller(url, ns, kind):
    \"\"\"One call of `kind` on its own store (namespace) and fingerprint.\"\"\"
    store = RedisStore(url, namespace=f"{ns}-{kind}")
    charge = Charge("fp", "acct", None, 1.0)
    client = store.client
    def spend(now):
        # A day's budget of the fleet and one of a conversation (kept 10 minutes).
        if kind != "budgets":
            return ()
        day, ends = period_of("day", now)
        return (
            Line(0, "router:*:searches:day", day, 1e12, 1.0, ends, keep_until=ends + 86400),
            Line(1, "conversation:c-1:searches:", "", 1e12, 1.0, keep_until=now + 600),
        )
    if kind == "incr":
        return lambda: client.incr(ns + ":counter")
    grant = store.grant if kind != "watch" else lambda *a, **k: Store.grant(store, *a, **k)
    def call():
        now = time.time()
        grant(now, "fp", rpm=10**9, window=60.0, honour_hold=True,
              charge=charge, spend=spend(now))
    return call
"""
GRANTER = CALLER + textwrap.dedent(
    """
    url, ns, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    n, start = int(sys.argv[4]), float(sys.argv[5])
    call = caller(url, ns, kind)
    for i in range(50):
        call()
    while time.time() < start:
        time.sleep(0.001)
    out = []
    for i in range(n):
        t = time.perf_counter()
        call()
        out.append(time.perf_counter() - t)
    print(json.dumps(out))
    """
)
# A lone writer: the kinds take turns in one process, `batch` calls at a time;
# printed: each kind's batches (seconds per call).
TURNS = CALLER + textwrap.dedent(
    """
    url, ns, kinds = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    n, batch = int(sys.argv[4]), int(sys.argv[5])
    calls = {kind: caller(url, ns, kind) for kind in kinds}
    for call in calls.values():
        for _ in range(50):
            call()
    out = {kind: [] for kind in kinds}
    for _ in range(n // batch):
        for kind, call in calls.items():
            t = time.perf_counter()
            for _ in range(batch):
                call()
            out[kind].append((time.perf_counter() - t) / batch)
    print(json.dumps(out))
    """
)
GRANT_KINDS = {
    "incr": "bare INCR",
    "script": "grant, one script",
    "budgets": "+ two budgets",
    "watch": "grant, WATCH/MULTI",
}


def grants(url: str, processes: int, calls: int, rounds: int) -> dict[str, list[float]]:
    """Median latency of each kind, per round (the kinds take turns within a round)."""
    out: dict[str, list[float]] = {kind: [] for kind in GRANT_KINDS}
    for r in range(rounds):
        for kind in GRANT_KINDS:
            ns = f"bench-grant-{r}-{time.time_ns()}"
            samples = timed(GRANTER, [url, ns, kind, str(calls)], processes, 1.0)
            out[kind].append(statistics.median(samples))
    return out


def lone(url: str, calls: int, rounds: int, batch: int) -> tuple[dict[str, list[float]], ...]:
    """A lone writer, the kinds taking turns in one process per round: each kind's
    median time per call and its median ratio to the same round's INCR batches."""
    times: dict[str, list[float]] = {kind: [] for kind in GRANT_KINDS}
    ratios: dict[str, list[float]] = {kind: [] for kind in GRANT_KINDS}
    for r in range(rounds):
        ns = f"bench-lone-{r}-{time.time_ns()}"
        args = [url, ns, ",".join(GRANT_KINDS), str(calls), str(batch)]
        run = subprocess.run([sys.executable, "-c", TURNS, *args], capture_output=True, text=True)
        batches = json.loads(run.stdout)
        for kind, samples in batches.items():
            times[kind].append(statistics.median(samples))
            turns = zip(samples, batches["incr"], strict=True)
            ratios[kind].append(statistics.median(t / b for t, b in turns))
    return times, ratios


def print_grants(url: str, processes: int, calls: int, rounds: int, batch: int) -> None:
    times, ratios = lone(url, calls, rounds, batch)
    print(f"grant on Redis, 1 writer x {calls} calls, turns of {batch}, median of {rounds} rounds")
    print_rows(times, ratios)
    rows = grants(url, processes, calls, rounds)
    print(f"grant on Redis, {processes} writers x {calls} calls, median of {rounds} rounds")
    base = rows["incr"]
    print_rows(rows, {k: [t / b for t, b in zip(v, base, strict=True)] for k, v in rows.items()})


def print_rows(times: dict[str, list[float]], ratios: dict[str, list[float]]) -> None:
    print(f"{'variant':22} {'median us':>10} {'/ INCR':>8} {'rounds':>12}")
    for kind, label in GRANT_KINDS.items():
        spread = sorted(ratios[kind])
        print(
            f"{label:22} {statistics.median(times[kind]) * 1e6:10.0f} "
            f"{statistics.median(spread):7.2f}x {spread[0]:5.2f}-{spread[-1]:.2f}"
        )


def p(samples: list[float], q: float) -> float:
    return samples[min(len(samples) - 1, int(q * len(samples)))]


def overhead(keys: int, calls: int, state: Path) -> float:
    body = json.dumps({"results": [], "usage": {"credits": 1}}).encode()
    usage = json.dumps({"key": {"usage": 0, "limit": None}, "account": {}}).encode()

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=usage if request.url.path == "/usage" else body)

    entries = [KeyEntry(f"tvly-dev-over{i:06d}", rpm=1_000_000) for i in range(keys)]
    router = Router(entries, state=state, transport=httpx.MockTransport(answer))
    for _ in range(50):
        router.search("q")
    best = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls):
            router.search("q")
        best.append((time.perf_counter() - t) / calls)
    router.close()
    return statistics.median(best)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--redis", default=None, help="a Redis URL (default: start one)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=20, help="calls per turn (part 3)")
    parser.add_argument("--grant-only", action="store_true", help="only part 3")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.grant_only:
            sys.path.insert(0, str(Path(__file__).parent))
            from bench_fleet import redis_server

            calls, batch = args.calls * 10, args.batch
            if args.redis:
                print_grants(args.redis, args.processes, calls, args.rounds, batch)
            else:
                with redis_server(folder) as url:
                    print_grants(url, args.processes, calls, args.rounds, batch)
            return
        print(f"{args.processes} processes x {args.updates} updates of one shared store")
        print(f"{'store':8} {'median us':>10} {'p99 us':>10} {'p99 / SQLite':>13}")
        rows = {
            "json": contention("json", str(folder / "q.json"), args.processes, args.updates),
            "sqlite": contention("sqlite", str(folder / "s.db"), args.processes, args.updates),
        }
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_fleet import redis_server

        if args.redis:
            rows["redis"] = contention("redis", args.redis, args.processes, args.updates)
        else:
            with redis_server(folder) as url:
                rows["redis"] = contention("redis", url, args.processes, args.updates)
        base = p(rows["sqlite"], 0.99)
        for kind, samples in rows.items():
            print(
                f"{kind:8} {p(samples, 0.5) * 1e6:10.0f} {p(samples, 0.99) * 1e6:10.0f} "
                f"{p(samples, 0.99) / base:12.2f}x"
            )
        one = overhead(1, args.calls, folder / "one.db")
        many = overhead(1000, args.calls, folder / "many.db")
        print("router overhead per search (in-process transport, SQLite store)")
        print(f"1 key      {one * 1e6:10.0f} us")
        print(f"1000 keys  {many * 1e6:10.0f} us   {many / one:.2f}x")


if __name__ == "__main__":
    main()
