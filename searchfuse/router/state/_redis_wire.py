"""The grant's short way to the server: its command packed once, sent on a kept connection.

A search's grant (`_redis_grant`) sends the same `EVALSHA` each time but for
the time and a budget's keep-until. Through redis-py every call packs its
twenty-odd arguments again, takes a connection from the pool and gives it
back: together more than the round trip itself. `Packed` holds the command as
the bytes Redis reads (RESP), with holes for the words that change; `Wire`
sends it on a connection it keeps and reads the reply with that connection's
own parser. The wire makes that connection from the client's pool settings,
outside the pool: a pool bounded to what the application needs at once
(`max_connections`) keeps all of it.

The short way never runs a grant twice. Before the command leaves, anything
that stops it (the connection busy in another thread, none to be had, the
kept one closed by the server meanwhile: reconnected first, as redis-py's
pool does) sends the caller the ordinary way, `Script.__call__` inside
`_call`, with its loading and its errors named; so does an error the server
answers (the script not loaded after a restart, a key of another type). Once
the command has left, a lost connection or a timeout is raised as it is: the
server may have run the script, and running it again would count the search
twice (redis-py's own way does not retry either).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

__all__ = ["MISSED", "Packed", "Wire"]

#: What `Wire.send` answers when the caller must take the ordinary way.
MISSED: Any = object()
#: Every wire of this process: a forked child forgets their connections (its parent's).
_WIRES: weakref.WeakSet[Wire] = weakref.WeakSet()


def _bulk(word: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(word), word)


class Packed:
    """A command as RESP bytes, packed once, with holes at `holes` (word positions)."""

    def __init__(self, words: Sequence[bytes], holes: Sequence[int]) -> None:
        self.words = list(words)
        self.holes = tuple(holes)
        parts: list[bytes] = []
        run = [b"*%d\r\n" % len(words)]
        for i, word in enumerate(words):
            if i in self.holes:
                parts.append(b"".join(run))
                run = []
            else:
                run.append(_bulk(word))
        parts.append(b"".join(run))
        self._parts = parts

    def words_with(self, values: Sequence[bytes]) -> list[bytes]:
        """The command's words with `values` in its holes (for redis-py's own way)."""
        words = self.words.copy()
        for at, value in zip(self.holes, values, strict=True):
            words[at] = value
        return words

    def filled(self, values: Sequence[bytes]) -> bytes:
        """The command with `values` in its holes, in order."""
        out = [self._parts[0]]
        for value, part in zip(values, self._parts[1:], strict=True):
            out += (_bulk(value), part)
        return b"".join(out)


class Wire:
    """A connection made as `client`'s pool makes them, kept for packed commands
    (see the module)."""

    def __init__(self, client: Any, redis: Any) -> None:
        pool = getattr(client, "connection_pool", None)
        # Only redis-py's own client and pools: anything else takes the ordinary way.
        self._pool: Any = pool if isinstance(pool, redis.ConnectionPool) else None
        self._errors = redis.RedisError
        self._answered = redis.ResponseError
        self._lock = threading.Lock()
        self._conn: Any = None
        _WIRES.add(self)

    def send(self, command: bytes) -> Any:
        """The server's reply to `command`, or `MISSED` (take the ordinary way);
        a connection lost or timed out after the command left is raised."""
        if self._pool is None or not self._lock.acquire(blocking=False):
            return MISSED
        try:
            try:
                conn = self._ready()
            except self._errors:
                self._drop()
                return MISSED  # nothing was sent: the ordinary way tells why
            try:
                conn.send_packed_command([command], check_health=False)
                return conn.read_response()
            except self._answered:
                return MISSED  # the reply was read whole: the connection stays usable
            except BaseException:
                self._drop()
                raise
        finally:
            self._lock.release()

    def _ready(self) -> Any:
        """The kept connection, connected and with nothing to read (a connection
        the server closed reads as its end): made again if it is not."""
        conn = self._conn
        if conn is None:
            pool = self._pool
            conn = self._conn = pool.connection_class(**pool.connection_kwargs)
        conn.connect()
        if conn.can_read():
            conn.disconnect()
            conn.connect()
        return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.disconnect()

    def close(self) -> None:
        """Close the kept connection (the pool's are the client's to close)."""
        with self._lock:
            self._drop()


def _forget() -> None:
    """In a forked child: every wire's connection is its parent's; never use it."""
    for wire in list(_WIRES):
        wire._conn = None
        wire._lock = threading.Lock()


os.register_at_fork(after_in_child=_forget)
