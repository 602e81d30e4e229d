"""Fixtures of the fault suite: a real redis-server when a fault needs every store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..stores.redis_server import redis_server


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server for the whole session, on a free loopback port."""
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url
