"""Several processes share one state file: counters add up and the file stays valid JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from searchfuse.router import Router
from searchfuse.testing import FakeTavily

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]

WORKER = textwrap.dedent(
    """
    import sys
    from searchfuse import Router

    url, state, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    router = Router({keys!r}, state=state, base_url=url)
    for i in range(n):
        router.search(f"worker query {{i}}")
    """
).format(keys=KEYS)


def test_two_processes_fifty_searches_each(tmp_path: Path) -> None:
    fake = FakeTavily(keys=KEYS, clock=time.time)
    for key in KEYS:
        fake.set_rpm(key, 100_000)  # this test is about the state file, not rate limits
    state = tmp_path / "state" / "quota.json"
    with fake.serve() as url:
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, url, str(state), "50"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        for proc in workers:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            for key in KEYS:
                assert key not in out and key not in err
    data = json.loads(state.read_text())  # valid JSON
    searches = sum(k["searches"] for k in data["keys"].values())
    assert searches == 100
    assert len(fake.searches) == 100
    assert all(r.status == 200 for r in fake.searches)
    # The per-key counters match what reached the server with each key.
    served = {Router([k]).keys[0].fingerprint: n for k, n in zip(KEYS, _per_key(fake), strict=True)}
    assert {fp: k["searches"] for fp, k in data["keys"].items() if k["searches"]} == {
        fp: n for fp, n in served.items() if n
    }
    assert not list(state.parent.glob("*.corrupt.*"))


def _per_key(fake: FakeTavily) -> list[int]:
    return [len(fake.requests_for(key, "/search")) for key in KEYS]
