"""The SQLite store's WAL checkpoint, in a thread of its own: no search waits for it."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from pathlib import Path

__all__ = ["Checkpointer"]

log = logging.getLogger("searchfuse.state")


class Checkpointer:
    """A daemon thread that checkpoints the WAL when asked (`PRAGMA
    wal_checkpoint(PASSIVE)`: it never waits for readers or writers).

    Started on first use, one per store and process; `close` stops it.
    """

    def __init__(self, path: Path, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.done = 0
        self._wake = threading.Event()
        self._closing = False
        self._pid = os.getpid()
        self._thread = threading.Thread(
            target=self._run, name=f"searchfuse-checkpoint-{path.name}", daemon=True
        )
        self._thread.start()

    def alive(self) -> bool:
        return self._pid == os.getpid() and self._thread.is_alive()

    def request(self) -> None:
        self._wake.set()

    def close(self, timeout: float = 5.0) -> None:
        self._closing = True
        self._wake.set()
        if self.alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._closing:
                    return
                try:
                    if conn is None:
                        conn = sqlite3.connect(
                            self.path, timeout=self.busy_timeout, isolation_level=None
                        )
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.done += 1
                except sqlite3.Error as exc:
                    # The next commit's checkpoint, or SQLite's own, will do it.
                    log.debug("checkpoint of %s failed: %s", self.path.name, exc)
        finally:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
