"""A search is counted when its key is granted: one store transaction per served
search, a refund when it is not served, a correction when Tavily's price differs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from searchfuse import RateLimited, Router, SearchFailed, SearchRefused
from searchfuse.router.state import JsonFileStore, MemoryStore, SqliteStore, State, Store
from searchfuse.testing import FakeClock, FakeTavily

K1, K2 = "tvly-dev-test0001", "tvly-dev-test0002"
T = TypeVar("T")


class Counting:
    """A store that counts its transactions."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.updates = 0
        self.grants: list[str] = []

    def update(self, now: float, change: Callable[[State], T]) -> T:
        self.updates += 1
        return self.inner.update(now, change)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name != "grant":
            return attr

        def grant(*args: Any, **kwargs: Any) -> Any:
            # A store's own way to the pacing decision: one transaction too.
            self.updates += 1
            self.grants.append(args[1])
            return attr(*args, **kwargs)

        return grant


def make_store(kind: str, tmp_path: Path) -> Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SqliteStore(tmp_path / "s.db")
    return JsonFileStore(tmp_path / "quota.json")


STORES = ["memory", "sqlite", "json"]


def setup(kind: str, tmp_path: Path, **options: Any) -> tuple[FakeTavily, Counting, Router]:
    clock = FakeClock()
    fake = FakeTavily((K1, K2), clock=clock)
    store = Counting(make_store(kind, tmp_path))
    router = Router(
        [K1, K2],
        state=store,  # type: ignore[arg-type]
        clock=clock,
        sleep=clock.advance,
        transport=fake.transport(),
        **options,
    )
    router.search("first: syncs /usage")
    return fake, store, router


def counted(router: Router) -> tuple[int, float]:
    state = router.store.read(router.now())
    return (
        sum(ks.searches for ks in state.keys.values()),
        sum(ks.local_credits for ks in state.keys.values()),
    )


@pytest.mark.parametrize("kind", STORES)
def test_a_served_search_is_one_store_transaction(kind: str, tmp_path: Path) -> None:
    fake, store, router = setup(kind, tmp_path)
    before = counted(router)
    store.updates = 0
    for i in range(5):
        router.search(f"query {i}")
    assert store.updates == 5
    assert len(fake.searches) == 6
    assert counted(router) == (before[0] + 5, before[1] + 5)


@pytest.mark.parametrize("kind", STORES)
def test_an_answer_that_timed_out_stays_counted(kind: str, tmp_path: Path) -> None:
    # Tavily may have served (and charged) a search whose answer did not come in
    # time: it stays counted, so the store errs on the side of quota spent.
    fake, _, router = setup(kind, tmp_path, on_429="stop", max_keys_per_call=1)
    before = counted(router)
    fake.slow_next(40, path="/search")  # served and charged, answered too late
    with pytest.raises((SearchFailed, SearchRefused)):
        router.search("slow")
    assert fake.usage_of(K1)["key"]["usage"] == before[1] + 1
    assert counted(router) == (before[0] + 1, before[1] + 1)


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("fault", [500, 503, 400, "connect"])
def test_a_search_that_was_not_served_is_refunded(
    kind: str, fault: int | str, tmp_path: Path
) -> None:
    fake, _, router = setup(kind, tmp_path, on_429="stop", max_keys_per_call=1)
    before = counted(router)
    fake.fail_next(fault)  # type: ignore[arg-type]
    with pytest.raises((SearchFailed, SearchRefused)):
        router.search("fails")
    assert counted(router) == before
    router._clock.advance(3600)  # type: ignore[union-attr]  # past the cooldown
    router.search("served")
    assert counted(router) == (before[0] + 1, before[1] + 1)


@pytest.mark.parametrize("kind", STORES)
def test_a_429_refunds_and_the_retries_are_counted_once(kind: str, tmp_path: Path) -> None:
    fake, _, router = setup(kind, tmp_path, on_429="retry")
    before = counted(router)
    fake.fail_next(429, times=2, retry_after=1)
    router.search("served on the third try")
    assert counted(router) == (before[0] + 1, before[1] + 1)
    fake.fail_next(429, times=None, retry_after=1)
    with pytest.raises(RateLimited):
        router.search("never served")
    assert counted(router) == (before[0] + 1, before[1] + 1)


@pytest.mark.parametrize("kind", STORES)
def test_the_price_tavily_reports_replaces_the_expected_one(kind: str, tmp_path: Path) -> None:
    fake, store, router = setup(kind, tmp_path)
    before = counted(router)
    router.search("deep", search_depth="advanced")  # expected and charged: 2
    assert counted(router) == (before[0] + 1, before[1] + 2)
    store.updates = 0
    router.request("/extract", {"urls": ["https://example.com/a"]})  # expected 1, Tavily says more
    extract_price = fake.requests_for(K1, "/extract") or fake.requests_for(K2, "/extract")
    assert extract_price
    after = counted(router)
    assert after[0] == before[0] + 2
    reported = after[1] - (before[1] + 2)
    assert reported > 0
    # The price differed from the expected one only if Tavily reported another figure.
    assert store.updates == (1 if reported == 1 else 2)


def test_a_caller_function_that_raises_is_refunded(tmp_path: Path) -> None:
    _, _, router = setup("sqlite", tmp_path)
    before = counted(router)

    def broken(key: str) -> None:
        raise KeyError("the caller's own bug")

    with pytest.raises(KeyError):
        router.call(broken)
    assert counted(router) == before
    assert router.call(lambda key: "ok") == "ok"
    assert counted(router)[0] == before[0] + 1


