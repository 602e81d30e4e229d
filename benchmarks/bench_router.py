"""The router's per-search cost against a plain httpx request to the same loopback server.

Run: ``python benchmarks/bench_router.py [--rounds 5] [--calls 200] [--batch 10]``

A second table says what searchfuse adds per search in CPU time, broken down:
the same variants over an in-process transport (no socket: httpx's own client
work is all that is left of the request), each timed by this process's CPU
clock, so other work on the machine barely moves it. The router's own work
is the memory store's figure minus the plain request's; the SQLite
transaction and the JSON file's read and write are their store's figure
minus the memory store's.

Both sides talk real HTTP to the simulated Tavily on 127.0.0.1, served by a
separate process (in a thread of this one, the server would take the GIL
from the measured client each time the client waits on SQLite or a file),
and reuse one connection pool. The baseline is a bare ``httpx.Client.post("/search")``; the
router adds key choice, pacing, classification and state bookkeeping: in
memory, in SQLite (the default store of ``Router.from_config``) and in a JSON
state file. Two more rows are the default path's floor: the same bare request
after a WAL transaction of one row, and after the statements of one grant on
a database the SQLite store made (``Floor``), with none of searchfuse's
Python around them. Rounds are interleaved so machine noise hits every variant
alike; the figure is the median per-call time of each variant and its ratio
to the baseline measured in the same round (the median of the rounds, with
their lowest and highest).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from searchfuse import Router
from searchfuse.router.config import KeyEntry
from searchfuse.router.state._sqlite_rows import CHARGE_ACCOUNT, CHARGE_KEY, SELECT_META_RING
from searchfuse.testing import FakeTavily

KEYS = ["tvly-dev-bench0001", "tvly-dev-bench0002", "tvly-dev-bench0003"]


def per_call(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def cpu_per_call(fn: Callable[[], object], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls


def serve(urls: multiprocessing.Queue[str], stop: Any) -> None:
    """Run the simulated Tavily on loopback until `stop` is set (in its own process)."""
    fake = FakeTavily(clock=time.time)
    fake.add_account("bench@example.com", plan_limit=None)
    for key in KEYS:
        fake.add_key(key, account="bench@example.com", rpm=10_000_000)
    with fake.serve() as url:
        urls.put(url)
        stop.wait(600)


class Floor:
    """The floor the router's default path is measured against: the statements of
    one grant (`BEGIN IMMEDIATE`, the meta row and pacing log in one read, the
    pacing slot, the log's position, the key, the account, the change counter,
    `COMMIT`) on a database the SQLite store made, with none of searchfuse's
    Python around them."""

    def __init__(self, path: Path, url: str, transport: httpx.BaseTransport | None = None) -> None:
        entries = [KeyEntry(k, account="bench@example.com", rpm=1_000_000) for k in KEYS]
        seed = Router(entries, base_url=url, state=path, transport=transport)
        for _ in range(3):
            seed.search("benchmark query")
        seed.close()
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.fp, self.account = self.conn.execute("SELECT fp, account FROM keys").fetchone()
        self.log = f"search:{self.fp}"

    def transaction(self) -> None:
        conn, now = self.conn, time.time()
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(SELECT_META_RING, (self.log,)).fetchone()
        rev, size, position = row[3] + 1, row[5], row[6]
        conn.execute(
            "INSERT OR REPLACE INTO ring_slots (name, slot, t) VALUES (?, ?, ?)",
            (self.log, position % size, now),
        )
        conn.execute("UPDATE rings SET seq = ? WHERE name = ?", (position + 1, self.log))
        conn.execute(CHARGE_KEY, (self.account, rev, now, float(rev), rev, self.fp))
        conn.execute(CHARGE_ACCOUNT, (float(rev), rev, self.account))
        conn.execute("UPDATE searchfuse_meta SET seq = ?", (rev,))
        conn.execute("COMMIT")

    def one_row(self) -> None:
        """The least a WAL write transaction is: one row of one page changed."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE searchfuse_meta SET seq = seq + 1")
        conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--batch", type=int, default=10, help="calls per turn of a variant")
    args = parser.parse_args()

    body = {"query": "benchmark query", "max_results": 5, "include_usage": True}

    ctx = multiprocessing.get_context("spawn")
    urls: multiprocessing.Queue[str] = ctx.Queue()
    stop = ctx.Event()
    server = ctx.Process(target=serve, args=(urls, stop), daemon=True)
    server.start()
    try:
        run(args, urls.get(timeout=60), body)
    finally:
        stop.set()
        server.join(timeout=10)
    breakdown(args, body)


