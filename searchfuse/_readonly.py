"""Reading router state this user may not write: what stands in the way, and a private copy.

`searchfuse status` and `diagnose` only read state, so a state folder owned by
another user (a service's), a read-only file or a read-only disk must not stop
them. The stores write even to read (the schema, a month rollover, SQLite's WAL
index, the JSON store's lock file), so these commands read a copy made in a
private temporary folder instead, and say what could not be done: nothing
they learn is saved.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

__all__ = ["blocked_write", "owner_of", "private_copy", "sidecars", "unreadable"]


def sidecars(state: Path) -> list[Path]:
    """The files a store keeps beside `state`: SQLite's WAL and index, the JSON lock
    and the JSON store's claims on shared-cache entries."""
    if state.name.endswith(".json"):
        return [Path(f"{state}.lock"), Path(f"{state}.claims")]
    return [Path(f"{state}-wal"), Path(f"{state}-shm")]


def owner_of(path: Path) -> str:
    """Who owns `path` and its mode: `"it belongs to alice, mode 0600"`."""
    info = path.stat()
    try:
        import pwd

        name = pwd.getpwuid(info.st_uid).pw_name
    except (ImportError, KeyError):
        name = str(info.st_uid)
    return f"it belongs to {name}, mode {stat.S_IMODE(info.st_mode):04o}"


def _read_only_disk(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (AttributeError, OSError):
        return False


def unreadable(state: Path) -> str | None:
    """Why the state file at `state` (or its folder) cannot be read, else `None`."""
    folder = state.parent
    if not os.access(folder, os.X_OK):
        return f"its folder {folder} cannot be entered: {owner_of(folder)}"
    if state.exists() and not os.access(state, os.R_OK):
        return f"permission denied: {owner_of(state)}"
    return None


def blocked_write(state: Path) -> str | None:
    """Why a store cannot write the state at `state` (the file, its folder, or a
    file it keeps beside it), else `None`."""
    folder = state.parent
    if _read_only_disk(folder):
        return "it is on a read-only file system"
    if not os.access(folder, os.W_OK):
        return f"its folder {folder} is not writable for this user: {owner_of(folder)}"
    for path in (state, *sidecars(state)):
        if path.exists() and not os.access(path, os.W_OK):
            return f"{path.name} is not writable for this user: {owner_of(path)}"
    return None


#: Copies made of a database while its writer checkpointed, before one is kept anyway.
_COPY_TRIES = 20


def private_copy(state: Path, folder: Path) -> Path:
    """A copy of the state file `state` (with SQLite's WAL, which holds its latest
    changes) in `folder`, readable and writable by this user only.

    The database and its WAL are copied one after the other: a writer that
    checkpoints in between (the WAL's changes moved into the database, the WAL
    started again) would leave a database without those changes beside a WAL
    that no longer holds them. The copy is made again until neither the
    database nor the WAL's header changed while it was made.
    """
    wal = Path(f"{state}-wal")
    for _ in range(_COPY_TRIES):
        before = _generation(state, wal)
        for source in (state, wal):
            target = folder / source.name
            try:
                shutil.copyfile(source, target)
            except FileNotFoundError:
                target.unlink(missing_ok=True)  # none (any more): none in the copy
                continue
            os.chmod(target, 0o600)
        if _generation(state, wal) == before:
            break
    return folder / state.name


def _generation(state: Path, wal: Path) -> tuple[object, ...]:
    """What a checkpoint changes: the database file, and the WAL's header (its
    salts change when it starts again)."""
    try:
        info = state.stat()
    except OSError:
        return ()
    try:
        with open(wal, "rb") as fh:
            header = fh.read(32)
    except OSError:
        header = b""
    return (info.st_ino, info.st_size, info.st_mtime_ns, header)
