"""FakeClock and the test-mode switch."""

from __future__ import annotations

import threading

import pytest

from searchfuse import _clock
from searchfuse.testing import (
    DEFAULT_START,
    FakeClock,
    is_testing,
    set_testing,
    testing_mode,
)


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock()

    assert clock() == DEFAULT_START
    clock.advance(1.5)
    assert clock() == DEFAULT_START + 1.5
    clock.set(100.0)
    assert clock() == 100.0
    assert FakeClock(start=42)() == 42.0
    assert repr(FakeClock(start=1)) == "FakeClock(1.000)"


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf")])
def test_fake_clock_refuses_bad_steps(bad: float) -> None:
    clock = FakeClock()

    with pytest.raises(ValueError):
        clock.advance(bad)
    assert clock() == DEFAULT_START


def test_fake_clock_is_thread_safe() -> None:
    clock = FakeClock(start=0)

    def worker() -> None:
        for _ in range(1000):
            clock.advance(1)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert clock() == 8000


def test_set_testing_installs_and_removes_the_fake_clock() -> None:
    try:
        clock = set_testing(True)

        assert is_testing()
        assert _clock.now() == clock()
        _clock.sleep(30)  # advances instead of sleeping
        assert clock() == DEFAULT_START + 30
    finally:
        set_testing(False)

    assert not is_testing()
    assert _clock.now() != DEFAULT_START + 30


def test_set_testing_takes_a_given_clock() -> None:
    mine = FakeClock(start=10)
    try:
        assert set_testing(True, clock=mine) is mine
        assert _clock.now() == 10
    finally:
        set_testing(False)


def test_set_testing_false_takes_no_clock() -> None:
    with pytest.raises(TypeError):
        set_testing(False, clock=FakeClock())


async def test_async_sleep_advances_under_test() -> None:
    with testing_mode() as clock:
        await _clock.asleep(12)

        assert clock() == DEFAULT_START + 12


def test_testing_mode_restores_what_was_there() -> None:
    with testing_mode() as outer:
        with testing_mode(FakeClock(start=5)) as inner:
            assert _clock.now() == inner() == 5
        assert _clock.now() == outer()
        _clock.sleep(1)
        assert outer() == DEFAULT_START + 1
    assert not is_testing()


def test_testing_mode_restores_after_an_error() -> None:
    with pytest.raises(RuntimeError), testing_mode():
        raise RuntimeError("boom")

    assert not is_testing()