def breakdown(args: argparse.Namespace, body: dict[str, Any]) -> None:
    """CPU time per search over an in-process transport: what each part adds."""
    answer = httpx.Response(
        200,
        json={
            "query": body["query"],
            "results": [{"title": "t", "url": "https://example.com", "content": "c"}] * 5,
            "usage": {"credits": 1},
        },
    ).content

    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=answer, headers={"content-type": "application/json"})

    url = "http://127.0.0.1:9"
    with tempfile.TemporaryDirectory() as tmp:
        plain = httpx.Client(base_url=url, transport=httpx.MockTransport(reply))
        headers = {"Authorization": f"Bearer {KEYS[0]}"}
        entries = [KeyEntry(k, account="bench@example.com", rpm=1_000_000) for k in KEYS]
        routers = {
            "memory": Router(entries, base_url=url, transport=httpx.MockTransport(reply)),
            "sqlite": Router(
                entries,
                base_url=url,
                state=Path(tmp) / "searchfuse.db",
                transport=httpx.MockTransport(reply),
            ),
            "json": Router(
                entries,
                base_url=url,
                state=Path(tmp) / "quota.json",
                transport=httpx.MockTransport(reply),
            ),
        }
        floor = Floor(Path(tmp) / "floor.db", url, httpx.MockTransport(reply))
        variants: dict[str, Callable[[], object]] = {
            "plain": lambda: plain.post("/search", json=body, headers=headers),
            "one row": floor.one_row,
            "floor": floor.transaction,
            **{name: (lambda r=r: r.search(body["query"])) for name, r in routers.items()},
        }
        for fn in variants.values():
            cpu_per_call(fn, 50)
        best = dict.fromkeys(variants, float("inf"))
        calls = max(args.calls, 500)
        for r in range(args.rounds):
            names = list(variants)
            k = r % len(names)
            for name in names[k:] + names[:k]:
                best[name] = min(best[name], cpu_per_call(variants[name], calls))
        plain.close()
        floor.close()
        for router in routers.values():
            router.close()

    us = {name: seconds * 1e6 for name, seconds in best.items()}
    print()
    print(f"CPU per search, in-process transport, best of {args.rounds} rounds x {calls} calls")
    rows = [
        ("httpx's client work (plain POST)", us["plain"]),
        ("the router's own work (memory store)", us["memory"] - us["plain"]),
        ("+ the SQLite transaction (default)", us["sqlite"] - us["memory"]),
        ("  of which its statements alone (floor)", us["floor"]),
        ("  (a WAL transaction of one row)", us["one row"]),
        ("+ the JSON file's read and write", us["json"] - us["memory"]),
    ]
    for label, value in rows:
        print(f"{label:40} {value:8.1f} us")
    print(
        f"searchfuse adds {us['sqlite'] - us['plain']:.1f} us with SQLite, "
        f"{us['json'] - us['plain']:.1f} us with a JSON file, "
        f"{us['memory'] - us['plain']:.1f} us in memory"
    )


def run(args: argparse.Namespace, url: str, body: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plain = httpx.Client(base_url=url)
        headers = {"Authorization": f"Bearer {KEYS[0]}"}
        # Pacing stays on (it is part of the cost); the keys' rate is set out of reach.
        entries = [KeyEntry(k, account="bench@example.com", rpm=1_000_000) for k in KEYS]
        in_memory = Router(entries, base_url=url)
        sqlite = Router(entries, base_url=url, state=Path(tmp) / "searchfuse.db")
        on_disk = Router(entries, base_url=url, state=Path(tmp) / "quota.json")
        floor = Floor(Path(tmp) / "floor.db", url)

        def floor_search() -> object:
            floor.transaction()
            return plain.post("/search", json=body, headers=headers)

        def one_row_search() -> object:
            floor.one_row()
            return plain.post("/search", json=body, headers=headers)

        variants: dict[str, Callable[[], object]] = {
            "plain httpx POST /search": lambda: plain.post("/search", json=body, headers=headers),
            "the POST + a one-row transaction": one_row_search,
            "the POST + a grant's statements": floor_search,
            "Router.search, memory state": lambda: in_memory.search("benchmark query"),
            "Router.search, SQLite (default)": lambda: sqlite.search("benchmark query"),
            "Router.search, JSON state file": lambda: on_disk.search("benchmark query"),
        }
        for fn in variants.values():  # warm up pools, first /usage syncs
            per_call(fn, 20)
        samples: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        batches = max(1, args.calls // args.batch)
        for r in range(args.rounds):
            spent = dict.fromkeys(names, 0.0)
            # Within a round the variants take turns every `batch` calls, so a
            # slow second of the machine hits them all; each turn starts with
            # another variant, so none is always measured last.
            for b in range(batches):
                k = (r + b) % len(names)
                for name in names[k:] + names[:k]:
                    spent[name] += per_call(variants[name], args.batch) * args.batch
            for name in names:
                samples[name].append(spent[name] / (batches * args.batch))
        plain.close()
        floor.close()
        for router in (in_memory, sqlite, on_disk):
            router.close()

    plain = samples["plain httpx POST /search"]
    print(f"{args.rounds} rounds x {args.calls} calls, loopback HTTP, median per call")
    print(f"{'variant':34} {'us/call':>10} {'ratio':>7} {'rounds':>13}")
    for name, values in samples.items():
        # Each round measures every variant back to back: its ratio is free of the
        # machine's drift between rounds. The figure is the median round's.
        ratios = sorted(v / p for v, p in zip(values, plain, strict=True))
        spread = f"{ratios[0]:.2f}-{ratios[-1]:.2f}"
        print(
            f"{name:34} {statistics.median(values) * 1e6:10.1f} "
            f"{statistics.median(ratios):7.2f}x {spread:>13}"
        )


if __name__ == "__main__":
    main()
