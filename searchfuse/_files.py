"""Safe file handling for files that hold keys or state.

Incident 5 (a test overwrote the only copy of four live keys) is why every
rewrite here is atomic, private (mode 0600) and, for key files, preceded by a
byte-identical backup.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

__all__ = ["atomic_write", "backup", "move_aside", "timestamp"]

PRIVATE = 0o600


def timestamp(epoch: float) -> str:
    """``20261130T081300Z``: sortable, filename-safe, UTC."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch))


def _free_name(base: Path) -> Path:
    """``base`` if free, else ``base.1``, ``base.2``... (two backups in one second)."""
    if not base.exists():
        return base
    n = 1
    while True:
        candidate = base.with_name(f"{base.name}.{n}")
        if not candidate.exists():
            return candidate
        n += 1


def atomic_write(path: Path, data: bytes, mode: int = PRIVATE, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` atomically: a temp file in the same folder, fsync, rename.

    Readers see the old content or the new one, never a half-written file.
    The file is created with ``mode`` (0600) before any byte is written.
    ``durable=False`` skips the fsyncs: for files that are a cache (router
    state), where a crash may lose the last update but never leaves a torn file.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if not durable:
        return
    # Make the rename itself durable.
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def backup(path: Path, epoch: float) -> Path:
    """Copy ``path`` byte for byte to ``<name>.bak.<timestamp>`` (mode 0600) and return it.

    The copy is read back and compared before this returns, so a caller may
    rely on it when it goes on to rewrite the original.
    """
    path = Path(path)
    data = path.read_bytes()
    target = _free_name(path.with_name(f"{path.name}.bak.{timestamp(epoch)}"))
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(target, PRIVATE)
    if target.read_bytes() != data:
        raise OSError(f"backup {target.name} does not match {path.name}")
    return target


def move_aside(path: Path, label: str, epoch: float) -> Path:
    """Rename ``path`` to ``<name>.<label>.<timestamp>`` and return the new path."""
    path = Path(path)
    target = _free_name(path.with_name(f"{path.name}.{label}.{timestamp(epoch)}"))
    os.replace(path, target)
    with contextlib.suppress(OSError):
        os.chmod(target, PRIVATE)
    return target
