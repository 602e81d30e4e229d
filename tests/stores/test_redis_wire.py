"""The Redis grant's cost: what it writes per call, the expiries it keeps, and its short
way to the server (a command packed once, sent on a kept connection) with the ordinary
way behind it whenever that fails."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from typing import Any

import pytest

from searchfuse.errors import StoreUnavailable
from searchfuse.router.state import Charge, RedisStore
from searchfuse.router.state._redis_tx import keep_ms
from searchfuse.router.state._redis_wire import MISSED

NOW = 1_768_478_400.0  # 2026-01-15 12:00 UTC
MONTH_END = 1_769_904_000.0  # 2026-02-01 00:00 UTC
FP = "fp1"
CHARGE = Charge(FP, "acct", "team", 1.0)


def store(url: str) -> RedisStore:
    return RedisStore(url, namespace=f"t{uuid.uuid4().hex[:12]}")


def grant(s: RedisStore, at: float, **options: Any) -> Any:
    kwargs: dict[str, Any] = {"rpm": 100, "window": 60.0, "honour_hold": True, "charge": CHARGE}
    kwargs.update(options)
    return s.grant(at, FP, **kwargs)


def calls(s: RedisStore) -> dict[str, int]:
    """Commands the server ran (those a script ran included), by name."""
    return {
        name.removeprefix("cmdstat_"): int(row["calls"])
        for name, row in s.client.info("commandstats").items()
    }


def ttl(s: RedisStore, key: str) -> float:
    return float(s.client.pttl(key)) / 1000


def test_a_lone_writers_grant_rewrites_no_expiry_and_no_unchanged_field(redis_url: str) -> None:
    s = store(redis_url)
    for at in (0, 1):  # the month seen, then the script's first grant
        grant(s, NOW + at)
    s.client.config_resetstat()
    for at in (2, 3, 4):
        assert grant(s, NOW + at).verdict == "ok"
    ran = calls(s)
    assert ran["evalsha"] == 3
    # The records' expiries already end where they must: none is written again,
    # nor the key's account (the same) nor the pacing log's size.
    assert "pexpire" not in ran and "hdel" not in ran
    state = s.read(NOW + 4)
    assert state.keys[FP].searches == 5 and state.keys[FP].account == "team"
    assert s.client.hget(s.ring_key(f"search:{FP}"), "size") == "100"
    s.close()


@pytest.mark.parametrize(
    "spoil",
    [
        lambda c, key: c.persist(key),
        lambda c, key: c.pexpire(key, 5000),
        lambda c, key: c.pexpire(key, 40 * 86400 * 1000),
    ],
    ids=["no expiry", "an expiry too soon", "an expiry weeks too late"],
)
@pytest.mark.parametrize("at", [NOW, MONTH_END - 60], ids=["mid-month", "a minute before its end"])
def test_records_still_expire_a_day_after_the_month_ends(
    redis_url: str, spoil: Any, at: float
) -> None:
    s = store(redis_url)
    for t in (at - 2, at - 1):
        grant(s, t)
    for key in (s.k(FP), s.a("acct")):
        spoil(s.client, key)
    grant(s, at)
    # A day after the month ends, counted from `at` (an hour later at most).
    want = keep_ms("2026-01", at) / 1000
    for key in (s.k(FP), s.a("acct")):
        assert want - 2 <= ttl(s, key) <= want + 3601, key
    grant(s, at + 1)
    for key in (s.k(FP), s.a("acct")):
        assert want - 3 <= ttl(s, key) <= want + 3601
    s.close()


def test_a_pacing_log_outlives_its_newest_slot_by_a_window(redis_url: str) -> None:
    s = store(redis_url)
    ring = s.ring_key(f"search:{FP}")
    for at in range(4):
        grant(s, NOW + at)
        assert 60 <= ttl(s, ring) <= 120
    s.client.pexpire(ring, 59_000)  # less than a window left: moved to two
    grant(s, NOW + 4)
    assert 119 <= ttl(s, ring) <= 120
    s.client.persist(ring)
    grant(s, NOW + 5)
    assert 119 <= ttl(s, ring) <= 120
    s.close()


def test_the_keys_account_is_written_when_it_changes(redis_url: str) -> None:
    s = store(redis_url)
    for at in (0, 1):
        grant(s, NOW + at)
    assert s.read(NOW + 1).keys[FP].account == "team"
    grant(s, NOW + 2, charge=Charge(FP, "acct", "other", 1.0))
    assert s.read(NOW + 2).keys[FP].account == "other"
    grant(s, NOW + 3, charge=Charge(FP, "acct", None, 1.0))
    assert s.read(NOW + 3).keys[FP].account is None
    assert s.read(NOW + 3).keys[FP].searches == 4
    s.close()


def test_a_grant_takes_no_connection_from_the_pool(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis

    s = store(redis_url)
    for at in (0, 1):
        grant(s, NOW + at)
    taken: list[int] = []
    real = redis.ConnectionPool.get_connection

    def count(self: Any, *args: Any, **kwargs: Any) -> Any:
        taken.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(redis.ConnectionPool, "get_connection", count)
    assert [grant(s, NOW + at).verdict for at in (2, 3, 4)] == ["ok"] * 3
    assert taken == []
    assert s.read(NOW + 4).keys[FP].searches == 5
    s.close()


def test_a_lost_connection_or_a_flushed_script_costs_one_ordinary_grant(redis_url: str) -> None:
    s = store(redis_url)
    for at in (0, 1):
        grant(s, NOW + at)
    s.client.client_kill_filter(_type="normal", skipme=True)  # the kept connection too
    assert grant(s, NOW + 2).verdict == "ok"
    s.client.script_flush()
    assert grant(s, NOW + 3).verdict == "ok"
    s.client.config_resetstat()
    assert grant(s, NOW + 4).verdict == "ok"
    assert calls(s)["evalsha"] == 1  # the short way again, script loaded
    state = s.read(NOW + 4)
    assert state.keys[FP].searches == 5 and state.accounts["acct"].local_credits == 5.0
    s.close()


def test_threads_granting_at_once_count_every_search_once(redis_url: str) -> None:
    s = store(redis_url)
    grant(s, NOW)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for i in range(25):
                assert grant(s, NOW + 1 + i / 100, rpm=None).verdict == "ok"
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    state = s.read(NOW + 2)
    assert state.keys[FP].searches == 101
    assert state.accounts["acct"].local_credits == 101.0
    s.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_grants_on_its_own_connection(redis_url: str) -> None:
    s = store(redis_url)
    for at in (0, 1):
        grant(s, NOW + at)
    pid = os.fork()
    if pid == 0:  # the child: its parent's connection must not be read from here
        try:
            fresh = s._wire._conn is None  # the parent's socket forgotten
            ok = fresh and all(grant(s, NOW + 2 + i / 10).verdict == "ok" for i in range(5))
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [grant(s, NOW + 3 + i / 10).verdict for i in range(3)] == ["ok"] * 3
    assert s.read(NOW + 4).keys[FP].searches == 10
    s.close()


def test_a_counted_line_is_the_line_with_its_use() -> None:
    from dataclasses import replace

    from searchfuse.router.state._budgets import Line
    from searchfuse.router.state._redis_grant import _counted

    line = Line(2, "user:u-1:usd:month", "2026-01", 5.0, 0.75, MONTH_END, 1.5, MONTH_END + 9)
    assert _counted(line, 3.25, "2026-01") == replace(line, used=3.25)


class _LosingProxy:
    """A loopback TCP proxy in front of Redis that, once armed, lets the next
    `EVALSHA` through to the server and closes the client's connection instead of
    handing it the reply: the script ran, its answer never arrived."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.armed = False
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            asked = {"evalsha": False}
            threading.Thread(target=self._pump, args=(client, server, asked, True)).start()
            threading.Thread(target=self._pump, args=(server, client, asked, False)).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, asked: dict[str, bool], up: bool
    ) -> None:
        try:
            while chunk := src.recv(65536):
                if up:
                    asked["evalsha"] = b"EVALSHA" in chunk
                elif self.armed and asked["evalsha"]:
                    self.armed = False
                    break  # the reply is dropped and the client's connection closed
                dst.sendall(chunk)
        except OSError:
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize("way", ["short", "ordinary"])
def test_a_grant_whose_reply_is_lost_after_the_script_ran_is_not_run_again(
    redis_url: str, way: str
) -> None:
    """The command left and the server ran it; the connection dropped before the
    answer came. Running it again (the ordinary way behind the short one, or a
    retry of redis-py's) would count the search twice and take a second pacing
    slot: the store says it cannot be reached instead, either way."""
    host, port = redis_url.removeprefix("redis://").split("/")[0].split(":")
    proxy = _LosingProxy((host, int(port)))
    namespace = f"t{uuid.uuid4().hex[:12]}"
    s = RedisStore(f"redis://127.0.0.1:{proxy.port}/0", namespace=namespace)
    if way == "ordinary":
        s._wire.send = lambda command: MISSED  # type: ignore[method-assign]
    try:
        for at in (0, 1):
            assert grant(s, NOW + at).verdict == "ok"
        proxy.armed = True
        with pytest.raises(StoreUnavailable, match="cannot be reached"):
            grant(s, NOW + 2)
        assert not proxy.armed  # the reply that was lost was the grant's
        direct = RedisStore(redis_url, namespace=namespace)
        assert direct.read(NOW + 3).keys[FP].searches == 3  # counted once, not twice
        assert direct.pacing_log(f"search:{FP}") == [NOW, NOW + 1, NOW + 2]
        assert grant(s, NOW + 3).verdict == "ok"  # and the next search goes on
        direct.close()
    finally:
        s.close()
        proxy.close()


