"""Several SearXNG instances have distinct names wherever a key is shown.

An instance's "key" is its address: it is shown by its host (and port), with a short
fingerprint when a path tells instances on one host apart; status, the diagnosis,
warnings and events never show two instances alike, and never the address itself.
"""

from __future__ import annotations

import logging

import pytest

from searchfuse import Router
from searchfuse._secrets import mask
from searchfuse.testing import FakeClock, FakeSearXNG


def test_instances_whose_addresses_end_alike_are_told_apart() -> None:
    urls = [
        "https://searx.one.example/searx",
        "https://searx.two.example/searx",
        "https://searx.two.example/other/searx",
        "http://127.0.0.1:8888",
    ]
    router = Router({"searxng": urls})
    names = [s.key for s in router.status()]
    assert len(set(names)) == len(urls)
    assert names[0].startswith("searx.one.example") and names[1].startswith("searx.two.example")
    assert names[3] == "127.0.0.1:8888"
    evidence = router.diagnose().step("state").evidence
    assert [ev["key"] for ev in evidence] == names


def test_every_surface_names_each_instance_by_its_host_over_http(
    fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    broken = FakeSearXNG(clock=fake_clock, json_enabled=False)
    working = FakeSearXNG(clock=fake_clock)
    with broken.serve() as broken_url, working.serve() as working_url:
        # One instance by its IP, the other by name: the same machine, two instances.
        working_url = working_url.replace("127.0.0.1", "localhost")
        router = Router({"searxng": [broken_url, working_url]}, clock=fake_clock)
        with caplog.at_level(logging.WARNING):
            for i in range(3):
                assert router.search(f"q{i}")["searchfuse"]["served_by"] == "searxng"
    first = broken_url.removeprefix("http://")
    second = working_url.removeprefix("http://")
    assert [s.key for s in router.status()] == [first, second]
    assert mask(broken_url) == first
    warned = [r.getMessage() for r in caplog.records if "misconfigured" in r.getMessage()]
    assert warned and all(first in line and "http://" not in line for line in warned)
    events = router.events()
    assert events and {e.key for e in events if e.key is not None} == {first}
    texts = [str(router.diagnose()), *(str(e) for e in events)]
    assert all(broken_url not in text and working_url not in text for text in texts)
