"""Suite-wide fixtures (a scripted Tavily, a fake clock) and checks (no key in any log)."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from searchfuse.testing import FakeClock

from .scripted import Upstream

# Tables are laid out for the terminal's width: the suite's is fixed, whether it runs in an
# 80-column terminal, with its output piped, or in a pytest-xdist worker (which sets 80).
os.environ["COLUMNS"] = "120"

# Every key the suite uses is made up and ends in ``test`` plus four digits
# (keys sharing a prefix add a tail); masked forms (``tvly-dev-…0001``) do not match.
RAW_KEY = re.compile(r"tvly-(?:[a-z]+-)?[A-Za-z]*test\d{4}")
# A masked form shows four characters after the ellipsis; more means the tail of a
# longer key survived the masking of a shorter one that is its prefix.
LEAKED_TAIL = re.compile(r"…[A-Za-z0-9_-]{5,}")
# Files a test may write keys into on purpose: keys files, their backups, .env files.
KEY_FILE = re.compile(r"^keys[\w.-]*\.json$|^keys\.json\.bak\.|\.env$|^\.env|\.py$")


def leaks_in(text: str) -> list[str]:
    """Raw keys, or tails of prefix-sharing keys, found in ``text``."""
    return [m.group(0) for m in RAW_KEY.finditer(text)] + [
        m.group(0) for m in LEAKED_TAIL.finditer(text)
    ]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.leaks: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a broken record is not ours to judge here
            return
        if record.exc_info and record.exc_info[1] is not None:
            text += " " + str(record.exc_info[1])
        if leaks_in(text):
            self.leaks.append(f"{record.name}: {text}")


@pytest.fixture(autouse=True)
def no_key_in_logs() -> Iterator[None]:
    """Fail any test during which a raw key appeared in a log record of searchfuse."""
    handler = _Collect()
    logger = logging.getLogger("searchfuse")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
    assert not handler.leaks, f"raw key in log records: {handler.leaks}"


def _is_keys_file(text: str) -> bool:
    """A keys file by content (any name): a JSON list of keys or an object with a key list."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, list) or (isinstance(data, dict) and isinstance(data.get("keys"), list))


@pytest.fixture(autouse=True)
def no_key_in_files(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail any test that left a raw key in a file searchfuse wrote (state, temp, moved-aside).

    Keys files (and their backups), which hold keys by design, are exempt.
    """
    yield
    folder = request.node.funcargs.get("tmp_path")
    if not isinstance(folder, Path) or not folder.exists():
        return
    found = []
    for path in folder.rglob("*"):
        if not path.is_file() or KEY_FILE.search(path.name) or path.stat().st_size > 8_000_000:
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        if _is_keys_file(text):
            continue
        if hits := leaks_in(text):
            found.append(f"{path.relative_to(folder)}: {hits[:3]}")
    assert not found, f"raw key in files written: {found}"


@pytest.fixture
def upstream(httpx_mock: Any) -> Upstream:
    """Tavily scripted per key on pytest-httpx (``/usage`` answers 200 throughout)."""
    return Upstream(httpx_mock)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    return tmp_path / "state" / "quota.json"