def test_a_200_that_is_not_json_is_refunded(tmp_path: Path) -> None:
    clock = FakeClock()
    fake = FakeTavily((K1,), clock=clock)
    broken = {"on": False}

    def handler(request: httpx.Request) -> httpx.Response:
        if broken["on"] and request.url.path == "/search":
            return httpx.Response(200, content=b"<html>maintenance</html>")
        return fake.handle(request)

    router = Router(
        [K1],
        state=tmp_path / "s.db",
        clock=clock,
        sleep=clock.advance,
        transport=httpx.MockTransport(handler),
    )
    router.search("first")
    before = counted(router)
    broken["on"] = True
    with pytest.raises((SearchFailed, SearchRefused)):
        router.search("not json")
    assert counted(router) == before


def test_a_key_recovering_from_an_error_is_cleared_by_its_next_success(tmp_path: Path) -> None:
    clock = FakeClock()
    fake = FakeTavily((K1,), clock=clock)
    store = Counting(SqliteStore(tmp_path / "s.db"))
    router = Router(
        [K1],
        state=store,  # type: ignore[arg-type]
        clock=clock,
        sleep=clock.advance,
        transport=fake.transport(),
    )
    router.search("first")
    fake.fail_next(500)
    with pytest.raises((SearchFailed, SearchRefused)):
        router.search("fails")
    (ks,) = router.store.read(router.now()).keys.values()
    assert (ks.last_status, ks.searches) == (500, 1)
    assert ks.last_error
    clock.advance(120)  # past the cooldown the 500 set, before a /usage sync is due
    store.updates = 0
    router.search("served")
    (ks,) = router.store.read(router.now()).keys.values()
    assert (ks.last_status, ks.last_error, ks.cooldown_until, ks.searches) == (200, None, None, 2)
    # The charge found the key not yet clean: the success wrote once more.
    assert store.updates == 2
    router.search("served again")
    assert store.updates == 3


class Looks:
    """A store that counts how often a router asks it what changed."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.looks = 0

    def changes(self, now: float, since: Any) -> Any:
        self.looks += 1
        return self.inner.changes(now, since)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def two_routers(
    tmp_path: Path, keys: tuple[str, ...] = (K1, K2)
) -> tuple[FakeClock, FakeTavily, Looks, Router, Router]:
    clock = FakeClock()
    fake = FakeTavily(keys, clock=clock)
    looks = Looks(SqliteStore(tmp_path / "s.db"))
    ours = Router(
        list(keys),
        state=looks,  # type: ignore[arg-type]
        clock=clock,
        sleep=clock.advance,
        transport=fake.transport(),
    )
    # Another process on the same file.
    other = Router(
        list(keys),
        state=SqliteStore(tmp_path / "s.db"),
        clock=clock,
        sleep=clock.advance,
        transport=fake.transport(),
    )
    return clock, fake, looks, ours, other


def test_a_burst_on_one_key_does_not_reread_the_store_between_searches(tmp_path: Path) -> None:
    clock, fake, looks, ours, _ = two_routers(tmp_path)
    ours.search("first")
    ours.search("second")
    looks.looks = 0
    for i in range(5):
        clock.advance(0.1)
        ours.search(f"burst {i}")
    assert looks.looks == 0
    assert len(set(r.key_fingerprint for r in fake.searches[-5:])) == 1
    assert counted(ours)[0] == 7


def test_a_key_another_process_parked_is_not_used_by_the_next_search(tmp_path: Path) -> None:
    clock, fake, _, ours, other = two_routers(tmp_path)
    ours.search("first")
    ours.search("second")
    used = fake.searches[-1].key_fingerprint
    parked = next(e for e in ours.keys if e.fingerprint == used)
    other.store.update(
        ours.now(), lambda s: s.key(parked.fingerprint).park(ours.now(), 300, "upstream")
    )
    before = len(fake.searches)
    clock.advance(0.1)
    ours.search("after the park")
    assert len(fake.searches) == before + 1
    assert fake.searches[-1].key_fingerprint != used


def test_a_hold_another_process_set_refuses_the_next_search_without_a_request(
    tmp_path: Path,
) -> None:
    from searchfuse import CooldownActive

    clock, fake, _, ours, other = two_routers(tmp_path)
    ours.search("first")
    ours.search("second")
    fp = fake.searches[-1].key_fingerprint
    other.store.update(ours.now(), lambda s: s.hold(fp, ours.now() + 60))
    before = len(fake.searches)
    clock.advance(0.1)
    with pytest.raises(CooldownActive):
        ours.search("held")
    assert len(fake.searches) == before


def test_a_sync_another_process_made_is_not_made_again(tmp_path: Path) -> None:
    clock, fake, _, ours, other = two_routers(tmp_path, (K1,))
    ours.search("first: syncs")
    clock.advance(1799.5)
    ours.search("second: the figures are not yet stale (sync_interval: 1800 s)")
    clock.advance(0.6)
    other.search("the other process finds them stale, syncs and searches")
    assert len(fake.usage_requests) == 2
    clock.advance(0.1)
    ours.search("third: same burst; the view that was stale is looked at again")
    assert len(fake.usage_requests) == 2
    assert len(fake.searches) == 4


def test_after_a_failure_the_next_search_sees_the_park_without_asking_the_parked_key(
    tmp_path: Path,
) -> None:
    fake, store, router = setup("sqlite", tmp_path, max_keys_per_call=1)
    router.search("second: the burst is on one key")
    failed = fake.searches[-1].key_fingerprint
    fake.fail_next(500)
    with pytest.raises((SearchFailed, SearchRefused)):
        router.search("fails and parks that key")
    store.grants = []
    router._clock.advance(0.1)  # type: ignore[union-attr]  # same burst
    router.search("served by the other key")
    assert fake.searches[-1].key_fingerprint != failed
    # One grant, on the other key: the parked key was not asked for a slot.
    assert store.grants == [fake.searches[-1].key_fingerprint]
