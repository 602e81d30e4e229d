"""A simulated agent fleet against what users would pick instead of searchfuse.

Run: ``python benchmarks/bench_workload.py [--replies 300] [--keys 4] [--rpm 20] [--seed 7]``

One workload, four ways to serve it. The fleet's replies each fire 1 to 6
tool calls at once (in threads, as agent frameworks do), with queries that
repeat and are rephrased across turns; a reply starts every `--gap` seconds
of simulated time. The simulated Tavily enforces each key's rate (`--rpm`
requests in any 60 s) and answers 429 with Retry-After beyond it.

- one key, as tavily-python does: each call one request, a 429 is the tool's error;
- round-robin over the keys with a retry on the next key after a 429 (what most
  multi-key wrappers do);
- random choice of key with no cooldown (LiteLLM's search load balancing);
- searchfuse: `guard(router=Router(keys))`, one turn per reply.

Printed per strategy: requests that reached the server, 429s drawn, keys that
drew a 429, tool calls answered with results, replies with at least one
answered call, and credits spent per answered reply.
"""

from __future__ import annotations

import argparse
import contextvars
import itertools
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from searchfuse import Router, guard, turn
from searchfuse.router import KeyEntry
from searchfuse.testing import FakeClock, FakeTavily

SUBJECTS = [
    "python 3.13",
    "tavily api",
    "rust 2024 edition",
    "postgres 17",
    "kubernetes 1.31",
    "openai agents sdk",
    "sqlite wal mode",
    "redis 7.4",
    "langchain 1.0",
    "http retry-after",
    "gcra rate limiting",
    "circuit breakers",
    "pydantic 2.10",
    "nginx 1.27",
    "terraform 1.9",
    "node 22",
]
ASPECTS = [
    "release date",
    "breaking changes",
    "rate limits",
    "pricing",
    "performance benchmarks",
    "security advisories",
    "migration guide",
    "best practices",
    "known bugs",
    "configuration options",
]


def rephrase(query: str, rng: random.Random) -> str:
    """The same question as an agent asks it again: case, spacing, punctuation."""
    forms = [query, query.title(), f"{query}?", f"  {query}  ", query.upper()]
    return rng.choice(forms)


def workload(replies: int, seed: int) -> list[list[str]]:
    """Each reply's tool calls: a third ask again what was asked lately (rephrased)."""
    rng = random.Random(seed)
    recent: list[str] = []
    out = []
    for _ in range(replies):
        calls = []
        for _ in range(rng.randint(1, 6)):
            if recent and rng.random() < 1 / 3:
                query = rng.choice(recent[-20:])
            else:
                query = f"{rng.choice(SUBJECTS)} {rng.choice(ASPECTS)}"
                recent.append(query)
            calls.append(rephrase(query, rng))
        out.append(calls)
    return out


@dataclass
class Tally:
    answered_calls: int = 0
    answered_replies: int = 0


