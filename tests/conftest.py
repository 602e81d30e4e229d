"""Suite-wide fixtures (a scripted Tavily, a fake clock) and checks (no key in any log)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from searchfuse.testing import FakeClock

from .scripted import Upstream

# Every key the suite uses is made up and ends in ``test`` plus four digits;
# masked forms (``tvly-dev-…0001``) do not match.
RAW_KEY = re.compile(r"tvly-(?:[a-z]+-)?[A-Za-z]*test\d{4}")


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
        if RAW_KEY.search(text):
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
