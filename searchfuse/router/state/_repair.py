"""Which damaged state files are searchfuse's own (set aside and started again) and
which are something else (refused, never touched).

State is a cache, never ground truth: a torn, empty or bad-valued file that
searchfuse (or the skill it grew from) wrote must not stop every search. But a
path that names a keys file, another program's data or a binary file by
mistake must never be moved or rewritten, so only a file that is recognisably
state is repaired.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any

from searchfuse._files import set_aside

__all__ = ["damage_of_json", "move_aside", "own_sqlite_file"]

log = logging.getLogger("searchfuse.state")

#: Top-level names of a JSON state file, ours or the skill's.
_STATE_NAMES = frozenset(
    {"format_version", "month", "keys", "accounts", "hold_until", "hold_key", "rings", "cache"}
)
#: A name of ours near the start of a file that JSON cannot parse (a torn write).
_TORN_OPENING = re.compile(rb'\A\s*\{\s*"(month|accounts|cache|hold_key|hold_until|rings)"')
#: What only a keys file holds: a raw key, or a key entry.
_KEYS_FILE_MARK = re.compile(rb'tvly-[A-Za-z0-9_-]{8,}|"key"\s*:|"api_key"\s*:')


def damage_of_json(raw: bytes, data: Any = None, parsed: bool = False) -> str | None:
    """What is wrong with JSON state file content `raw` if it is recognisably
    searchfuse's state, torn or with bad values; None if it is something else
    (or not damaged at all). `data`: what `raw` parsed to, when it did."""
    if not raw.strip():
        return "it is empty"
    if b"\x00" in raw or _KEYS_FILE_MARK.search(raw):
        return None  # binary, or it holds keys: not ours to move
    if not parsed:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if _TORN_OPENING.match(raw) or (raw.lstrip().startswith(b"{") and b'"month"' in raw):
            return "it is cut short (a write that never finished)"
        return None
    if not isinstance(data, dict) or "month" not in data or not set(data) <= _STATE_NAMES:
        return None
    bad = [
        f"{name} is not {kind}"
        for name, kind, ok in (
            ("month", "text", isinstance(data.get("month"), str)),
            ("keys", "an object", isinstance(data.get("keys", {}), dict)),
            ("accounts", "an object", isinstance(data.get("accounts", {}), dict)),
        )
        if not ok
    ]
    return "its " + " and ".join(bad) if bad else None


def move_aside(path: Path, why: str, *, damaged: bool = True) -> Path | None:
    """Set the damaged state file `path` aside (see `set_aside`), with one warning.

    `damaged=False`: it is whole, but cannot be used (the original skill's
    records by position that do not match the configured keys)."""
    moved = set_aside(path, time.time())
    if moved is not None:
        log.warning(
            "%s is %s (%s): moved aside to %s (mode 0600) and started again; state is a "
            "cache, so searching goes on (cooldowns it held are relearned from Tavily's "
            "answers)",
            path.name,
            "searchfuse state but damaged" if damaged else "state searchfuse cannot use",
            why,
            moved.name,
        )
    return moved


def own_sqlite_file(path: Path) -> bool:
    """Whether the SQLite file at `path`, which SQLite calls damaged, is searchfuse's:
    its bytes (or its WAL's) still name searchfuse's own table. Its name is no
    proof: another program's database may be given any name."""
    for candidate in (path, Path(f"{path}-wal")):
        try:
            with candidate.open("rb") as fh:
                # State databases are small; a bound keeps a huge file cheap.
                if b"searchfuse_meta" in fh.read(_SCAN_BYTES):
                    return True
        except OSError:
            continue
    return False


#: How much of a damaged database is searched for searchfuse's table name.
_SCAN_BYTES = 64 << 20


def json_or_none(raw: bytes) -> tuple[bool, Any]:
    """(parsed, value) for `raw`: whether it is JSON, and what it holds."""
    try:
        return True, json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False, None
