"""A JSON store's grant on the file it wrote last is `fresh`: one read of the file per search."""

from __future__ import annotations

from pathlib import Path

import pytest

from searchfuse import Router
from searchfuse._secrets import fingerprint
from searchfuse.router.state import Charge, JsonFileStore, State
from searchfuse.testing import FakeClock, FakeTavily

NOW = 1_768_478_400.0
K1, K2 = "tvly-dev-test0001", "tvly-dev-test0002"


def grant(store: JsonFileStore, now: float) -> bool:
    """Grant one charged search on fp1; whether the grant was fresh."""
    got = store.grant(
        now, "fp1", rpm=100, window=61.0, honour_hold=True, charge=Charge("fp1", "acc", None, 1.0)
    )
    assert got.verdict == "ok"
    return got.fresh


def test_a_grant_is_fresh_only_on_the_file_the_store_wrote_last(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    mine, other = JsonFileStore(path), JsonFileStore(path)  # as two processes
    assert not grant(mine, NOW)  # nothing written by this store yet
    assert grant(mine, NOW + 1)
    assert grant(mine, NOW + 2)

    def disable(state: State) -> None:
        state.key("fp2").disabled = True

    other.update(NOW + 3, disable)  # another process writes
    assert not grant(mine, NOW + 4)
    assert grant(mine, NOW + 5)
    # The other store's cache entry is a write too.
    other.cache_set("q", "v", NOW + 100, 10)
    assert not grant(mine, NOW + 6)
    # The file removed (by hand, a clean-up): the next grant writes it anew.
    path.unlink()
    assert not grant(mine, NOW + 6.5)
    assert grant(mine, NOW + 6.6)
    # A spend-checked or uncharged grant is never marked fresh (as on SQLite).
    plain = mine.grant(NOW + 7, "fp1", rpm=100, window=61.0, honour_hold=True)
    assert plain.verdict == "ok" and not plain.fresh
    assert mine.read(NOW + 7).key("fp1").searches == 2  # charged since the removal
    mine.close()
    other.close()


def test_a_burst_reads_the_state_file_once_per_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, clock = FakeTavily(), FakeClock(NOW)
    fake.add_key(K1)
    state = tmp_path / "quota.json"
    router = Router([K1], state=str(state), clock=clock, transport=fake.transport())
    router.search("warm up")
    router.search("warm up again")  # the first grant on the file and the next look
    reads = []
    real = JsonFileStore._bytes

    def counted(self: JsonFileStore) -> bytes | None:
        reads.append(1)
        return real(self)

    monkeypatch.setattr(JsonFileStore, "_bytes", counted)
    for i in range(20):
        clock.advance(0.5)
        router.search(f"q{i}")
    # One read under the lock per search; the view was not read again between them.
    assert len(reads) == 20
    assert len([r for r in fake.requests if r.path == "/search"]) == 22
    router.close()


def test_a_key_another_process_disabled_is_not_used_on_the_next_search(tmp_path: Path) -> None:
    fake, clock = FakeTavily(), FakeClock(NOW)
    fake.add_key(K1)
    fake.add_key(K2)
    state = tmp_path / "quota.json"
    mine = Router([K1, K2], state=str(state), clock=clock, transport=fake.transport())
    for i in range(3):  # a burst: the last grants were fresh
        mine.search(f"mine {i}")
    used = fake.requests[-1].key_fingerprint
    assert used in (fingerprint(K1), fingerprint(K2))
    burst_key = K1 if used == fingerprint(K1) else K2
    other = Router([burst_key], state=str(state), clock=clock, transport=fake.transport())
    fake.revoke(burst_key)
    with pytest.raises(Exception):  # noqa: B017 - its only key is revoked
        other.search("other")
    before = len(fake.requests)
    clock.advance(0.5)
    mine.search("after")
    sent = [r for r in fake.requests[before:] if r.path == "/search"]
    # The key the other process found revoked is not tried again: straight to the other one.
    assert [r.key_fingerprint for r in sent] == [fingerprint(K2 if burst_key == K1 else K1)], sent
    mine.close()
    other.close()
