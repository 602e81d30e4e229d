"""The JSON store's claims on shared-cache entries: `<file>.claims`, read and written
only under the store's lock.

A claim lets one process search for a missing entry while the others wait for
it (see `Store.cache_claim`). Claims live beside the state file, not in it: a
claim is taken on every miss, and a state file that changed makes every other
process parse it again. The file holds `{"<entry>": ["<owner>", <until>]}`,
is mode 0600, and is removed when the last claim in it ends. It is written in
place (only a holder of the lock reads it): a process killed mid-write leaves
text that reads as no claims, which costs at most one more search.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
from pathlib import Path

from searchfuse._files import PRIVATE, write_all
from searchfuse.errors import StoreUnavailable
from searchfuse.router.state._json_text import read_all

__all__ = ["Claims"]

#: The largest claims file read; anything larger is not ours and reads as no claims.
MAX_BYTES = 1 << 20

#: Never through a symbolic link, never waiting on a FIFO, never inherited.
_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class Claims:
    """The claims file of a JSON store (its path: the state file's, plus `.claims`)."""

    def __init__(self, state_path: Path) -> None:
        self.path = Path(str(state_path) + ".claims")

    def _error(self, problem: str) -> StoreUnavailable:
        return StoreUnavailable(
            self.path.name, problem, f"remove {self.path.name}: searchfuse makes it again"
        )

    def _read(self, now: float) -> dict[str, tuple[str, float]]:
        """The claims that have not run out at `now` (wall-clock seconds)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | _FLAGS)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise self._error(f"cannot be read ({exc.strerror})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise self._error("is not a regular file")
            raw = b"" if info.st_size > MAX_BYTES else read_all(fd, info.st_size)
        finally:
            os.close(fd)
        try:
            data = json.loads(raw)
        except ValueError:
            return {}  # torn by a killed writer, or not ours: no claims
        if not isinstance(data, dict):
            return {}
        live = {}
        for key, held in data.items():
            if (
                isinstance(held, list)
                and len(held) == 2
                and isinstance(held[0], str)
                and isinstance(held[1], int | float)
                and not isinstance(held[1], bool)
                and math.isfinite(held[1])
                and held[1] > now
            ):
                live[str(key)] = (held[0], float(held[1]))
        return live

    def _write(self, claims: dict[str, tuple[str, float]]) -> None:
        if not claims:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            return
        text = json.dumps({k: list(v) for k, v in sorted(claims.items())}).encode("utf-8")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | _FLAGS, PRIVATE)
        except OSError as exc:
            raise self._error(f"cannot be written ({exc.strerror})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise self._error("is not a regular file")
            if stat.S_IMODE(info.st_mode) != PRIVATE:
                os.fchmod(fd, PRIVATE)
            os.ftruncate(fd, 0)
            write_all(fd, text)
        except OSError as exc:
            raise self._error(f"cannot be written ({exc.strerror})") from None
        finally:
            os.close(fd)

    def claim(self, key: str, owner: str, until: float, now: float) -> bool:
        """Claim `key` for `owner` until `until`; True when `owner` holds it now.
        The caller holds the store's lock."""
        if until <= now:
            return True  # a claim that has already run out holds nothing
        claims = self._read(now)
        held = claims.get(key)
        if held is not None and held[0] != owner:
            return False
        claims[key] = (owner, until)
        self._write(claims)
        return True

    def release(self, key: str, owner: str, now: float) -> None:
        """End `owner`'s claim on `key` (another's is left alone). The caller holds
        the store's lock."""
        claims = self._read(now)
        held = claims.pop(key, None)
        if held is not None and held[0] == owner:
            self._write(claims)
