"""Fleets on one Redis: each key set (or each named namespace) keeps state of its own;
the shared cache answers only routers that ask the same backends with the same keys."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from searchfuse import ConfigError, CooldownActive, RateLimited, Router, guard, turn
from searchfuse.router.state import MemoryStore, RedisStore, SqliteStore, Store
from searchfuse.testing import FakeClock, FakeTavily


def keys(n: int) -> list[str]:
    """Made-up keys no other test uses (fleets are told apart by their keys)."""
    return [f"tvly-dev-{uuid.uuid4().hex[:12]}" for _ in range(n)]


def served_by(fake: FakeTavily) -> str | None:
    return fake.searches[-1].key_fingerprint


def test_a_429_of_one_fleet_never_holds_another_fleet_on_the_same_redis(redis_url: str) -> None:
    clock = FakeClock()
    team_a, team_b = keys(2), keys(1)
    fake = FakeTavily(team_a + team_b, clock=clock)

    def router(fleet: list[str]) -> Router:
        return Router(fleet, state=redis_url, clock=clock, transport=fake.transport())

    a, b = router(team_a), router(team_b)
    fake.fail_next(429, retry_after=30, path="/search")
    with pytest.raises(RateLimited):
        a.search("q")
    sent = len(fake.searches)
    # Fleet B's keys were never limited: its search goes out, with its own key.
    assert b.search("q")["results"]
    assert len(fake.searches) == sent + 1 and served_by(fake) == FakeTavily.fingerprint(team_b[0])
    # The same fleet in another process (its keys in another order) is held.
    with pytest.raises(CooldownActive):
        router(list(reversed(team_a))).search("q")
    assert len(fake.searches) == sent + 1
    for r in (a, b):
        r.close()


def test_one_fleets_reset_month_never_wipes_another(redis_url: str) -> None:
    clock = FakeClock()
    team_a, team_b = keys(1), keys(1)
    fake = FakeTavily(team_a + team_b, clock=clock)
    a = Router(team_a, state=redis_url, clock=clock, transport=fake.transport())
    b = Router(team_b, state=redis_url, clock=clock, transport=fake.transport())
    a.search("one")
    a.search("two")
    b.search("three")
    b.reset_month()
    assert [s.searches for s in b.status()] == [0]
    again = Router(team_a, state=redis_url, clock=clock, transport=fake.transport())
    assert [s.searches for s in again.status()] == [2]  # fleet A's counts are still there
    for r in (a, b, again):
        r.close()


def test_fleets_that_name_one_namespace_in_the_url_share_it(redis_url: str) -> None:
    clock = FakeClock()
    team_a, team_b = keys(1), keys(1)
    fake = FakeTavily(team_a + team_b, clock=clock)
    namespace = f"team-{uuid.uuid4().hex[:8]}"
    url = f"{redis_url}?namespace={namespace}"
    a = Router(team_a, state=url, clock=clock, transport=fake.transport())
    b = Router(team_b, state=url, clock=clock, transport=fake.transport())
    assert isinstance(a.store, RedisStore) and a.store.ns == namespace
    fake.fail_next(429, retry_after=30, path="/search")
    with pytest.raises(RateLimited):
        a.search("q")
    with pytest.raises(CooldownActive):
        b.search("q")  # one namespace: one hold, as the URL asks
    assert a.store.client.exists(f"{namespace}:hold")
    for r in (a, b):
        r.close()


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("?namespace=", "not 1 to 100"),
        ("?namespace=two%20words", "not 1 to 100"),
        ("?namespace=a&namespace=b", "more than once"),
    ],
)
def test_a_namespace_that_cannot_be_one_is_a_config_error(
    redis_url: str, query: str, problem: str
) -> None:
    url = redis_url.replace("redis://", "redis://:hunter2secret@") + query
    with pytest.raises(ConfigError) as caught:
        Router(keys(1), state=url)
    assert problem in str(caught.value)
    assert "hunter2secret" not in str(caught.value)


def test_a_namespace_named_twice_differently_is_a_config_error(redis_url: str) -> None:
    with pytest.raises(ConfigError, match="in one place"):
        RedisStore(f"{redis_url}?namespace=a", namespace="b")
    store = RedisStore(f"{redis_url}?namespace=a", namespace="a")
    assert store.ns == "a"
    store.close()


def shared_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """A factory for handles on one store (each router is another process)."""
    if kind == "memory":
        one = MemoryStore()
        return lambda: one
    if kind == "sqlite":
        return lambda: SqliteStore(tmp_path / "searchfuse.db")
    url, ns = request.getfixturevalue("redis_url"), uuid.uuid4().hex
    return lambda: RedisStore(url, namespace=ns)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
def test_the_shared_cache_never_answers_for_another_backend_or_key_set(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    clock = FakeClock()
    fleet, other_keys = keys(1), keys(1)
    first, second = FakeTavily(fleet + other_keys, clock=clock), FakeTavily(fleet, clock=clock)
    open_store = shared_store(kind, tmp_path, request)

    def ask(fake: FakeTavily, base_url: str, held: list[str]) -> dict[str, Any]:
        store: Store = open_store()
        router = Router(
            held, state=store, base_url=base_url, clock=clock, transport=fake.transport()
        )

        @guard(router=router, cache="shared", clock=clock)
        def web_search(query: str) -> dict[str, Any]:
            raise AssertionError("a routed guard never calls the function body")

        with turn():
            return web_search("tavily rate limits")  # type: ignore[no-any-return]

    ask(first, "http://first.test", fleet)
    assert len(first.searches) == 1
    ask(first, "http://first.test", fleet)  # the same backend and keys: a hit
    assert len(first.searches) == 1
    ask(second, "http://second.test", fleet)  # another backend: asked
    assert len(second.searches) == 1
    ask(first, "http://first.test", other_keys)  # other keys: asked
    assert len(first.searches) == 2
