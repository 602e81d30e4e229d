"""Raw keys never land in searchfuse's state, whatever it is handed.

- An older `quota.json` that names its records by the raw key (as the skill's
  script and hand-made files do) is imported under the keys' fingerprints:
  its cooldowns still apply to their keys, and neither the database, nor the
  JSON file once rewritten, nor a log line holds the raw key.
- A page that echoes a key, kept in the shared cache (`cache="shared"`), is
  stored with the key masked, on every store.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from searchfuse import NoKeyAvailable, Router, guard
from searchfuse.router.state import RedisStore
from searchfuse.testing import FakeClock

K1, K2 = "tvly-dev-test0001", "tvly-dev-test0002"
NOW = 1_790_000_000.0


def _handler(echo: str = "") -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/usage":
            return httpx.Response(200, json={"key": {"usage": 1, "limit": 1000}})
        result = {"title": "t", "url": "https://example.com", "content": f"{echo} x", "score": 1}
        return httpx.Response(200, json={"query": "q", "results": [result]})

    return httpx.MockTransport(handle)


def _files_hold(folder: Path, *keys: str) -> list[str]:
    return [
        f"{p.name}: {k}"
        for p in folder.rglob("*")
        if p.is_file()
        for k in keys
        if k.encode() in p.read_bytes()
    ]


@pytest.mark.parametrize("store", ["searchfuse.db", "quota.json"])
def test_state_named_by_raw_keys_is_kept_by_fingerprint(
    store: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    legacy = {
        "month": "2026-09",
        "keys": {
            K1: {"cooldown_until": NOW + 1800, "cooldown_reason": "rate_limited"},
            K2: {"usage": "not a number"},  # a bad value: its warning names no raw key
        },
        "hold_key": K1,
    }
    (state / "quota.json").write_text(json.dumps(legacy))
    clock = FakeClock(NOW)
    with caplog.at_level(logging.DEBUG, logger="searchfuse"):
        router = Router([K1, K2], state=state / store, clock=clock, transport=_handler())
        shown = {s.key: s for s in router.status()}
        assert shown["tvly-dev-…0001"].state == "cooling"  # the record still applies
        assert shown["tvly-dev-…0002"].state == "available"
        router.search("q")  # served by K2, written back
        router.close()
    if store == "searchfuse.db":
        (state / "quota.json").unlink()  # the import only reads it; it is the user's copy
    assert _files_hold(state, K1, K2) == []
    assert not [
        r.getMessage() for r in caplog.records if K1 in r.getMessage() or K2 in r.getMessage()
    ]


def _store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    if kind == "redis":
        url = request.getfixturevalue("redis_url")
        return RedisStore(url, namespace=f"t{uuid.uuid4().hex[:12]}")
    return tmp_path / ("quota.json" if kind == "json" else "searchfuse.db")


@pytest.mark.parametrize("kind", ["json", "sqlite", "redis"])
def test_a_page_echoing_a_key_is_cached_with_the_key_masked(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    state = _store(kind, tmp_path, request)
    clock = FakeClock(NOW)
    router = Router([K1], state=state, clock=clock, transport=_handler(echo=f"key={K1}"))

    @guard(router=router, cache="shared")
    def web_search(query: str) -> dict[str, Any]:
        return router.search(query)

    web_search("what is my key")
    # Another process (a fresh router on the same store) is served from the cache.
    other = Router([K1], state=state, clock=clock, transport=_handler(echo="never sent"))

    @guard(router=other, cache="shared")
    def web_search_2(query: str) -> dict[str, Any]:
        return other.search(query)

    served = web_search_2("what is my key")
    assert served["results"][0]["content"] == "key=tvly-dev-…0001 x"
    router.close()
    other.close()
    if kind == "redis":
        import redis

        client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
        stored = list(client.scan_iter(f"{state.ns}*"))
        assert stored and [k for k in stored if K1.encode() in _dump(client, k)] == []
    else:
        assert _files_hold(tmp_path, K1) == []


def _dump(client: Any, key: bytes) -> bytes:
    kind = client.type(key)
    if kind == b"string":
        return bytes(client.get(key) or b"")
    if kind == b"hash":
        return b" ".join(b"%s=%s" % kv for kv in client.hgetall(key).items())
    if kind == b"zset":
        return b" ".join(m for m in client.zrange(key, 0, -1))
    if kind == b"list":
        return b" ".join(client.lrange(key, 0, -1))
    return b""


def test_a_cooldown_from_raw_key_state_refuses_like_any_other(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    record = {"cooldown_until": NOW + 60, "cooldown_reason": "rate_limited"}
    (state / "quota.json").write_text(json.dumps({"month": "2026-09", "keys": {K1: record}}))
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(500))
    router = Router([K1], state=state / "searchfuse.db", clock=FakeClock(NOW), transport=transport)
    with pytest.raises(NoKeyAvailable, match="available again in 60 seconds"):
        router.search("q")
    assert sent == []  # the key's cooldown, read from its raw-key record, held
    router.close()
    (state / "quota.json").unlink()
    assert _files_hold(state, K1) == []


# A raw key where state keeps something else: the record is reset with a
# warning that quotes the value masked, and a file that named keys raw is
# rewritten by fingerprint when it is opened, even if no search ever writes
# (every key disabled), in searchfuse's format and in the skill's.
_RAW_IN_STATE = {
    "a flag": {"month": "2026-09", "keys": {K1: {"disabled": K1}}},
    "a time": {"month": "2026-09", "keys": {K1: {"cooldown_until": K2}}},
    "a count": {"month": "2026-09", "keys": {K1: {"usage": K1}}},
    "the name, all disabled": {"month": "2026-09", "keys": {K1: {"disabled": True}}},
    "the skill's record": {"month": "2026-09", "keys": [{"key": K1, "disabled": True}]},
    "the skill's flag": {"month": "2026-09", "keys": [{"disabled": K2}]},
}


@pytest.mark.parametrize("data", list(_RAW_IN_STATE.values()), ids=list(_RAW_IN_STATE))
def test_a_raw_key_anywhere_in_a_state_file_is_never_kept_or_quoted(
    data: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "quota.json"
    state.write_text(json.dumps(data))
    with caplog.at_level(logging.DEBUG, logger="searchfuse"):
        router = Router([K1], state=state, clock=FakeClock(NOW), transport=_handler())
        assert _files_hold(tmp_path, K1, K2) == []  # at once: no search needed
        shown = router.status()
        try:
            router.search("q")
        except NoKeyAvailable as exc:
            shown.append(exc)  # type: ignore[arg-type]
        router.close()
    assert _files_hold(tmp_path, K1, K2) == []
    assert K1 not in repr(shown) and K2 not in repr(shown)
    said = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if K1 in m or K2 in m], said
