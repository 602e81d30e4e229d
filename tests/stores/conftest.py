"""Every store under one suite: the same tests run against memory, JSON, SQLite and Redis."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from searchfuse.router.state import JsonFileStore, MemoryStore, SqliteStore, Store

#: A factory opening a new handle on the same store (a second process would do the same).
Opener = Callable[[], Store]

KINDS = ["memory", "json", "sqlite"]


@pytest.fixture(params=KINDS)
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    kind = request.param
    opened: list[Store] = []
    if kind == "memory":
        shared = MemoryStore()

        def make() -> Store:
            return shared
    elif kind == "json":

        def make() -> Store:
            return JsonFileStore(tmp_path / "state" / "quota.json")
    else:

        def make() -> Store:
            return SqliteStore(tmp_path / "state" / "searchfuse.db")

    def tracked() -> Store:
        store = make()
        opened.append(store)
        return store

    yield tracked
    for store in opened:
        store.close()