class Strategy:
    """One way to serve a tool call; `None` means the call got no results."""

    name = ""

    def __init__(self, fake: FakeTavily, keys: list[str], clock: FakeClock) -> None:
        self.fake, self.keys, self.clock = fake, keys, clock
        self.http = httpx.Client(base_url="http://tavily.test", transport=fake.transport())

    def post(self, key: str, query: str) -> httpx.Response:
        return self.http.post(
            "/search",
            json={"query": query, "max_results": 3},
            headers={"Authorization": f"Bearer {key}"},
        )

    def call(self, query: str) -> Any:
        raise NotImplementedError

    def reply(self, queries: list[str]) -> list[Any]:
        """The reply's calls, fired together."""
        results: list[Any] = [None] * len(queries)

        def run(i: int, query: str) -> None:
            results[i] = self.call(query)

        threads = [
            threading.Thread(target=contextvars.copy_context().run, args=(run, i, q))
            for i, q in enumerate(queries)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results


class OneKey(Strategy):
    name = "one key (tavily-python)"

    def call(self, query: str) -> Any:
        response = self.post(self.keys[0], query)
        return response.json() if response.status_code == 200 else None


class RoundRobinRetry(Strategy):
    name = "round-robin + retry on 429"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._next = itertools.cycle(range(len(self.keys)))
        self._lock = threading.Lock()

    def call(self, query: str) -> Any:
        for _ in self.keys:
            with self._lock:
                key = self.keys[next(self._next)]
            response = self.post(key, query)
            if response.status_code == 200:
                return response.json()
            if response.status_code != 429:
                return None
        return None


class RandomChoice(Strategy):
    name = "random key, no cooldown"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._rng = random.Random(1)
        self._lock = threading.Lock()

    def call(self, query: str) -> Any:
        with self._lock:
            key = self._rng.choice(self.keys)
        response = self.post(key, query)
        return response.json() if response.status_code == 200 else None


class SearchFuse(Strategy):
    name = "searchfuse guard + router"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        entries = [KeyEntry(key, rpm=ARGS_RPM[0]) for key in self.keys]  # as keys[].rpm says
        self.router = Router(
            entries, clock=self.clock, sleep=self.clock.advance, transport=self.fake.transport()
        )

        @guard(router=self.router, on_refusal="return", clock=self.clock)
        def web_search(query: str, max_results: int = 3) -> Any: ...

        self.tool: Callable[..., Any] = web_search

    def call(self, query: str) -> Any:
        result = self.tool(query, max_results=3)
        return result if isinstance(result, dict) else None

    def reply(self, queries: list[str]) -> list[Any]:
        with turn():  # one assistant reply
            return super().reply(queries)


#: The per-key rate searchfuse is told (as `keys[].rpm` would).
ARGS_RPM = [20]


def simulate(kind: type[Strategy], args: argparse.Namespace) -> dict[str, Any]:
    clock = FakeClock()
    keys = [f"tvly-dev-work{i:04d}" for i in range(args.keys)]
    fake = FakeTavily(clock=clock)
    for key in keys:
        fake.add_key(key, rpm=args.rpm)
    strategy = kind(fake, keys, clock)
    tally = Tally()
    start = clock()
    for n, queries in enumerate(workload(args.replies, args.seed)):
        due = start + n * args.gap
        if clock() < due:
            clock.set(due)
        results = strategy.reply(queries)
        answered = sum(r is not None for r in results)
        tally.answered_calls += answered
        tally.answered_replies += answered > 0
    searches = [r for r in fake.requests if r.path == "/search"]
    limited = [r for r in searches if r.status == 429]
    credits = sum(r.credits for r in searches)
    return {
        "strategy": strategy.name,
        "requests": len(fake.requests),
        "429s": len(limited),
        "keys 429ed": len({r.key_fingerprint for r in limited}),
        "calls answered": tally.answered_calls,
        "replies answered": tally.answered_replies,
        "credits/reply": credits / tally.answered_replies if tally.answered_replies else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=300)
    parser.add_argument("--keys", type=int, default=4)
    parser.add_argument("--rpm", type=int, default=20)
    parser.add_argument("--gap", type=float, default=2.0, help="simulated seconds between replies")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    ARGS_RPM[0] = args.rpm
    calls = sum(len(r) for r in workload(args.replies, args.seed))
    print(
        f"{args.replies} replies ({calls} tool calls), {args.keys} keys x {args.rpm} rpm, "
        f"a reply every {args.gap:g} s"
    )
    rows = [simulate(kind, args) for kind in (OneKey, RoundRobinRetry, RandomChoice, SearchFuse)]
    header = list(rows[0])
    print(f"{header[0]:<28}" + "".join(f"{h:>17}" for h in header[1:]))
    for row in rows:
        cells = [
            f"{row[h]:>17.2f}" if isinstance(row[h], float) else f"{row[h]:>17}" for h in header[1:]
        ]
        print(f"{row['strategy']:<28}" + "".join(cells))


if __name__ == "__main__":
    main()
