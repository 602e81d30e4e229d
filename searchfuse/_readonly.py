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


def private_copy(state: Path, folder: Path) -> Path:
    """A copy of the state file `state` (with SQLite's WAL, which holds its latest
    changes) in `folder`, readable and writable by this user only."""
    for source in (state, Path(f"{state}-wal")):
        if source.exists():
            target = folder / source.name
            shutil.copyfile(source, target)
            os.chmod(target, 0o600)
    return folder / state.name