@pytest.mark.parametrize("kind", ["ConnectionPool", "BlockingConnectionPool"])
def test_a_client_with_a_small_pool_keeps_all_of_it_for_the_ordinary_way(
    redis_url: str, kind: str
) -> None:
    """The grant's kept connection is its own, not one of the client's pool: a
    pool bounded to what the store needs at once (two, when a month starts) is
    not left one short by it."""
    import redis

    options: dict[str, Any] = {"max_connections": 2, "decode_responses": True}
    if kind == "BlockingConnectionPool":
        options["timeout"] = 0.05
    pool = getattr(redis, kind).from_url(redis_url, **options)
    s = RedisStore(client=redis.Redis(connection_pool=pool), namespace=f"t{uuid.uuid4().hex[:12]}")
    for at in (0, 1, 2):
        assert grant(s, NOW + at).verdict == "ok"
    assert s._wire._conn is not None  # the short way was taken

    def bump(state: Any) -> None:
        state.key(FP).searches += 1

    later = MONTH_END + 10 * 86400
    s.update(later, bump)  # a new month: two of the pool's connections at once
    assert s.read(later).keys[FP].searches == 1
    assert grant(s, later + 1).verdict == "ok"
    assert s.read(later + 1).keys[FP].searches == 2
    s.close()
    pool.disconnect()


