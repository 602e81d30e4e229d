"""Two processes sharing one budget on SQLite, the JSON file and a real redis-server
serve exactly its limit between them, racing for the last searches."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from searchfuse.testing import FakeTavily

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]
LIMIT = 25

WORKER = textwrap.dedent(
    """
    import sys
    from searchfuse import Budget, BudgetExhausted, Router, spend_scope
    from searchfuse.router.state import JsonFileStore, RedisStore, SqliteStore

    url, kind, where, namespace, go = sys.argv[1:6]
    if kind == "redis":
        store = RedisStore(where, namespace=namespace)
    else:
        store = JsonFileStore(where) if kind == "json" else SqliteStore(where)
    router = Router(
        {keys!r}, state=store, base_url=url,
        budgets=[Budget({limit}, per="conversation")],
    )
    served = refused = 0
    import os, time
    while not os.path.exists(go):  # both start together
        time.sleep(0.001)
    with spend_scope(conversation="shared-task"):
        for i in range(20):
            try:
                router.search(f"worker query {{i}}")
                served += 1
            except BudgetExhausted:
                refused += 1
    print(served, refused)
    """
).format(keys=KEYS, limit=LIMIT)


@pytest.fixture(params=["sqlite", "json", "redis"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, str]:
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "searchfuse.db"), ""
    if request.param == "json":
        return "json", str(tmp_path / "state" / "quota.json"), ""
    return "redis", request.getfixturevalue("redis_url"), uuid.uuid4().hex


def test_two_processes_share_a_budget_of_25_and_serve_exactly_25(
    shared: tuple[str, str, str], tmp_path: Path
) -> None:
    fake = FakeTavily(KEYS, clock=time.time)
    for key in KEYS:
        fake.set_rpm(key, 100_000)
    go = tmp_path / "go"
    with fake.serve() as url:
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, url, *shared, str(go)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "SEARCHFUSE_RPM": "100000"},
            )
            for _ in range(2)
        ]
        go.touch()
        results = []
        for proc in workers:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            results.append(tuple(int(n) for n in out.split()))
    assert sum(served for served, _ in results) == LIMIT
    assert sum(refused for _, refused in results) == 40 - LIMIT
    assert len(fake.searches) == LIMIT  # never a 26th request
