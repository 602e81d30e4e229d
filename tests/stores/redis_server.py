"""A real redis-server for the suite: a free loopback port, a temporary folder, stopped by pid."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """Start redis-server on 127.0.0.1 in ``folder``; yields its URL, stops it on exit."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [
            exe,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(folder),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", str(folder / "redis.log"),
            "--unixsocket", str(folder / "redis.sock"),
            "--unixsocketperm", "700",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: see {folder / 'redis.log'}")
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