def test_a_client_that_answers_bytes_is_named_when_the_store_is_made(redis_url: str) -> None:
    """Every answer the store reads is text: a client made without
    decode_responses=True failed each grant with "200 conflicting writes"."""
    import redis

    from searchfuse.errors import ConfigError

    client = redis.Redis.from_url(redis_url)
    with pytest.raises(ConfigError, match="decode_responses=True"):
        RedisStore(client=client, namespace=f"t{uuid.uuid4().hex[:12]}")
    client.close()


def test_a_store_on_a_client_names_the_clients_server(redis_url: str) -> None:
    """Messages and repr name the server the given client talks to (they named the
    default redis://127.0.0.1:6379/0), never its password."""
    import redis

    host, port = redis_url.removeprefix("redis://").split("/")[0].split(":")
    client = redis.Redis(host=host, port=int(port), db=3, password=None, decode_responses=True)
    s = RedisStore(client=client, namespace=f"t{uuid.uuid4().hex[:12]}")
    assert repr(s).startswith(f"RedisStore('redis://{host}:{port}/3'")
    s.close()
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed = free.getsockname()[1]
    gone = redis.Redis(
        host="127.0.0.1", port=closed, password="s3cret", decode_responses=True, retry=None
    )
    with pytest.raises(StoreUnavailable) as caught:
        RedisStore(client=gone, namespace="t-gone")
    assert f"127.0.0.1:{closed}" in str(caught.value) and "s3cret" not in str(caught.value)


def test_a_pacing_log_rebuilt_for_a_new_rate_expires_even_when_the_grant_is_paced(
    redis_url: str,
) -> None:
    """A new rate rebuilds the log (the careful way); the grant that rebuilt it may
    then be paced and take no slot. The log still expires a window after its
    newest time, as one written by a grant does (it was kept for ever)."""
    s = store(redis_url)
    for at in (0, 1, 2):
        assert grant(s, NOW + at, rpm=3).verdict == "ok"
    assert grant(s, NOW + 3, rpm=2).verdict == "paced"  # rebuilt with two slots, none free
    ring = s.ring_key(f"search:{FP}")
    assert s.client.hget(ring, "size") == "2"
    assert 60 <= ttl(s, ring) <= 120
    s.close()
