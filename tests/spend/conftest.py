"""Budgets on every store: a fake clock, a simulated Tavily, a real redis-server when asked."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from searchfuse import Router
from searchfuse.router.state import JsonFileStore, MemoryStore, RedisStore, SqliteStore, Store
from searchfuse.testing import FakeClock, FakeTavily

from ..stores.redis_server import redis_server

K1, K2 = "tvly-dev-test0001", "tvly-dev-test0002"
#: 2026-12-03 12:00:00 UTC: half a day to the next UTC midnight.
NOON = 1796299200.0
KINDS = ["memory", "json", "sqlite", "redis"]

Make = Callable[..., tuple[FakeTavily, Router]]


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=KINDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    """Opens a new handle on one store (what another process would do)."""
    kind = request.param
    if kind == "memory":
        store = MemoryStore()
        return lambda: store
    if kind == "json":
        return lambda: JsonFileStore(tmp_path / "quota.json")
    if kind == "sqlite":
        return lambda: SqliteStore(tmp_path / "s.db")
    url, ns = request.getfixturevalue("redis_url"), uuid.uuid4().hex
    return lambda: RedisStore(url, namespace=ns)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOON)


@pytest.fixture
def make(clock: FakeClock, store_factory: Callable[[], Store]) -> Make:
    """`make(budgets=[...], **router_options) -> (fake, router)` on the fake clock."""
    fake = FakeTavily((K1, K2), clock=clock)

    def build(**options: Any) -> tuple[FakeTavily, Router]:
        router = Router(
            options.pop("keys", [K1, K2]),
            state=store_factory(),
            clock=clock,
            sleep=clock.advance,
            transport=fake.transport(),
            async_transport=fake.transport(),
            **options,
        )
        return fake, router

    return build
