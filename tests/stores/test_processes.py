"""Several processes on one SQLite file, one JSON file and one Redis: counts agree, a 429 holds all,
and a process killed mid-write leaves a store the others can read and write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from searchfuse import CooldownActive, RateLimited, Router
from searchfuse.router.state import JsonFileStore, RedisStore, SqliteStore, Store
from searchfuse.testing import FakeTavily

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002", "tvly-dev-test0003"]

WORKER = textwrap.dedent(
    """
    import sys
    from searchfuse import Router
    from searchfuse.router.state import JsonFileStore, RedisStore, SqliteStore

    url, kind, where, namespace, n = sys.argv[1:6]
    if kind == "redis":
        store = RedisStore(where, namespace=namespace)
    else:
        store = SqliteStore(where) if kind == "sqlite" else JsonFileStore(where)
    router = Router({keys!r}, state=store, base_url=url)
    n = int(n)
    i = 0
    while n < 0 or i < n:
        router.search(f"worker query {{i}}")
        i += 1
    print("done")
    """
).format(keys=KEYS)


@pytest.fixture(params=["sqlite", "json", "redis"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """``(kind, where, namespace)`` naming one store every worker opens."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "state" / "searchfuse.db"), ""
    elif request.param == "json":
        yield "json", str(tmp_path / "state" / "quota.json"), ""
    else:
        yield "redis", request.getfixturevalue("redis_url"), uuid.uuid4().hex


def open_shared(kind: str, where: str, namespace: str) -> Store:
    if kind == "redis":
        return RedisStore(where, namespace=namespace)
    return SqliteStore(where) if kind == "sqlite" else JsonFileStore(where)


def fake_server() -> FakeTavily:
    fake = FakeTavily(KEYS, clock=time.time)
    for key in KEYS:
        fake.set_rpm(key, 100_000)  # these tests are about the store, not rate limits
    return fake


def spawn(url: str, shared: tuple[str, str, str], n: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, url, *shared, str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SEARCHFUSE_RPM": "100000"},
    )


def test_n_processes_m_searches_counts_agree_exactly(shared: tuple[str, str, str]) -> None:
    fake = fake_server()
    n_procs, m = 3, 20
    with fake.serve() as url:
        workers = [spawn(url, shared, m) for _ in range(n_procs)]
        for proc in workers:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            assert all(key not in out + err for key in KEYS)
    state = open_shared(*shared).read(time.time())
    served = {Router([k]).keys[0].fingerprint: len(fake.requests_for(k, "/search")) for k in KEYS}
    assert sum(served.values()) == n_procs * m
    assert all(r.status == 200 for r in fake.searches)
    assert {fp: ks.searches for fp, ks in state.keys.items() if ks.searches} == {
        fp: n for fp, n in served.items() if n
    }


def test_a_429_in_one_process_holds_the_others_with_no_request(
    shared: tuple[str, str, str],
) -> None:
    fake = fake_server()
    with fake.serve() as url:
        first = Router(KEYS, state=open_shared(*shared), base_url=url)
        fake.fail_next(429, retry_after=30, path="/search")
        with pytest.raises(RateLimited):
            first.search("q")
        sent = len(fake.requests)
        other = spawn(url, shared, 1)
        _, err = other.communicate(timeout=60)
        assert other.returncode != 0
        assert "CooldownActive" in err
        assert len(fake.requests) == sent  # the other process sent nothing
        with pytest.raises(CooldownActive):
            Router(KEYS, state=open_shared(*shared), base_url=url).search("q")


def test_kill_9_during_writes_leaves_a_readable_store(shared: tuple[str, str, str]) -> None:
    fake = fake_server()
    with fake.serve() as url:
        workers = [spawn(url, shared, -1) for _ in range(2)]
        deadline = time.monotonic() + 20
        while len(fake.searches) < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
        for proc in workers:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        store = open_shared(*shared)
        now = time.time()
        before = sum(ks.searches for ks in store.read(now).keys.values())
        # A search is counted when it is granted, before it is sent: every search
        # that reached the server is counted, and at most the one each killed
        # worker had in flight is counted without having reached it.
        assert len(fake.searches) <= before <= len(fake.searches) + len(workers)
        router = Router(KEYS, state=store, base_url=url)
        router.search("after the crash")
        after = sum(ks.searches for ks in store.read(time.time()).keys.values())
        assert after == before + 1
