"""A 429 cascade on demand: N keys, a burst of M parallel calls in one turn.

Incident 1 in one fixture: an agent fires many searches at once; Tavily
limits requests per key; a router that fails over on 429 walks through every
key and puts them all into cooldown. [`Cascade`][searchfuse.testing.Cascade] builds that situation
against the simulated Tavily and reports what reached the API, so a test can
assert that *its* agent's tool survives it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from searchfuse.router import Router
from searchfuse.testing._fake import FakeTavily

__all__ = ["Cascade", "CascadeResult"]


@dataclass(frozen=True)
class CascadeResult:
    """What one burst did.

    `requests`: `/search` requests that reached the simulated API;
    `rate_limited`: how many of them it answered 429;
    `keys_cooling`: distinct keys that answered 429 (a router parks each one);
    `served` / `failed`: calls that returned / raised; `outcomes`: per call,
    the return value or the exception, in call order.
    """

    calls: int
    requests: int
    rate_limited: int
    keys_cooling: int
    served: int
    failed: int
    outcomes: list[Any] = field(repr=False)

    def errors(self, kind: type[BaseException] = BaseException) -> list[BaseException]:
        """The exceptions of the calls that raised, optionally only of one kind."""
        return [o for o in self.outcomes if isinstance(o, kind)]


class Cascade:
    """A burst scenario on a [`FakeTavily`][searchfuse.testing.FakeTavily].

    Each key accepts `rpm` searches per minute (default 1, so a second search
    on the same key in a burst is answered 429, as a real burst eventually is).
    Build routers on the fake with [`router`][searchfuse.testing.Cascade.router], wrap them as your
    agent does, and fire with [`burst`][searchfuse.testing.Cascade.burst].

    Example:
        ```python
        def test_guarded_tool_survives_a_burst(tavily_cascade):
            router = tavily_cascade.router(on_429="failover")
            web_search = guard(router=router)(lambda query: None)
            result = tavily_cascade.burst(web_search, calls=30)
            assert result.requests == 1 and result.keys_cooling == 0
        ```
    """

    def __init__(
        self,
        fake: FakeTavily,
        *,
        keys: int | None = None,
        rpm: int = 1,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.fake = fake
        self.clock = clock
        all_keys = list(fake.keys)
        self.keys = all_keys if keys is None else all_keys[:keys]
        for key in self.keys:
            fake.set_rpm(key, rpm)

    def router(self, **options: Any) -> Router:
        """A [`Router`][searchfuse.Router] for the cascade's keys, talking to the fake
        in-process."""
        options.setdefault("transport", self.fake.transport())
        options.setdefault("async_transport", self.fake.transport())
        if self.clock is not None:
            options.setdefault("clock", self.clock)
        return Router(self.keys, **options)

    def burst(
        self,
        search: Callable[[str], Any],
        *,
        calls: int = 30,
        turn_id: str | None = "cascade-turn",
        query: Callable[[int], str] = lambda i: f"burst query {i}",
    ) -> CascadeResult:
        """Call `search` from `calls` threads at once, all in one turn (`turn_id`).

        `turn_id=None` fires outside any explicit turn (the guard's implicit
        burst rule applies). Returns what reached the API.
        """
        from searchfuse.guard import turn

        before = len(self.fake.searches)
        outcomes: list[Any] = [None] * calls
        start = threading.Barrier(calls)

        def one(i: int) -> None:
            start.wait()
            try:
                if turn_id is None:
                    outcomes[i] = search(query(i))
                else:
                    with turn(id=turn_id):
                        outcomes[i] = search(query(i))
            except Exception as exc:
                outcomes[i] = exc

        threads = [threading.Thread(target=one, args=(i,)) for i in range(calls)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        reached = self.fake.searches[before:]
        limited = [r for r in reached if r.status == 429]
        failed = sum(isinstance(o, BaseException) for o in outcomes)
        return CascadeResult(
            calls=calls,
            requests=len(reached),
            rate_limited=len(limited),
            keys_cooling=len({r.key_fingerprint for r in limited}),
            served=calls - failed,
            failed=failed,
            outcomes=outcomes,
        )
