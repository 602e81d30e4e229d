"""The Redis store: URLs, an unreachable server, a router sharing state through it."""

from __future__ import annotations

import urllib.parse
import uuid
from pathlib import Path

import pytest

from searchfuse import CooldownActive, RateLimited, Router, StoreUnavailable
from searchfuse.router.state import RedisStore, open_store
from searchfuse.testing import FakeClock, FakeTavily

from .redis_server import free_port

K1, K2 = "tvly-dev-test0001", "tvly-dev-test0002"


def test_redis_urls_open_a_redis_store(redis_url: str) -> None:
    store = open_store(redis_url)
    assert isinstance(store, RedisStore)
    assert repr(store) == f"RedisStore({redis_url!r}, namespace='searchfuse')"
    store.close()


def test_unix_socket_url(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    client = RedisStore(redis_url).client
    sock = client.config_get("unixsocket")["unixsocket"]
    store = RedisStore(f"unix://{sock}?db=0", namespace=uuid.uuid4().hex)
    store.update(1_768_478_400.0, lambda s: setattr(s.key("fp"), "searches", 2))
    assert store.read(1_768_478_400.0).keys["fp"].searches == 2
    store.close()


def test_unreachable_redis_names_the_server_not_the_password() -> None:
    port = free_port()  # nothing listens there
    url = f"redis://:hunter2secret@127.0.0.1:{port}/0"
    with pytest.raises(StoreUnavailable) as caught:
        Router([K1], state=url)
    text = str(caught.value)
    assert f"127.0.0.1:{port}" in text
    assert "hunter2secret" not in text and "hunter2secret" not in repr(caught.value)
    assert caught.value.store == f"redis://127.0.0.1:{port}/0"


def test_redis_going_away_mid_run_is_store_unavailable_never_local_state(
    redis_url: str, tmp_path: Path
) -> None:
    from .redis_server import redis_server

    clock = FakeClock()
    fake = FakeTavily([K1], clock=clock)
    with redis_server(tmp_path) as url:
        router = Router([K1], state=url, clock=clock, transport=fake.transport())
        router.search("q")
    with pytest.raises(StoreUnavailable):
        router.search("q")
    assert len(fake.searches) == 1  # nothing sent without the shared state


def test_a_429_in_one_router_holds_another_on_the_same_redis(redis_url: str) -> None:
    clock = FakeClock()
    fake = FakeTavily([K1, K2], clock=clock)
    namespace = uuid.uuid4().hex
    routers = [
        Router(
            [K1, K2],
            state=RedisStore(redis_url, namespace=namespace),
            clock=clock,
            transport=fake.transport(),
        )
        for _ in range(2)
    ]
    fake.fail_next(429, retry_after=30, path="/search")
    with pytest.raises(RateLimited):
        routers[0].search("q")
    sent = len(fake.searches)
    with pytest.raises(CooldownActive) as caught:
        routers[1].search("q")
    assert len(fake.searches) == sent  # refused with no request
    assert caught.value.retry_after == pytest.approx(30.0)


def test_redacted_url_forms() -> None:
    from searchfuse.router.state._redis import redacted_url

    assert redacted_url("rediss://user:pw@cache.example.com:6380/2") == (
        "rediss://cache.example.com:6380/2"
    )
    assert redacted_url("unix:///run/redis.sock?db=1&password=pw") == "unix:///run/redis.sock"
    assert "pw" not in urllib.parse.unquote(redacted_url("redis://:p%77@h:1/0"))


@pytest.mark.parametrize(
    ("name", "junk"),
    [
        ("month", "2026-13"),
        ("month", "garbage"),
        ("month", "2026-1"),
        ("epoch", "x"),
        ("seq", "x"),
        ("seq", "-3"),
        ("epoch", "1e3"),
    ],
)
def test_junk_in_the_meta_strings_is_reset_and_searches_go_on(
    redis_url: str, name: str, junk: str, caplog: pytest.LogCaptureFixture
) -> None:
    namespace = uuid.uuid4().hex
    clock = FakeClock()
    fake = FakeTavily([K1], clock=clock)

    router = Router(
        [K1],
        state=RedisStore(redis_url, namespace=namespace),
        clock=clock,
        transport=fake.transport(),
    )
    router.search("before")
    router.store.client.set(f"{namespace}:{name}", junk)  # type: ignore[attr-defined]
    other = Router(
        [K1],
        state=RedisStore(redis_url, namespace=namespace),
        clock=clock,
        transport=fake.transport(),
    )
    assert other.search("after")["results"]  # no raw ValueError or IllegalMonthError
    assert router.search("again")["results"]
    assert f"{junk!r}" in caplog.text  # the reset is named once in the log
    stored = router.store.client.get(f"{namespace}:{name}")  # type: ignore[attr-defined]
    assert stored != junk
    (status,) = other.status()
    assert status.searches >= 1  # the store counts again
    router.close()
    other.close()
