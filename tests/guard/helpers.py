"""Test doubles for guard tests: a recording search backend and Tavily-like HTTP errors."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx

from searchfuse.testing import FakeClock


class Backend:
    """A stand-in for Tavily behind a guarded tool: counts calls, answers, or fails on cue.

    ``queries`` lists every query that reached it, in order. ``fail_next(exc)``
    makes the next call raise ``exc``. ``hold()`` makes calls wait until
    ``release()``, for tests about calls that overlap in time.
    """

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.queries: list[str] = []
        self.keys: list[str | None] = []
        self._failures: list[BaseException] = []
        self._lock = threading.Lock()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.duration = 0.0

    def fail_next(self, exc: BaseException) -> None:
        self._failures.append(exc)

    def hold(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def _answer(self, query: str, key: str | None) -> dict[str, Any]:
        with self._lock:
            self.queries.append(query)
            self.keys.append(key)
            failure = self._failures.pop(0) if self._failures else None
        if failure is not None:
            raise failure
        return {"query": query, "results": [{"title": f"about {query}"}]}

    def search(self, query: str, *, key: str | None = None) -> dict[str, Any]:
        self.entered.set()
        assert self.gate.wait(timeout=5), "the test never released the backend"
        if self.duration:
            self.clock.advance(self.duration)  # a slow search, without sleeping
        return self._answer(query, key)

    async def asearch(self, query: str, *, key: str | None = None) -> dict[str, Any]:
        self.entered.set()
        # Yield to the loop so concurrent tasks really interleave.
        for _ in range(3):
            await asyncio.sleep(0)
        return self._answer(query, key)


def http_error(
    status: int, retry_after: str | None = None, *, method: str = "POST"
) -> httpx.HTTPStatusError:
    """The ``httpx.HTTPStatusError`` a Tavily client raises for ``status``."""
    request = httpx.Request(method, "https://api.tavily.com/search")
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    response = httpx.Response(status, headers=headers, request=request)
    return httpx.HTTPStatusError(f"{status} from Tavily", request=request, response=response)
