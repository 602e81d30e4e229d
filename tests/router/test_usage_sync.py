"""A `/usage` sync in the middle of a burst: one call per key, and no credit of a
search still in flight is forgotten (the store errs on the side of quota spent)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import pytest

from searchfuse import Router
from searchfuse.router.state import AccountUsage, KeyUsage, State
from searchfuse.testing import FakeClock, FakeTavily

K1, K2 = "tvly-dev-test0001", "tvly-dev-test0002"


def _state(kind: str, tmp_path: Path) -> str | None:
    return {"memory": None, "sqlite": str(tmp_path / "s.db"), "json": str(tmp_path / "q.json")}[
        kind
    ]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "json"])
def test_a_parallel_async_burst_syncs_once_and_counts_every_credit(
    kind: str, tmp_path: Path
) -> None:
    fake = FakeTavily([K1, K2])
    with fake.serve() as url:
        router = Router([K1, K2], base_url=url, state=_state(kind, tmp_path))

        async def burst() -> list[dict[str, object]]:
            return await asyncio.gather(*(router.asearch(f"q{i}") for i in range(30)))

        results = asyncio.run(burst())
    assert len(results) == 30
    assert len(fake.usage_requests) == 1  # not one per search of the burst
    for status, key in zip(router.status(), [K1, K2], strict=True):
        charged = fake.usage_of(key)["key"]["usage"]
        counted = (status.key_usage or 0.0) + status.local_credits
        assert counted == charged, status.key  # 30 on the burst's key, 0 on the other


def test_threads_that_search_while_usage_answers_keep_their_credits(tmp_path: Path) -> None:
    fake = FakeTavily([K1])
    usage_answered = threading.Event()
    searches_sent = threading.Semaphore(0)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/search":
            searches_sent.release()
            usage_answered.wait(5)  # Tavily counts these after /usage answered
        response = fake.handle(request)
        if request.url.path == "/usage":
            usage_answered.set()
        return response

    router = Router(
        [K1], transport=httpx.MockTransport(handler), state=tmp_path / "s.db", sync_interval=0
    )
    (entry,) = router.keys
    # Synced once, long ago (0 used): every search below syncs again first.
    router.store.update(
        router.now(),
        lambda s: s.apply_usage(
            entry.fingerprint,
            entry.account_id,
            None,
            KeyUsage(0.0, 1000.0, 0.0),
            AccountUsage(),
            [entry.fingerprint],
            router.now() - 3600,
            auth_reason="auth",
        ),
    )
    workers = [threading.Thread(target=router.search, args=(f"q{i}",)) for i in range(8)]
    for worker in workers:
        worker.start()
    for _ in range(8):
        assert searches_sent.acquire(timeout=5)
    # Eight searches are at Tavily, uncounted there; a sync now answers 0.
    router.search("the one that syncs")
    for worker in workers:
        worker.join(5)
    (status,) = router.status()
    assert fake.usage_of(K1)["key"]["usage"] == 9
    assert (status.key_usage or 0.0) + status.local_credits == 9


@pytest.mark.parametrize(
    ("local", "before", "after", "left"),
    [
        (5.0, 10.0, 15.0, 0.0),  # the figure shows all of them
        (5.0, 10.0, 12.0, 3.0),  # three still in flight when /usage answered
        (5.0, 10.0, 10.0, 5.0),  # none shown yet
        (5.0, None, 0.0, 5.0),  # a first sync, none shown yet
        (5.0, None, 400.0, 0.0),  # a first sync of a key used elsewhere
        (5.0, 10.0, 2.0, 5.0),  # Tavily's month turned: the figure fell
        (5.0, 10.0, None, 5.0),  # no figure: nothing is taken off
    ],
)
def test_a_sync_takes_off_only_what_its_figure_shows(
    local: float, before: float | None, after: float | None, left: float
) -> None:
    state = State(month="2026-11")
    ks = state.key("fp1")
    ks.local_credits = local
    ks.last_usage = None if before is None else KeyUsage(before, 1000.0, None)
    acc = state.account("acc")
    acc.plan_usage, acc.plan_limit, acc.local_credits = before, 5000.0, local
    state.apply_usage(
        "fp1",
        "acc",
        None,
        KeyUsage(after, 1000.0, None),
        AccountUsage(plan_usage=after, plan_limit=5000.0),
        ["fp1"],
        100.0,
        auth_reason="auth",
    )
    assert ks.local_credits == left
    assert state.account("acc").local_credits == left
    assert ks.usage_blocked_until is None


def test_a_sync_that_gets_no_answer_is_tried_again_after_its_claim(tmp_path: Path) -> None:
    clock = FakeClock()
    fake = FakeTavily([K1], clock=clock)
    fake.fail_next(503, times=1, path="/usage")
    router = Router([K1], clock=clock, transport=fake.transport(), state=tmp_path / "s.db")
    router.search("first")  # its sync gets a 503: the search goes ahead
    router.search("second")  # within the claim: no second /usage
    assert [r.status for r in fake.usage_requests] == [503]
    clock.advance(31)
    router.search("third")
    assert [r.status for r in fake.usage_requests] == [503, 200]
    (status,) = router.status()
    assert (status.key_usage or 0.0) + status.local_credits == 3
