"""Every store under one suite: the same tests run against memory, JSON, SQLite and Redis."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from searchfuse.router.state import JsonFileStore, MemoryStore, RedisStore, SqliteStore, Store

from .redis_server import redis_server

#: A factory opening a new handle on the same store (a second process would do the same).
Opener = Callable[[], Store]

KINDS = ["memory", "json", "sqlite", "redis"]


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server for the whole session, on a free loopback port."""
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=KINDS)
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    kind = request.param
    namespace = f"t{uuid.uuid4().hex[:12]}"
    opened: list[Store] = []
    if kind == "memory":
        shared = MemoryStore()

        def make() -> Store:
            return shared
    elif kind == "json":

        def make() -> Store:
            return JsonFileStore(tmp_path / "state" / "quota.json")
    elif kind == "sqlite":

        def make() -> Store:
            return SqliteStore(tmp_path / "state" / "searchfuse.db")
    else:
        url = request.getfixturevalue("redis_url")

        def make() -> Store:
            return RedisStore(url, namespace=namespace)

    def tracked() -> Store:
        store = make()
        opened.append(store)
        return store

    yield tracked
    for store in opened:
        store.close()
