"""Fixtures for guard tests: a fake clock and a search backend that records what reached it."""

from __future__ import annotations

import pytest

from searchfuse.testing import FakeClock
from tests.guard.helpers import Backend


@pytest.fixture
def clock() -> FakeClock:
    """Time that moves only when a test says so."""
    return FakeClock()


@pytest.fixture
def backend(clock: FakeClock) -> Backend:
    """A recording search backend on the test's clock."""
    return Backend(clock)
