"""A Redis key of searchfuse's holding another type is reset with one warning naming it.

Every key the store keeps, each given the wrong type the way a person or
another program would (`RPUSH` on a string, `SET` on a hash...): searches,
status and the shared cache go on, and the log names the key once.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from searchfuse import Router
from searchfuse.router.state import RedisStore
from searchfuse.testing import FakeClock, FakeTavily

K1 = "tvly-dev-test0001"

#: Each key (after the namespace), how to give it the wrong type.
CASES = [
    ("month", "list"),
    ("seq", "hash"),
    ("epoch", "list"),
    ("hold", "string"),
    ("revs", "string"),
    ("cache", "list"),
    ("k:", "string"),
    ("a:", "list"),
    ("ring:", "string"),
    ("c:", "hash"),
]


def _spoil(client: object, name: str, how: str) -> None:
    client.delete(name)  # type: ignore[attr-defined]
    if how == "list":
        client.rpush(name, "x")  # type: ignore[attr-defined]
    elif how == "hash":
        client.hset(name, "x", "1")  # type: ignore[attr-defined]
    else:
        client.set(name, "x")  # type: ignore[attr-defined]


@pytest.mark.parametrize(("key", "how"), CASES)
def test_a_wrong_typed_key_is_reset_once_and_named(
    redis_url: str, key: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    ns = f"t{uuid.uuid4().hex[:12]}"
    clock = FakeClock()
    fake = FakeTavily([K1], clock=clock)
    router = Router(
        [K1],
        state=RedisStore(redis_url, namespace=ns),
        clock=clock,
        transport=fake.transport(),
    )
    store = router.store
    assert isinstance(store, RedisStore)
    router.search("before")
    store.cache_set("entry", '"v"', clock() + 600, 10)
    existing = sorted(store.client.scan_iter(match=f"{ns}:{key}*"))
    name = existing[0] if key.endswith(":") else f"{ns}:{key}"
    assert key.endswith(":") is False or existing, f"no {key} key to spoil"
    _spoil(store.client, name, how)

    caplog.set_level(logging.WARNING, "searchfuse")
    assert router.search("after")["results"]  # never "answered an error (ResponseError)"
    (status,) = router.status()
    assert status.searches >= 1
    store.cache_set("entry2", '"w"', clock() + 600, 10)
    assert store.cache_get("entry2", clock()) == '"w"'
    assert "entry2" in store.cache_keys(clock())
    store.cache_get("entry", clock())  # a miss or the value, never an error
    named = [r.getMessage() for r in caplog.records if repr(name) in r.getMessage()]
    assert len(named) == 1, caplog.text
    assert "reset" in named[0]
    assert store.client.type(name) != how
    assert len(fake.searches) == 2
    router.close()


def test_a_second_handle_sees_every_record_after_the_change_log_was_reset(
    redis_url: str,
) -> None:
    ns = f"t{uuid.uuid4().hex[:12]}"
    now = 1_768_478_400.0
    first = RedisStore(redis_url, namespace=ns)
    for fp in ("fp1", "fp2"):
        first.update(now, lambda s, fp=fp: setattr(s.key(fp), "searches", 3))
    token = first.changes(now, None).token
    first.client.delete(f"{ns}:revs")
    first.client.rpush(f"{ns}:revs", "junk")
    second = RedisStore(redis_url, namespace=ns)
    second.update(now, lambda s: setattr(s.key("fp1"), "searches", 4))
    seen = first.changes(now, token)
    assert seen.complete  # the epoch moved: every reader reads everything again
    assert {fp: ks.searches for fp, ks in seen.keys.items()} == {"fp1": 4, "fp2": 3}
    first.close()
    second.close()
